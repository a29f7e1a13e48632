"""vLLM's custom ops on their PyTorch-native paths as candidates: the built-in ``vllm`` and ``vllm-deepseek`` adapters.

vLLM dispatches each ``CustomOp`` to a platform kernel (``forward_cuda``, ``forward_hip``, ``forward_xpu``,
``forward_cpu``) or to its PyTorch reference, ``forward_native`` — what runs when the op is not enabled for the
platform or a compiled graph inlines it. The adapters build each op as a vLLM model does, inside the context of
adapters/vllm/runtime.py (vLLM's "unspecified" platform, the CPU named as the device), in the dtype under test (the
model's ``dtype``), and call ``forward_native`` on the suite's tensors. vLLM serves models and has no backward:
every operation is declared forward only.

* ``rms_norm`` — ``RMSNorm(hidden_size, eps, dtype=...)`` (its weight in the model dtype), ``forward_native``, i.e.
  vLLM IR's ``rms_norm``: x in float32, ``x · rsqrt(mean(x²) + ε)``, cast to the weight's dtype **before** the
  weight multiply (``norm_rounding="before_weight"``, as HF's ``LlamaRMSNorm``). ε defaults to 1e-6, ``RMSNorm``'s;
* ``rope``, ``rope_scaled`` (linear, llama3, yarn, dynamic), ``mrope`` (sections, interleaved) — the rotary
  embeddings ``get_rope`` builds (adapters/vllm/rope.py). ``vllm``: ``is_neox_style=True``, the **half** split (Llama,
  Qwen, Mistral); the angles are float32, ``cos_sin_cache`` is stored in the model dtype and
  ``ApplyRotaryEmb.forward_static`` rotates op by op in it (``unfused`` rope, rope_scaled, mrope);
* ``swiglu_mlp``, ``glu_mlp`` (silu, gelu_erf, gelu_tanh) — the MLP of vLLM's Llama/Gemma models: ``gate_up_proj``
  (``[w1; w3]`` stored (2h, d), gate first: ``F.linear``, what ``UnquantizedLinearMethod`` computes on one rank),
  ``SiluAndMul`` / ``GeluAndMul(approximate="none" | "tanh")`` ``forward_native``, ``down_proj``; each result is
  stored in the model dtype (``unfused``).

``vllm-deepseek`` is DeepSeek-V2/V3's rotary embedding as vLLM's ``deepseek_v2.py`` builds it: ``is_neox_style=False``
(GPT-J's **adjacent** pairs, ``rope_layout="interleaved"``), ``rope_type="deepseek_yarn"``
(``DeepseekScalingRotaryEmbedding``, its ``mscale`` 1 and ``mscale_all_dim`` 0 by default: the concentration factor
0.1·ln s + 1 in cos and sin) and plain RoPE; nothing else.

Not declared: LayerNorm (vLLM's models use ``nn.LayerNorm``), the losses (vLLM computes none), attention (its
backends need a GPU or vLLM's CPU build), vLLM's ``ntk`` and ``longrope`` rules (adapters/vllm/rope.py), gradients.

Measured on vLLM 0.34.0 (its CUDA wheel, installed without its dependencies beside torch 2.13.0+cpu; ``vllm._C``
is absent from that wheel and never needed here) with triton 3.9.0; other vLLM releases are refused
(docs/adapters.md, "vllm").
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from importlib.metadata import version
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F
from vllm.model_executor.layers.activation import GeluAndMul, SiluAndMul
from vllm.model_executor.layers.layernorm import RMSNorm

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.torch.modules import ModuleAdapter
from transformer_conformance.adapters.versions import SUPPORTED as SUPPORTED_RELEASES
from transformer_conformance.adapters.versions import Supported, describe, require
from transformer_conformance.adapters.vllm.rope import vllm_mrope, vllm_rope
from transformer_conformance.adapters.vllm.runtime import building

VLLM_VERSION = version("vllm")

#: the releases the adapters' declarations were measured on (adapters/versions.py)
SUPPORTED: tuple[Supported, ...] = SUPPORTED_RELEASES["vllm"]

#: ``RMSNorm``'s default ε
NORM_EPS = 1e-6

#: the contract's gated activations → the op a vLLM model's MLP builds
GLU_ACTIVATIONS: dict[str, Callable[[], Any]] = {
    "silu": SiluAndMul,
    "gelu_erf": lambda: GeluAndMul(approximate="none"),
    "gelu_tanh": lambda: GeluAndMul(approximate="tanh"),
}


def check_version(found: str | None = None) -> None:
    """Refuse, with one line, a vLLM outside the releases the declarations were measured on."""
    require("vllm", SUPPORTED[:1], None if found is None else {"vllm": found})


class VllmAdapter(ModuleAdapter):
    """The built-in ``vllm`` adapter (Neox-style RoPE, the layout of most vLLM models)."""

    name = "vllm"
    supported = SUPPORTED
    #: ``is_neox_style`` of the rotary embeddings
    neox = True

    def __init__(self, device: str = "cpu") -> None:
        check_version()
        require(self.name, SUPPORTED[1:])
        super().__init__()
        if device != "cpu":
            raise RuntimeError("the vllm adapters run vLLM's forward_native paths on the CPU only (device 'cpu')")
        self.device = device
        self.conventions = self._conventions()
        self.capabilities = self._capabilities()

    def _conventions(self) -> Conventions:
        return Conventions(
            rope_layout="half" if self.neox else "interleaved",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="before_weight",
            unfused=frozenset({"rope", "rope_scaled", "mrope", "swiglu_mlp", "glu_mlp"}),
            eps_defaults={"rms_norm": NORM_EPS},
        )

    def _capabilities(self) -> dict[str, Capability]:
        forward = Capability(grad=False)
        return {
            "rms_norm": forward,
            "rope": forward,
            "rope_scaled": Capability(
                grad=False, values={"scaling.type": frozenset({"linear", "llama3", "yarn", "dynamic"})}
            ),
            "mrope": Capability(grad=False, values={"streams": frozenset({"sections", "interleaved"})}),
            "swiglu_mlp": forward,
            "glu_mlp": Capability(grad=False, values={"activation": frozenset(GLU_ACTIVATIONS)}),
        }

    def environment(self) -> dict[str, str]:
        return {
            "vllm": VLLM_VERSION,
            "torch": torch.__version__,
            "numpy": np.__version__,
            "device": self.device,
            "supports": describe(SUPPORTED),
        }

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError("vLLM has no backward: every operation is declared forward only")

    # ------------------------------------------------------------------------------------------ ops

    def rms_norm(self, x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        with building():
            module = RMSNorm(x.shape[-1], eps=NORM_EPS if eps is None else float(eps), dtype=weight.dtype)
        self._hold(weight, module.weight, weight.detach())
        return module.forward_native(x)

    def _mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, act: Any) -> torch.Tensor:
        gate_up = torch.cat((w1, w3), dim=1).T.contiguous()  # MergedColumnParallelLinear: (2h, d), gate first
        down = w2.T.contiguous()  # RowParallelLinear: (d, h)
        return F.linear(act.forward_native(F.linear(x, gate_up)), down)

    def swiglu_mlp(self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        with building():
            act = SiluAndMul()
        return self._mlp(x, w1, w3, w2, act)

    def glu_mlp(
        self, x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor, activation: str = "silu"
    ) -> torch.Tensor:
        if activation not in GLU_ACTIVATIONS:
            raise NotImplementedError(f"the adapter declares no gated MLP with {activation!r}")
        with building():
            act = GLU_ACTIVATIONS[activation]()
        return self._mlp(x, w1, w3, w2, act)

    def rope(self, x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
             rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None) -> torch.Tensor:  # fmt: skip
        return vllm_rope(x, positions, base, rotary_dim, scaling, neox=self.neox)

    def mrope(self, x: torch.Tensor, positions: torch.Tensor, sections: tuple[int, int, int],
              base: float = 10000.0, streams: str = "sections") -> torch.Tensor:  # fmt: skip
        return vllm_mrope(x, positions, sections, base, streams, neox=self.neox)

    def _impl(self, op: str) -> Callable[..., torch.Tensor]:
        impl: dict[str, Callable[..., torch.Tensor]] = {
            "rms_norm": self.rms_norm,
            "rope": self.rope,
            "rope_scaled": self.rope,
            "mrope": self.mrope,
            "swiglu_mlp": self.swiglu_mlp,
            "glu_mlp": self.glu_mlp,
        }
        return impl[op]


class VllmDeepseekAdapter(VllmAdapter):
    """The built-in ``vllm-deepseek`` adapter: DeepSeek-V2/V3's GPT-J-style RoPE and ``deepseek_yarn``."""

    name = "vllm-deepseek"
    neox = False

    def _conventions(self) -> Conventions:
        return Conventions(
            rope_layout="interleaved",
            rope_angle_dtype="float32",
            compute_dtype="float32",
            unfused=frozenset({"rope", "rope_scaled"}),
        )

    def _capabilities(self) -> dict[str, Capability]:
        return {
            "rope": Capability(grad=False),
            "rope_scaled": Capability(grad=False, values={"scaling.type": frozenset({"yarn"})}),
        }

    def rope(self, x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0,
             rotary_dim: int | None = None, scaling: Mapping[str, Any] | None = None) -> torch.Tensor:  # fmt: skip
        return vllm_rope(x, positions, base, rotary_dim, scaling, neox=False, yarn="deepseek_yarn")
