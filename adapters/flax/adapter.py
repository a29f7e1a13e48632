"""Flax's norm modules as candidates: ``flax.linen`` (adapter ``flax``) and ``flax.nnx`` (``flax-nnx``)
``RMSNorm`` and ``LayerNorm``, built with their defaults, on the CPU.

Flax has no RoPE, SwiGLU MLP or loss of its own (those are model code, or Optax), so these adapters
declare the two norms only. The modules run exactly as a user builds them — ``RMSNorm()``,
``LayerNorm()`` — with the suite's γ (and β) as their ``scale`` (and ``bias``) parameters. Their defaults,
read from the source and measured on flax 0.12.8:

* ε = 1e-6 for both norms (torch's LayerNorm uses 1e-5);
* ``use_fast_variance=True``: LayerNorm's variance is mean(x²) − μ², clamped at 0 (declared
  ``variance="one_pass"``);
* statistics in float32 (``force_float32_reductions``), and the normalisation itself in float32 because
  the parameters are float32 (``param_dtype``);
* the output dtype is promoted from the input and the parameters: a bfloat16 or float16 input gives a
  **float32** output. The suite checks outputs in the input dtype, so the adapter casts that output —
  which is what a user who keeps activations in bfloat16 does next — and this is one rounding of a
  float32 result (``norm_rounding="single"``). ``FlaxLinenAdapter(output="module")`` returns the module's
  float32 output unchanged instead; the suite then reports the dtype mismatch.

Gradients are ``jax.vjp`` of the module's apply; the scale and bias gradients come back in float32 (the
parameters' dtype) and are cast the same way. ∂L/∂x is the sum of two partial gradients, each already
rounded to the input dtype, in linen (``unfused`` ``rms_norm.vjp``, ``layer_norm.vjp``); nnx promotes x
once and rounds ∂L/∂x once.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from functools import cache
from typing import Any

import flax
import jax
import jax.numpy as jnp
import numpy as np
from flax import linen, nnx

from transformer_conformance.adapters.contract import OPS, Capability, Conventions, per_shape
from transformer_conformance.adapters.jax.compiles import backend_compiles
from transformer_conformance.adapters.versions import SUPPORTED, describe, require

jax.config.update("jax_platforms", "cpu")

#: the suite's parameter name -> Flax's
_PARAM = {"weight": "scale", "bias": "bias"}


def _linen_module(op: str, n: int, eps: float | None) -> Callable[..., jax.Array]:
    kw: dict[str, Any] = {} if eps is None else {"epsilon": eps}
    module: linen.Module = linen.RMSNorm(**kw) if op == "rms_norm" else linen.LayerNorm(**kw)

    def apply(x: jax.Array, **params: jax.Array) -> jax.Array:
        out: jax.Array = module.apply({"params": {_PARAM[k]: v for k, v in params.items()}}, x)  # type: ignore[assignment]
        return out

    return apply


def _nnx_module(op: str, n: int, eps: float | None) -> Callable[..., jax.Array]:
    kw: dict[str, Any] = {} if eps is None else {"epsilon": eps}

    def apply(x: jax.Array, **params: jax.Array) -> jax.Array:
        cls: Any = nnx.RMSNorm if op == "rms_norm" else nnx.LayerNorm
        module = cls(n, rngs=nnx.Rngs(0), **kw)
        for k, v in params.items():
            getattr(module, _PARAM[k]).value = v
        return module(x)

    return apply


_BUILD = {"linen": _linen_module, "nnx": _nnx_module}


@cache
def _fns(api: str, op: str, n: int, eps: float | None, cast: bool) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The jitted forward and VJP of one module configuration."""
    names = OPS[op].inputs[1:]  # weight (and bias)
    module = _BUILD[api](op, n, eps)

    def run(x: jax.Array, *params: jax.Array) -> jax.Array:
        return module(x, **dict(zip(names, params, strict=True)))

    def forward(x: jax.Array, *params: jax.Array) -> jax.Array:
        y = run(x, *params)
        return y.astype(x.dtype) if cast else y

    def vjp(x: jax.Array, params: tuple[jax.Array, ...], cot: jax.Array) -> tuple[jax.Array, ...]:
        y, pullback = jax.vjp(run, x, *params)
        grads = pullback(cot.astype(y.dtype))
        return tuple(g.astype(x.dtype) if cast else g for g in grads)

    return jax.jit(forward), jax.jit(vjp)


class FlaxLinenAdapter:
    """The built-in ``flax`` adapter: ``flax.linen.RMSNorm`` and ``flax.linen.LayerNorm``."""

    name = "flax"
    api = "linen"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["flax"]

    def __init__(self, device: str = "cpu", output: str = "cast") -> None:
        require(self.name, self.supported)
        if device != "cpu":
            raise RuntimeError(f"the {self.name} adapter runs on the CPU only, not {device!r}")
        if output not in ("cast", "module"):
            raise ValueError(f"output must be 'cast' or 'module', not {output!r}")
        self.cast = output == "cast"
        self.conventions = Conventions(
            compute_dtype="float32",
            norm_rounding="single",
            variance="one_pass",
            # x enters twice (the statistics and x − μ), each time through a cast to float32 whose
            # transpose casts the cotangent back: the two partial gradients are rounded to the input dtype
            # and then added there (measured: ∂L/∂x of a bfloat16 RMSNorm 5 ulps off where it cancels)
            unfused=frozenset({"rms_norm.vjp", "layer_norm.vjp"}),
            eps_defaults={"rms_norm": 1e-6, "layer_norm": 1e-6},
        )
        self.capabilities = {op: Capability() for op in ("rms_norm", "layer_norm")}
        # jax.jit traces and compiles a program per shape: the checks draw shapes from the plan
        self.capabilities = per_shape(self.capabilities)
        backend_compiles()  # start counting the programs XLA compiles

    def compiles(self) -> int:
        """The programs XLA has compiled in this process (adapters/jax/compiles.py): the report's count."""
        return backend_compiles()

    def environment(self) -> dict[str, str]:
        return {
            "flax": flax.__version__,
            "jax": jax.__version__,
            "numpy": np.__version__,
            "device": "cpu",
            "supports": describe(self.supported),
        }

    def _args(self, op: str, inputs: Mapping[str, np.ndarray]) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        # the parameters as the module holds them by default: float32 (exact for every tested dtype)
        params = tuple(jnp.asarray(inputs[k], dtype=jnp.float32) for k in OPS[op].inputs[1:])
        return jnp.asarray(inputs["x"]), params

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        x, p = self._args(op, inputs)
        fwd, _ = _fns(self.api, op, x.shape[-1], params.get("eps"), self.cast)
        return np.asarray(fwd(x, *p))

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        x, p = self._args(op, inputs)
        _, vjp = _fns(self.api, op, x.shape[-1], params.get("eps"), self.cast)
        grads = vjp(x, p, jnp.asarray(cotangent))
        return {k: np.asarray(g) for k, g in zip(OPS[op].inputs, grads, strict=True)}


class FlaxNnxAdapter(FlaxLinenAdapter):
    """The built-in ``flax-nnx`` adapter: ``flax.nnx.RMSNorm`` and ``flax.nnx.LayerNorm``.

    Unlike linen, nnx promotes the input to float32 once, before both uses (``promote_dtype``), so ∂L/∂x
    is summed in float32 and rounded once: no ``unfused`` backward (measured: 0.5 ulp where linen shows
    up to 1)."""

    name = "flax-nnx"
    api = "nnx"

    def __init__(self, device: str = "cpu", output: str = "cast") -> None:
        super().__init__(device, output)
        self.conventions = replace(self.conventions, unfused=frozenset())
