"""The pallas built-in adapter loads, declares what JAX 0.10's Pallas normalisation and attention kernels do under
the Pallas interpreter, and passes a smoke subset (docs/adapters.md, "pallas")."""

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
    assert set(adapter.capabilities) == {"rms_norm", "layer_norm", "attention"}
    assert adapter.capabilities["attention"].values == {"softcap": frozenset({"none"})}
    assert smoke(adapter, ("float32", "bfloat16", "float16"))


@pytest.mark.parametrize(("lq", "lk"), [(256, 256), (384, 384), (4, 520), (5, 7), (1, 1), (129, 129), (8, 3)])
def test_block_sizes_split_both_sequences_into_whole_blocks(lq: int, lk: int) -> None:
    """What the kernel requires of its block sizes: whole blocks, and as many query blocks as key blocks in the
    backward; where the kernel's defaults (128, 32) do that, they are kept."""
    from transformer_conformance.adapters.pallas.attention import blocks

    bq, bk, bq_dkv, bkv_dkv, bq_dq, bkv_dq = blocks(lq, lk)
    assert lq % bq == lk % bk == lq % bq_dkv == lk % bkv_dkv == 0
    assert (bq_dq, bkv_dq) == (bq_dkv, bkv_dkv) and lq // bq_dkv == lk // bkv_dkv
    if lq == lk and lq % 128 == 0:
        assert (bq, bk, bq_dkv, bkv_dkv) == (128, 128, 32, 32)
    if lq <= 128 and lk <= 128:
        assert (bq, bk) == (lq, lk)  # the kernel's own min(block, L)


def test_attention_declares_the_kernel_s_causal_alignment() -> None:
    """Query i sees keys ≤ i (top-left): with 2 queries on 4 keys, query 0 reads v of key 0 alone."""
    adapter = load_adapter("pallas")
    assert adapter.conventions.causal_alignment == "top_left"
    q = np.zeros((1, 1, 2, 4), np.float32)
    k = np.zeros((1, 1, 4, 4), np.float32)
    v = np.arange(4, dtype=np.float32).reshape(1, 1, 4, 1)
    out = adapter.forward("attention", {"q": q, "k": k, "v": v}, {"causal": True, "softcap": None, "scale": None})
    assert out.shape == (1, 1, 2, 1) and out[0, 0, :, 0].tolist() == [0.0, 0.5]


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
