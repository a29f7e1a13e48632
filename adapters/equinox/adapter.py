"""Equinox's norm layers as a candidate: ``eqx.nn.RMSNorm`` and ``eqx.nn.LayerNorm`` (adapter ``equinox``),
built with their defaults, on the CPU.

An Equinox layer normalises one token (its input's shape is the layer's ``shape``); a model maps it over the
tokens with ``jax.vmap``, and so does the adapter. The suite's γ (and β) become the layer's ``weight`` (and
``bias``) through ``eqx.tree_at``. Read from the source and measured on equinox 0.13.8:

* ε = 1e-5 for both layers (Flax: 1e-6);
* the token is promoted to float32 (``jnp.result_type(x, float32)``) once, the statistics and the affine
  step run there, and the result is cast back to the input dtype once (``norm_rounding="single"``); the
  parameters are float32 (``default_floating_dtype``);
* LayerNorm's variance is ``jnp.var``, two passes (mean((x − μ)²)), clamped at 0;
* ``RMSNorm`` has a learned **bias** by default (``use_bias=True``, initialised to zero): the RMSNorm of the
  seeds has none. At its zero initialisation the output is the contract's, which is what this adapter
  checks; a Llama port must pass ``use_bias=False`` (docs/adapters.md, "Findings").

Gradients are ``jax.vjp`` of the mapped layer; x is promoted once, so ∂L/∂x is summed in float32 and
rounded once; ∂γ, ∂β come back in float32 (the parameters' dtype) and are cast to the input dtype.

Not wrapped: ``eqx.nn.RotaryPositionalEmbedding`` takes no positions (it rotates row i by i, from a table as
long as the sequence), so the contract's RoPE at arbitrary positions has no call of it; and
``eqx.nn.MultiheadAttention`` projects q, k and v itself and has no grouped KV heads or soft-capping.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from functools import cache
from typing import Any

import equinox as eqx
import jax
import jax.numpy as jnp
import numpy as np

from transformer_conformance.adapters.contract import OPS, Capability, Conventions, per_shape
from transformer_conformance.adapters.jax.compiles import backend_compiles
from transformer_conformance.adapters.versions import SUPPORTED, describe, require

jax.config.update("jax_platforms", "cpu")


def _layer(op: str, n: int, eps: float | None, params: tuple[jax.Array, ...]) -> eqx.Module:
    """The layer as a user builds it (defaults but ε), holding the suite's γ (and β)."""
    kw: dict[str, Any] = {} if eps is None else {"eps": eps}
    if op == "rms_norm":
        layer: eqx.Module = eqx.nn.RMSNorm(n, **kw)
        return eqx.tree_at(lambda m: m.weight, layer, params[0])
    layer = eqx.nn.LayerNorm(n, **kw)
    return eqx.tree_at(lambda m: (m.weight, m.bias), layer, params)


@cache
def _fns(op: str, n: int, eps: float | None) -> tuple[Callable[..., Any], Callable[..., Any]]:
    """The jitted forward and VJP of one layer configuration."""

    def run(x: jax.Array, *params: jax.Array) -> jax.Array:
        tokens = x.reshape(-1, n)
        out: jax.Array = jax.vmap(_layer(op, n, eps, params))(tokens)
        return out.reshape(x.shape)

    def vjp(x: jax.Array, params: tuple[jax.Array, ...], cot: jax.Array) -> tuple[jax.Array, ...]:
        _, pullback = jax.vjp(run, x, *params)
        return tuple(g.astype(x.dtype) for g in pullback(cot))

    return jax.jit(run), jax.jit(vjp)


class EquinoxAdapter:
    """The built-in ``equinox`` adapter: ``eqx.nn.RMSNorm`` and ``eqx.nn.LayerNorm``."""

    name = "equinox"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["equinox"]

    def __init__(self, device: str = "cpu") -> None:
        require(self.name, self.supported)
        if device != "cpu":
            raise RuntimeError(f"the {self.name} adapter runs on the CPU only, not {device!r}")
        self.conventions = Conventions(
            compute_dtype="float32",
            norm_rounding="single",
            variance="two_pass",
            eps_defaults={"rms_norm": 1e-5, "layer_norm": 1e-5},
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
            "equinox": eqx.__version__,
            "jax": jax.__version__,
            "numpy": np.__version__,
            "device": "cpu",
            "supports": describe(self.supported),
        }

    def _args(self, op: str, inputs: Mapping[str, np.ndarray]) -> tuple[jax.Array, tuple[jax.Array, ...]]:
        # the parameters as the layer holds them by default: float32 (exact for every tested dtype)
        params = tuple(jnp.asarray(inputs[k], dtype=jnp.float32) for k in OPS[op].inputs[1:])
        return jnp.asarray(inputs["x"]), params

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        x, p = self._args(op, inputs)
        fwd, _ = _fns(op, x.shape[-1], params.get("eps"))
        return np.asarray(fwd(x, *p))

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        x, p = self._args(op, inputs)
        _, vjp = _fns(op, x.shape[-1], params.get("eps"))
        grads = vjp(x, p, jnp.asarray(cotangent))
        return {k: np.asarray(g) for k, g in zip(OPS[op].inputs, grads, strict=True)}
