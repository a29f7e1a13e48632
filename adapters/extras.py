"""The optional dependency group (pyproject extra) each built-in adapter needs.

Plain data, importable without the project's dependencies: ``nox -s conformance`` reads it to install
what the adapters named by ``--adapter`` need before it runs them.
"""

EXTRAS: dict[str, str] = {
    "numpy": "",
    "torch": "torch",
    "torch-compile": "torch",
    "torch-compile-full": "torch",
    "torch-flex": "torch",
    "jax": "jax",
    "flax": "jax",
    "flax-nnx": "jax",
    "hf-llama": "hf",
    "hf-gemma": "hf",
    "hf-t5": "hf",
    "hf-gpt-neox": "hf",
    "hf-cohere": "hf",
    "hf-phi3": "hf",
    "hf-gemma2": "hf",
    "hf-olmo2": "hf",
    "hf-qwen3": "hf",
    "hf-mistral": "hf",
    "hf-gpt-oss": "hf",
    "hf-llama4": "hf",
    "hf-qwen2-vl": "hf",
    "hf-qwen3-vl": "hf",
    "hf-mixtral": "hf",
    "hf-qwen3-moe": "hf",
    "hf-olmoe": "hf",
    "hf-deepseek-v3": "hf",
    "hf-switch-transformers": "hf",
    "hf": "hf",  # the group hf-llama, hf-gemma, hf-t5 (adapters/registry.py GROUPS)
    "hf-families": "hf",  # the group of adapters/hf/families
    "liger": "liger",
    "liger-gemma": "liger",
    "liger-none": "liger",
    "onnxruntime": "onnxruntime",
    "onnxruntime-contrib": "onnxruntime",
    "onnxruntime-export": "onnxruntime-export",
    "mlx": "mlx",
    "torchtune": "torchtune",
    "keras-hub": "keras-hub",
    "equinox": "equinox",
    "pallas": "pallas",
    "litgpt": "litgpt",
    "megatron": "megatron",
    "cce": "cce",
    "cce-torch-compile": "cce",
    "fla": "fla",
    "fla-interleaved": "fla",
    "torchtitan": "torchtitan",
    "vllm": "vllm",
    "vllm-deepseek": "vllm",
    "unsloth": "unsloth",
}

#: The libraries an extra cannot ask for, because their own requirements pin another torch release or a CUDA stack:
#: ``nox`` installs them with ``pip install --no-deps`` after the extra (pyproject.toml says, per extra, what the
#: libraries' own code paths import instead). A user installing the extra by hand does the same.
NO_DEPS: dict[str, tuple[str, ...]] = {
    "vllm": ("vllm==0.34.0",),
    "unsloth": ("unsloth==2026.10.9", "unsloth-zoo==2026.10.9"),
}
