"""The float64 oracle of multi-head latent attention, multimodal RoPE and the NoPE temperature (reference/mla.py,
reference/mrope.py, reference/attention_temperature.py): each hand-written VJP against central finite differences,
the absorbed form against the naive one, M-RoPE against 1-D RoPE and against each stream's rotation, the
temperature's steps."""

from __future__ import annotations

import numpy as np
import pytest

from tests.finite_diff import assert_vjp
from transformer_conformance.reference import attention_temperature as temp
from transformer_conformance.reference import mla, mrope
from transformer_conformance.reference.rope import rope

MLA_SHAPES = [(2, 3, 4, 6, 5, 4, 7, 3), (1, 2, 1, 5, 3, 2, 9, 4)]  # B, H, L_q, L_k, D_n, D_r, D_c, D_v
NAMES = ("q_nope", "q_rope", "latent", "k_rope", "w_uk", "w_uv")


def _mla_inputs(shape: tuple[int, ...], seed: int) -> tuple[list[np.ndarray], np.ndarray, np.ndarray]:
    b, h, lq, lk, dn, dr, dc, dv = shape
    rng = np.random.default_rng(seed)
    dims = [(b, h, lq, dn), (b, h, lq, dr), (b, lk, dc), (b, lk, dr), (h, dc, dn), (h, dc, dv)]
    k_pos = np.arange(3, 3 + lk) * 7
    return [rng.standard_normal(d) for d in dims], k_pos[lk - lq :], k_pos


@pytest.mark.parametrize("mscale", [None, {"factor": 40.0, "mscale_all_dim": 1.0}])
@pytest.mark.parametrize("layout", ["interleaved", "half"])
@pytest.mark.parametrize("shape", MLA_SHAPES, ids=str)
def test_mla_absorbed_equals_naive(shape: tuple[int, ...], layout: str, mscale: dict | None) -> None:
    x, pq, pk = _mla_inputs(shape, 0)
    kw = {"layout": layout, "mscale": mscale}
    naive = mla.mla_attention(*x, pq, pk, **kw)  # type: ignore[arg-type]
    absorbed = mla.mla_attention(*x, pq, pk, form="absorbed", **kw)  # type: ignore[arg-type]
    np.testing.assert_allclose(absorbed, naive, rtol=1e-12, atol=1e-13)


@pytest.mark.parametrize("causal", [True, False])
@pytest.mark.parametrize("shape", MLA_SHAPES, ids=str)
def test_mla_vjp_matches_finite_differences(shape: tuple[int, ...], causal: bool) -> None:
    x, pq, pk = _mla_inputs(shape, 1)
    kw = {"causal": causal, "layout": "half", "mscale": {"factor": 4.0, "mscale_all_dim": 0.707}}
    out = mla.mla_attention(*x, pq, pk, **kw)  # type: ignore[arg-type]
    rng = np.random.default_rng(2)
    g = rng.standard_normal(out.shape)
    grads = mla.mla_attention_vjp(*x, pq, pk, g, **kw)  # type: ignore[arg-type]
    for i, name in enumerate(NAMES):

        def f(a: np.ndarray, i: int = i) -> np.ndarray:
            args = list(x)
            args[i] = a
            return g * mla.mla_attention(*args, pq, pk, **kw)  # type: ignore[arg-type]

        assert grads[i].shape == x[i].shape, name
        assert_vjp(f, x[i], grads[i], rng)


def test_mla_scale_is_deepseeks() -> None:
    # DeepSeek-V3: qk_head_dim 192, YaRN factor 40, mscale_all_dim 1: (0.1·ln 40 + 1)² / √192
    assert mla.mla_scale(128, 64, {"factor": 40.0, "mscale_all_dim": 1.0}) == pytest.approx(
        (0.1 * np.log(40.0) + 1.0) ** 2 / np.sqrt(192.0), rel=1e-15
    )
    assert mla.mla_scale(128, 64, None) == pytest.approx(192**-0.5, rel=1e-15)
    assert mla.yarn_mscale(1.0, 1.0) == 1.0


def test_mrope_streams() -> None:
    assert mrope.mrope_streams(8, (2, 3, 3)).tolist() == [0, 0, 1, 1, 1, 2, 2, 2]
    # Qwen3-VL (24, 20, 20) over 64 pairs: t h w repeating up to pair 59, then t
    s = mrope.mrope_streams(64, (24, 20, 20), "interleaved")
    assert s[:6].tolist() == [0, 1, 2, 0, 1, 2] and s[60:].tolist() == [0, 0, 0, 0]
    assert np.bincount(s).tolist() == [24, 20, 20]
    with pytest.raises(ValueError, match="summing to d/2"):
        mrope.mrope_streams(8, (2, 2, 2))


@pytest.mark.parametrize("streams", mrope.STREAMS)
def test_mrope_equal_streams_is_rope_and_each_pair_follows_its_stream(streams: str) -> None:
    rng = np.random.default_rng(3)
    x = rng.standard_normal((2, 5, 16))
    pos = np.array([3, 9, 40, 41, 1000])
    secs = (2, 3, 3)
    np.testing.assert_allclose(
        mrope.mrope(x, np.stack([pos] * 3), secs, streams=streams), rope(x, pos, layout="half"), rtol=0, atol=1e-15
    )
    three = np.stack([pos, pos * 2 + 1, pos * 3 + 5])
    got = mrope.mrope(x, three, secs, streams=streams)
    s = mrope.mrope_streams(8, secs, streams)  # type: ignore[arg-type]
    for stream in range(3):
        one = rope(x, three[stream], layout="half")
        pairs = np.flatnonzero(s == stream)
        for cols in (pairs, pairs + 8):
            np.testing.assert_allclose(got[..., cols], one[..., cols], rtol=0, atol=1e-15)


@pytest.mark.parametrize("streams", mrope.STREAMS)
def test_mrope_vjp_matches_finite_differences(streams: str) -> None:
    rng = np.random.default_rng(4)
    x = rng.standard_normal((2, 4, 12))
    pos = np.stack([np.arange(4), np.arange(4) * 3, np.arange(4) + 100])
    g = rng.standard_normal(x.shape)
    dx = mrope.mrope_vjp(x, pos, g, (1, 2, 3), streams=streams)  # type: ignore[arg-type]
    assert_vjp(lambda a: g * mrope.mrope(a, pos, (1, 2, 3), streams=streams), x, dx, rng)  # type: ignore[arg-type]


def test_temperature_steps() -> None:
    p = np.array([0, 8190, 8191, 16382, 16383])
    tau = temp.temperature_scales(p, 8192.0, 0.1)
    np.testing.assert_allclose(tau, [1.0, 1.0, 1 + 0.1 * np.log(2), 1 + 0.1 * np.log(2), 1 + 0.1 * np.log(3)])
    rng = np.random.default_rng(5)
    q, g = rng.standard_normal((2, 5, 3)), rng.standard_normal((2, 5, 3))
    dq = temp.attention_temperature_vjp(q, p, g, 8192.0, 0.1)
    assert_vjp(lambda a: g * temp.attention_temperature(a, p, 8192.0, 0.1), q, dq, rng)
