"""The error budgets of attention, the MLP family, blocks and the LM head restate the oracle: the values they
carry (``Tracked.v``) are the oracle's, forward and VJP, and their error bounds are finite and non-negative."""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from transformer_conformance.adapters.numpy.adapter import NumpyAdapter
from transformer_conformance.adapters.torch.adapter import TorchAdapter
from transformer_conformance.conformance.budgets import registry as budgets
from transformer_conformance.conformance.strategies import blocks as sb
from transformer_conformance.conformance.strategies import local_attention as sl
from transformer_conformance.conformance.strategies import mla as smla
from transformer_conformance.conformance.strategies import moe as sm
from transformer_conformance.conformance.strategies import mrope as smr
from transformer_conformance.conformance.strategies.common import Case
from transformer_conformance.reference import oracle
from transformer_conformance.reference.formats import fmt

CASES = {
    "attention": lambda dt: sb.attention_case(dt),
    "qk_norm_attention": lambda dt: sb.qk_norm_case(dt),
    "rope_attention": lambda dt: sb.rope_attention_case(dt),
    "mlp": lambda dt: sb.mlp_case(dt, gated=False),
    "glu_mlp": lambda dt: sb.mlp_case(dt, gated=True),
    "block": lambda dt: sb.block_case(dt),
    "lm_head": lambda dt: sb.lm_head_case(dt),
    "sliding_window_attention": lambda dt: sl.sliding_window_case(dt, ("none", "tanh")),
    "chunked_attention": lambda dt: sl.chunked_case(dt),
    "sink_attention": lambda dt: sl.sink_case(dt),
    "moe_router": lambda dt: sm.router_case(dt),
    "moe_aux_loss": lambda dt: sm.aux_loss_case(dt),
    "mla_attention": lambda dt: smla.mla_case(dt, ("naive", "absorbed")),
    "mrope": lambda dt: smr.mrope_case(dt, ("sections", "interleaved")),
    "attention_temperature": lambda dt: smr.temperature_case(dt),
}
CONVENTIONS = {
    "numpy": NumpyAdapter().conventions,
    "torch": TorchAdapter().conventions,
    "numpy-top-left-exclusive": NumpyAdapter(causal_alignment="top_left", sliding_window="exclusive").conventions,
}


@pytest.mark.parametrize("conv", list(CONVENTIONS))
@pytest.mark.parametrize("op", list(CASES))
@settings(max_examples=8, deadline=None, derandomize=True, suppress_health_check=list(HealthCheck))
@given(data=st.data())
def test_budget_carries_the_oracle(op: str, conv: str, data: st.DataObject) -> None:
    dtype = fmt(data.draw(st.sampled_from(["float32", "bfloat16", "float16"]), label="dtype"))
    case: Case = data.draw(CASES[op](dtype), label="case")
    c = CONVENTIONS[conv]
    values = case.values()
    want = oracle.forward(op, values, case.params, c, dtype)
    got = budgets.FORWARD[op](values, case.params, c, dtype)
    np.testing.assert_allclose(got.v, want, rtol=1e-12, atol=1e-12 * float(np.max(np.abs(want), initial=1.0)))
    assert np.all(np.isfinite(got.e)) and np.all(got.e >= 0)
    g = np.random.default_rng(0).standard_normal(want.shape)
    grads = oracle.vjp(op, values, case.params, c, dtype, g)
    tracked = budgets.VJP[op](values, case.params, c, dtype, g)
    for name, grad in grads.items():
        scale = float(np.max(np.abs(grad), initial=1.0))
        np.testing.assert_allclose(tracked[name].v, grad, rtol=1e-10, atol=1e-10 * scale, err_msg=name)
        assert np.all(np.isfinite(tracked[name].e)) and np.all(tracked[name].e >= 0), name
