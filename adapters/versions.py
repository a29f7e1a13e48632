"""The library releases each built-in adapter supports, and the one-line refusal of any other.

An adapter's declarations (conventions, capabilities) are what was measured on the library releases it
names; on a release it does not name, a declaration may be false, or a configuration may mean something
else (transformers 4.x has no ``rope_parameters``: a Llama configuration given one builds plain RoPE), and
the run would check something other than what it says. So each built-in adapter states the releases it
supports as :class:`Supported` ranges, ``require`` refuses any other with :class:`UnsupportedVersion`, and
``describe`` is the line the adapter's ``environment()`` reports ("supports"), the same that
docs/adapters.md lists. Versions are read from the installed distributions' metadata (``importlib.metadata``),
so a release that no longer imports is refused before its import fails.
"""

from __future__ import annotations

import importlib
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from importlib.metadata import PackageNotFoundError, version

from transformer_conformance.adapters.contract import ContractError


class UnsupportedVersion(ContractError):
    """An installed library release is outside what the adapter supports; the message is one line."""


def release(text: str) -> tuple[int, ...]:
    """The release numbers of a version string: ``"2.13.0+cpu"`` → (2, 13, 0), ``"0.4.2.dev1"`` → (0, 4, 2),
    ``"5.0.0rc1"`` → (5, 0, 0). A string with no leading number is (-1,), below every release."""
    numbers: list[int] = []
    for part in text.strip().split("+")[0].split("."):
        match = re.match(r"\d+", part)
        if match is None:
            break
        numbers.append(int(match.group()))
        if match.end() != len(part):  # 0rc1, 1post2: the number is the last release component
            break
    return tuple(numbers) or (-1,)


def _pad(v: tuple[int, ...], n: int) -> tuple[int, ...]:
    return v + (0,) * (n - len(v))


@dataclass(frozen=True)
class Supported:
    """The releases of one distribution an adapter supports: ``low`` ≤ version < ``high``."""

    distribution: str  # as pip names it: "liger-kernel", "transformers"
    low: str
    high: str
    #: the import name whose ``__version__`` stands in when the distribution is installed under another name
    #: (onnxruntime-gpu for onnxruntime)
    module: str | None = None

    def admits(self, text: str) -> bool:
        have, lo, hi = release(text), release(self.low), release(self.high)
        n = max(len(have), len(lo), len(hi))
        return _pad(lo, n) <= _pad(have, n) < _pad(hi, n)

    def __str__(self) -> str:
        return f"{self.distribution} >= {self.low}, < {self.high}"


#: the torch releases the torch adapters support: F.rms_norm is 2.4's (SDPA's grouped heads, 2.5's, are
#: repeated by the adapter before 2.5)
TORCH = Supported("torch", "2.4", "3")
JAX = Supported("jax", "0.4.30", "0.11")
#: flax.nnx's norms as the adapter builds them are 0.10's
FLAX = Supported("flax", "0.10", "0.13")
#: 4.45: LlamaRotaryEmbedding built from a configuration, LlamaConfig's head_dim; 5.x: rope_parameters
TRANSFORMERS = Supported("transformers", "4.45", "6")
#: 0.4: RMSNorm's casting modes and in-place backward, z-loss and soft-capping in the cross-entropy kernel
LIGER = Supported("liger-kernel", "0.4", "0.9")
TRITON = Supported("triton", "3", "4")
#: the onnxruntime adapters' conventions are measured on the 1.32 series (onnxruntime-gpu installs the module)
ONNXRUNTIME = Supported("onnxruntime", "1.32", "1.33", module="onnxruntime")
#: the exporter of onnxruntime-export (torch.onnx's dynamo path and onnxscript's optimiser), as measured
TORCH_EXPORTER = Supported("torch", "2.13", "2.14")
#: torch-flex's FlexAttention as measured on the 2.13 series (the CPU kernel's refusals, ``AuxRequest``)
TORCH_FLEX = Supported("torch", "2.13", "2.14")
#: the HF model families configure their rotary embeddings with 5.x's ``rope_parameters``
TRANSFORMERS_5 = Supported("transformers", "5", "6")
#: DeepseekV3TopkRouter routes (sigmoid, correction bias, groups) from 5.13; before, DeepseekV3MoE did
TRANSFORMERS_DEEPSEEK_V3_ROUTER = Supported("transformers", "5.13", "6")
#: MLX's conventions are measured on its 0.32 series (its CPU backend's composed fallbacks)
MLX = Supported("mlx", "0.32", "0.33")
#: the mlx adapter's window masks are mlx-lm's create_causal_mask, as measured on 0.32 (p − j < W)
MLX_LM = Supported("mlx-lm", "0.32", "0.33")
#: torchtune 0.6 imports only beside torchao 0.14-0.15 (0.16 dropped ``int4_weight_only``)
TORCHTUNE = Supported("torchtune", "0.6", "0.7")
TORCHAO = Supported("torchao", "0.14", "0.16")
ONNXSCRIPT = Supported("onnxscript", "0.7", "0.8")
#: keras-hub's layers as measured on 0.32 (RotaryEmbedding's rope_type and positions), on Keras 3.15's JAX backend
KERAS_HUB = Supported("keras-hub", "0.32", "0.33")
KERAS = Supported("keras", "3.15", "3.16")
#: Equinox's norm layers as measured on 0.13 (float32 promotion, RMSNorm's default bias)
EQUINOX = Supported("equinox", "0.13", "0.14")
#: JAX as measured for the adapters built on it that the release matrix does not run on jax 0.4.30 (keras-hub,
#: Equinox) and Pallas's GPU normalisation kernels under the interpreter (their options and the interpreter's
#: load/store API change between JAX releases): the 0.10 releases
JAX_0_10 = Supported("jax", "0.10", "0.11")
#: LitGPT as measured on 0.5.13, the only release run (earlier 0.5.x releases were not measured)
LITGPT = Supported("litgpt", "0.5.13", "0.6")
#: Cut Cross-Entropy as measured on 25.1 (its kernels' interfaces and the float32 backward's refusal)
CCE = Supported("cut-cross-entropy", "25.1", "25.2")
#: the torch and Triton series the litgpt and cce adapters were run on, and so all they state
TORCH_2_13 = Supported("torch", "2.13", "2.14")
TRITON_3_9 = Supported("triton", "3.9", "3.10")
#: Megatron-Core's pure-PyTorch paths as measured on 0.16.1 (the rotary embeddings' constructors, the MoE routing
#: functions' arguments, jit_fuser being torch.compile)
MEGATRON_CORE = Supported("megatron-core", "0.16", "0.17")
#: flash-linear-attention as measured on 0.6.0; its kernels are the fla-core distribution's (0.6.0)
FLA = Supported("flash-linear-attention", "0.6", "0.7")
FLA_CORE = Supported("fla-core", "0.6", "0.7")
#: torchtitan's model code as measured on 0.3.0 (its modules' Config dataclasses, ComplexRoPE's cache, the router's
#: float32 autocast, ChunkedLossWrapper); its models import Triton through their expert-parallel kernels
TORCHTITAN = Supported("torchtitan", "0.3", "0.4")
#: vLLM's custom ops' forward_native paths as measured on 0.34.0 (get_rope's rope_parameters, RMSNorm through vLLM
#: IR's rms_norm, the op context of adapters/vllm/runtime.py)
VLLM = Supported("vllm", "0.34", "0.35")
#: Unsloth's Triton kernels under the interpreter as measured on 2026.10.9 (the kernels' entry points, the
#: interpreter bridges they need); unsloth-zoo is released with it
UNSLOTH = Supported("unsloth", "2026.10", "2026.11")
UNSLOTH_ZOO = Supported("unsloth-zoo", "2026.10", "2026.11")

#: The one place each built-in adapter states the releases it supports (docs/adapters.md lists the same; a
#: project test compares). Plain data, importable without the libraries.
SUPPORTED: dict[str, tuple[Supported, ...]] = {
    "numpy": (Supported("numpy", "1.26", "3"),),
    "torch": (TORCH,),
    "torch-compile": (TORCH,),
    "torch-compile-full": (TORCH,),
    "torch-flex": (TORCH_FLEX,),
    "jax": (JAX,),
    "flax": (FLAX, JAX),
    "flax-nnx": (FLAX, JAX),
    "hf-llama": (TRANSFORMERS, TORCH),
    "hf-gemma": (TRANSFORMERS, TORCH),
    "hf-t5": (TRANSFORMERS, TORCH),
    "liger": (LIGER, TRITON, TORCH),
    "liger-gemma": (LIGER, TRITON, TORCH),
    "liger-none": (LIGER, TRITON, TORCH),
    "onnxruntime": (ONNXRUNTIME,),
    "onnxruntime-contrib": (ONNXRUNTIME,),
    "onnxruntime-export": (ONNXRUNTIME, TORCH_EXPORTER, ONNXSCRIPT),
    **{
        name: (TRANSFORMERS_5, TORCH)
        for name in (
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
    },
    "hf-deepseek-v3": (TRANSFORMERS_DEEPSEEK_V3_ROUTER, TORCH),
    "mlx": (MLX, MLX_LM),
    "torchtune": (TORCHTUNE, TORCHAO, TORCH),
    "keras-hub": (KERAS_HUB, KERAS, JAX_0_10),
    "equinox": (EQUINOX, JAX_0_10),
    "pallas": (JAX_0_10,),
    "litgpt": (LITGPT, TORCH_2_13),
    "cce": (CCE, TRITON_3_9, TORCH_2_13),
    "cce-torch-compile": (CCE, TRITON_3_9, TORCH_2_13),
    "fla": (FLA, FLA_CORE, TRITON_3_9, TORCH_2_13),
    "fla-interleaved": (FLA, FLA_CORE, TRITON_3_9, TORCH_2_13),
    "megatron": (MEGATRON_CORE, TORCH_2_13),
    "torchtitan": (TORCHTITAN, TORCH_2_13, TRITON_3_9),
    "vllm": (VLLM, TORCH_2_13, TRITON_3_9),
    "vllm-deepseek": (VLLM, TORCH_2_13, TRITON_3_9),
    "unsloth": (UNSLOTH, UNSLOTH_ZOO, TRITON_3_9, TORCH_2_13),
}


def installed(distribution: str, module: str | None = None) -> str | None:
    """The installed version of ``distribution`` (or else ``module.__version__``), or None."""
    try:
        return version(distribution)
    except PackageNotFoundError:
        pass
    if module is None:
        return None
    try:
        found = getattr(importlib.import_module(module), "__version__", None)
    except ImportError:
        return None
    return found if isinstance(found, str) else None


def describe(supported: Iterable[Supported]) -> str:
    """The line an adapter reports as what it supports: ``"liger-kernel >= 0.4, < 0.9; torch >= 2.4, < 3"``."""
    return "; ".join(str(s) for s in supported)


def require(name: str, supported: Iterable[Supported], versions: Mapping[str, str | None] | None = None) -> None:
    """Refuse, with one line, a release outside ``supported``: the installed ones, or ``versions`` (a
    distribution → version map standing in for what is installed: the project's tests give made-up ones)."""
    for s in supported:
        have = installed(s.distribution, s.module) if versions is None else versions.get(s.distribution)
        if have is None:
            raise UnsupportedVersion(f"the {name} adapter needs {s} (not installed)")
        if not s.admits(have):
            raise UnsupportedVersion(f"{s.distribution} {have} is not supported: the {name} adapter supports {s}")


def at_least(distribution: str, low: str, versions: Mapping[str, str | None] | None = None) -> bool:
    """Whether the installed (or given) release of ``distribution`` is ``low`` or later: for what an adapter
    declares only from the release that brought it."""
    have = installed(distribution) if versions is None else versions.get(distribution)
    if have is None:
        return False
    a, b = release(have), release(low)
    n = max(len(a), len(b))
    return _pad(a, n) >= _pad(b, n)
