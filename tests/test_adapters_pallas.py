"""The pallas built-in adapter loads, declares what JAX 0.10's Pallas normalisation kernels do under the Pallas
interpreter, and passes a smoke subset (docs/adapters.md, "pallas")."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax.experimental.pallas.ops.gpu.rms_norm")

from tests.adapter_smoke import assert_default_eps, assert_rms_norm_keeps_the_input_dtype, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.strategies.common import fill
from transformer_conformance.reference.formats import fmt


def test_smoke() -> None:
    adapter = load_adapter("pallas")
    assert adapter.name == "pallas"
    assert set(adapter.capabilities) == {"rms_norm", "layer_norm"}
    assert smoke(adapter, ("float32", "bfloat16", "float16"))


@pytest.mark.parametrize("op", ["rms_norm", "layer_norm"])
def test_default_eps_is_the_declared_one(op: str) -> None:
    """ε = None runs the kernel with its default, the declared 1e-5 (a row of small values shows it)."""
    assert_default_eps(load_adapter("pallas"), op, 1e-5)


def test_the_backward_reads_statistics_stored_in_the_input_dtype() -> None:
    """What ``unfused`` rms_norm.vjp declares: the 1/σ the forward saves for the backward kernels is the bfloat16
    rounding of the exact one, not a float32 value."""
    import jax.numpy as jnp
    from jax.experimental.pallas.ops.gpu import rms_norm

    dtype = fmt("bfloat16")
    x = jnp.asarray(fill(dtype, (1, 1, 8), 1.0, 3))
    w = jnp.ones((8,), x.dtype)
    _, (_, _, _, rstd) = rms_norm.rms_norm_forward(x, w, jnp.zeros_like(w), eps=1e-5, interpret=True)
    assert rstd.dtype == jnp.bfloat16
    exact = 1.0 / np.sqrt(np.mean(np.asarray(x, np.float64) ** 2) + 1e-5)
    assert float(rstd.reshape(())) == float(jnp.asarray(exact, jnp.bfloat16))


def test_outputs_and_gradients_come_back_in_the_input_dtype() -> None:
    assert_rms_norm_keeps_the_input_dtype(load_adapter("pallas"))
