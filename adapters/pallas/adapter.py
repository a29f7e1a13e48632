"""JAX Pallas's normalisation and attention kernels as a candidate (adapter ``pallas``): ``layer_norm``,
``rms_norm`` and ``attention.mha`` of ``jax.experimental.pallas.ops.gpu`` — the forward kernels and the backward
kernels of their custom VJPs — run with ``interpret=True``, the Pallas interpreter, on the CPU: the kernels' own
code, block loops and masks included, without a GPU.

Each kernel normalises one row per program (its input is rank 3: the adapter passes the rows as (1, N, n)), in
blocks of min(max(next_pow2(n), 128), 4096) features; the backward's ∂γ, ∂β kernel walks the rows in blocks
of 16 (32 past 10,240 features). Read from the source and measured on jax 0.10.2:

* ε = 1e-5 for both kernels; the statistics, the normalisation and the affine step run in float32 and the
  output is cast to the input dtype once (``norm_rounding="single"``); the variance takes two passes;
* ``rms_norm`` has a bias (the adapter passes zeros: the seeds' RMSNorm has none);
* the forward saves its row statistics for the backward — 1/σ, and the mean for LayerNorm — in the *input*
  dtype (``ShapeDtypeStruct(shape=(), dtype=x.dtype)``), and the backward kernels read them back from there:
  ``unfused`` ``rms_norm.vjp`` and ``layer_norm.vjp``;
* ∂γ and ∂β are summed over the rows in float32 and cast to γ's dtype, which is the input dtype here (the
  suite's γ arrives in it).

``attention`` is ``attention.mha``, the package's FlashAttention-2 kernel, forward and the backward kernel of its
custom VJP (``backward_pass_impl="triton"``). Read from the source and measured on jax 0.10.2:

* scores q·kᵀ accumulate in float32 and are scaled by log₂e·scale, and the online softmax runs in powers of two
  (``exp2``): ``exp_via_exp2`` for ``attention`` and its VJP; each block of probabilities is cast to v's dtype
  before P·V (and before the backward's products), which the ``unfused`` declaration charges;
* the backward's Dᵢ = Σ oᵢ·∂oᵢ is formed from the output and its cotangent in their own dtype
  (``jnp.sum(o * do)`` on the input-dtype blocks): ``low_precision_sums`` ``attention.vjp``;
* causal masking compares query and key indices (``span_q >= span_k``): query i sees keys ≤ i, the top-left
  alignment;
* no soft-capping (``values={"softcap": {"none"}}``) and no grouped heads: the adapter repeats each KV head for
  its group of query heads (``jnp.repeat``, as a model on this kernel does), so ∂k and ∂v are the sums of the
  group's, summed by JAX's transpose of the repeat;
* one head width for q, k and v: the adapter pads the narrower to the wider with zeros (exact: zero terms of the
  dot products, columns sliced off), as the kernel pads to a power of two itself;
* a sequence must split into whole blocks (the kernel refuses others), and the backward needs the same number
  of query and key blocks: the adapter keeps the kernel's block sizes (128 forward, 32 backward) where they
  divide, and otherwise takes the largest that do (``attention.blocks``), as a caller of the kernel has to.

Not wrapped: ``decode_attention`` (one query per sequence; its grouped variant) and the Mosaic GPU kernels
(``*_mgpu``).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import jax
import jax.numpy as jnp
import numpy as np

from transformer_conformance.adapters.contract import Capability, Conventions, interpreted, per_shape
from transformer_conformance.adapters.jax.compiles import backend_compiles
from transformer_conformance.adapters.pallas.attention import attention_forward, attention_vjp
from transformer_conformance.adapters.versions import SUPPORTED, describe, installed, require

jax.config.update("jax_platforms", "cpu")

EPS = 1e-5  # both kernels' default


def _kernel(op: str) -> Callable[..., jax.Array]:
    from jax.experimental.pallas.ops.gpu import layer_norm, rms_norm

    return rms_norm.rms_norm if op == "rms_norm" else layer_norm.layer_norm


@cache
def _fns(op: str, n: int, eps: float) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The jitted forward and VJP of one kernel configuration (the kernels' custom VJP takes its options
    positionally: num_warps, num_stages, eps, backward_pass_impl, interpret)."""
    kernel = _kernel(op)

    def run(x: jax.Array, weight: jax.Array, bias: jax.Array) -> jax.Array:
        out = kernel(x.reshape(1, -1, n), weight, bias, None, 3, eps, "triton", True)
        return out.reshape(x.shape)

    def vjp(x: jax.Array, weight: jax.Array, bias: jax.Array, cot: jax.Array) -> tuple[jax.Array, ...]:
        _, pullback = jax.vjp(run, x, weight, bias)
        return tuple(pullback(cot))

    return jax.jit(run), jax.jit(vjp)


class PallasAdapter:
    """The built-in ``pallas`` adapter: Pallas's layer-norm and RMS-norm kernels under the interpreter."""

    name = "pallas"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["pallas"]

    def __init__(self, device: str = "cpu") -> None:
        require(self.name, self.supported)
        if device != "cpu":
            raise RuntimeError(f"the {self.name} adapter runs the Pallas interpreter on the CPU only, not {device!r}")
        self.conventions = Conventions(
            compute_dtype="float32",
            norm_rounding="single",
            variance="two_pass",
            eps_defaults={"rms_norm": EPS, "layer_norm": EPS},
            unfused=frozenset({"rms_norm.vjp", "layer_norm.vjp", "attention"}),
            low_precision_sums=frozenset({"attention.vjp"}),
            exp_via_exp2=frozenset({"attention"}),
            causal_alignment="top_left",
        )
        self.capabilities = {op: Capability() for op in ("rms_norm", "layer_norm")}
        self.capabilities["attention"] = Capability(values={"softcap": frozenset({"none"})})
        # jax.jit traces and compiles a program per shape (the checks draw shapes from the plan), and the interpreter
        # runs every program of a kernel's grid in Python (each size regime runs once, in one dtype)
        self.capabilities = interpreted(per_shape(self.capabilities))
        backend_compiles()  # start counting the programs XLA compiles

    def compiles(self) -> int:
        """The programs XLA has compiled in this process (adapters/jax/compiles.py): the report's count."""
        return backend_compiles()

    def environment(self) -> dict[str, str]:
        return {
            "jax": jax.__version__,
            "jaxlib": installed("jaxlib") or "",
            "numpy": np.__version__,
            "device": "cpu (interpret=True)",
            "supports": describe(self.supported),
        }

    @staticmethod
    def _args(inputs: Mapping[str, np.ndarray]) -> tuple[jax.Array, jax.Array, jax.Array]:
        x = jnp.asarray(inputs["x"])
        bias = inputs.get("bias")
        zeros = jnp.zeros((x.shape[-1],), x.dtype)
        return x, jnp.asarray(inputs["weight"]), zeros if bias is None else jnp.asarray(bias)

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "attention":
            return attention_forward(inputs, params)
        x, w, b = self._args(inputs)
        fwd, _ = _fns(op, x.shape[-1], EPS if params.get("eps") is None else float(params["eps"]))
        return np.asarray(fwd(x, w, b))

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        if op == "attention":
            return attention_vjp(inputs, params, cotangent)
        x, w, b = self._args(inputs)
        _, vjp = _fns(op, x.shape[-1], EPS if params.get("eps") is None else float(params["eps"]))
        dx, dw, db = vjp(x, w, b, jnp.asarray(cotangent))
        grads = {"x": np.asarray(dx), "weight": np.asarray(dw)}
        if op == "layer_norm":
            grads["bias"] = np.asarray(db)
        return grads
