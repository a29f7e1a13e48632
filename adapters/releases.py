"""The release matrix: the library releases on which each supported range (adapters/versions.py) is measured.

Plain data, readable without the project's dependencies (``nox -s release-matrix`` reads it). Each entry is one
environment: the requirements that pin a library release beside the project's extras, and the built-in adapters
run there with their expectation files. Each range's lower bound and its latest release are entries, as are the
releases with known defects; docs/adapters.md ("Measured releases") has the verdicts.
"""

#: the model families of adapters/hf/families that take transformers >= 5.0 (hf-deepseek-v3: >= 5.13)
FAMILIES_5_0 = (
    "hf-gpt-neox",
    "hf-cohere",
    "hf-phi3",
    "hf-gemma2",
    "hf-olmo2",
    "hf-qwen3",
    "hf-mistral",
    "hf-gpt-oss",
    "hf-llama4",
    "hf-mixtral",
    "hf-qwen3-moe",
    "hf-olmoe",
    "hf-switch-transformers",
    "hf-qwen2-vl",
    "hf-qwen3-vl",
)
#: the Liger adapters: its kernels, and its RMSNorm's other two casting modes
LIGER = ("liger", "liger-gemma", "liger-none")

#: name -> (the pip requirements that pin the release, the built-in adapters run on it)
RELEASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = {
    # torch's lower bound (2.4: F.rms_norm) with the Triton it was built with, and the CI's release
    "torch-2.4.0": (("torch==2.4.0", "triton==3.0.0"), ("torch", "torch-compile")),
    "torch-2.5.1": (("torch==2.5.1", "triton==3.1.0"), ("torch", "torch-compile")),
    "torch-2.13.0": (("torch==2.13.0",), ("torch", "torch-compile")),
    # transformers 4.45, the lower bound of the adapters that take 4.x; the last 4.x; the latest 5.x
    "transformers-4.45.0": (("transformers==4.45.0",), ("hf-llama", "hf-gemma", "hf-t5")),
    "transformers-4.57.6": (("transformers==4.57.6",), ("hf-llama", "hf-gemma", "hf-t5")),
    "transformers-5.25.0": (
        ("transformers==5.25.0",),
        ("hf-llama", "hf-gemma", "hf-t5", *FAMILIES_5_0, "hf-deepseek-v3"),
    ),
    # transformers 5.0, the lower bound of the model families (5.13 of DeepSeek-V3's router, whose
    # e_score_correction_bias and grouped selection came then)
    "transformers-5.0.0": (("transformers==5.0.0",), FAMILIES_5_0),
    "transformers-5.13.0": (("transformers==5.13.0",), ("hf-deepseek-v3",)),
    # liger-kernel 0.4.0 (its in-place RMSNorm backward overwrote dY; fixed in 0.4.1) with the transformers of its
    # day (its liger_kernel.transformers imports 4.x model code), the last 0.6, the latest
    "liger-kernel-0.4.0": (("liger-kernel==0.4.0", "transformers==4.46.3"), LIGER),
    "liger-kernel-0.6.5": (("liger-kernel==0.6.5",), LIGER),
    "liger-kernel-0.8.5": (("liger-kernel==0.8.5",), LIGER),
    # jax's lower bound with the flax of its day, and the latest of both (the lower bound of the adapters measured
    # on 0.10 only)
    "jax-0.4.30": (("jax==0.4.30", "jaxlib==0.4.30", "flax==0.10.0"), ("jax", "flax", "flax-nnx")),
    "jax-0.10.2": (
        ("jax==0.10.2", "jaxlib==0.10.2", "flax==0.12.8"),
        ("jax", "flax", "flax-nnx", "equinox", "keras-hub", "pallas"),
    ),
}
