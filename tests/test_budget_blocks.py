"""Budgets evaluated a block of rows at a time (error_model.row_blocks: the norms' rows, the fused loss's tokens)
equal the same budgets evaluated in one block, up to the order of float64 sums; and the runner's allocator
setting (conformance/runner/allocator.py) applies where the C library is glibc's."""

from __future__ import annotations

import platform
import sys
from typing import Any

import numpy as np
import pytest

from transformer_conformance.adapters.contract import Conventions
from transformer_conformance.conformance.budgets import error_model as em
from transformer_conformance.conformance.budgets import registry
from transformer_conformance.conformance.runner import allocator
from transformer_conformance.reference.formats import fmt

BF16 = fmt("bfloat16")
#: more rows than λ² = 64, so that the weight gradients take the root-sum-square bound
ROWS, WIDTH, VOCAB = 300, 16, 40


def _inputs(op: str) -> tuple[dict[str, Any], dict[str, Any], np.ndarray]:
    rng = np.random.default_rng(7)
    if op == "linear_cross_entropy":
        targets = rng.integers(0, VOCAB, ROWS)
        targets[rng.random(ROWS) < 0.25] = -100
        inputs = {
            "x": BF16.round(rng.standard_normal((ROWS, WIDTH))),
            "weight": BF16.round(0.3 * rng.standard_normal((VOCAB, WIDTH))),
            "bias": BF16.round(rng.standard_normal(VOCAB)),
            "targets": targets,
        }
        return inputs, {"reduction": "none"}, BF16.round(rng.standard_normal(ROWS)).astype(np.float64)
    inputs = {
        "x": BF16.round(3.0 + rng.standard_normal((3, ROWS // 3, WIDTH))),
        "weight": BF16.round(1.0 + 0.5 * rng.standard_normal(WIDTH)),
        "bias": BF16.round(rng.standard_normal(WIDTH)),
    }
    if op == "rms_norm":
        del inputs["bias"]
    return inputs, {"eps": 1e-5}, BF16.round(rng.standard_normal(inputs["x"].shape)).astype(np.float64)


def _evaluate(op: str, conv: Conventions) -> list[np.ndarray]:
    inputs, params, g = _inputs(op)
    out = [registry.FORWARD[op](inputs, params, conv, BF16)]
    out += [t for _, t in sorted(registry.VJP[op](inputs, params, conv, BF16, g).items())]
    return [a for t in out for a in (t.v, t.e, t.m)]


@pytest.mark.parametrize(
    ("op", "conv"),
    [
        ("rms_norm", Conventions(unfused=frozenset({"rms_norm.vjp"}), norm_rounding="before_weight")),
        ("layer_norm", Conventions(low_precision_sums=frozenset({"layer_norm.vjp"}), variance="one_pass")),
        ("linear_cross_entropy", Conventions(unfused=frozenset({"linear_cross_entropy"}))),
        ("linear_cross_entropy", Conventions(grad_in_forward=frozenset({"linear_cross_entropy"}))),
    ],
)
def test_blocks_equal_one_block(op: str, conv: Conventions, monkeypatch: pytest.MonkeyPatch) -> None:
    whole = _evaluate(op, conv)
    monkeypatch.setattr(em, "BLOCK_ELEMENTS", 4 * WIDTH)  # a few rows a block
    assert len(em.row_blocks(ROWS, WIDTH)) > 1
    blocked = _evaluate(op, conv)
    assert len(blocked) == len(whole)
    for got, should in zip(blocked, whole, strict=True):
        assert got.shape == should.shape
        np.testing.assert_allclose(got, should, rtol=1e-12, atol=0.0)


def test_row_blocks_cover_every_row_once() -> None:
    for rows, width in ((0, 8), (1, 8), (5, 1 << 20), (32_775, 64)):
        covered = np.concatenate([np.arange(rows)[s] for s in em.row_blocks(rows, width)])
        assert np.array_equal(covered, np.arange(rows))


@pytest.mark.parametrize("shape", [(3, 0), (0, 5), (2, 0, 4)])
@pytest.mark.filterwarnings("ignore::RuntimeWarning")  # the mean of no elements
def test_norm_budgets_of_no_rows_or_no_features(shape: tuple[int, ...]) -> None:
    x, w = np.ones(shape), np.ones(shape[-1])
    for op, inputs in (("rms_norm", {"x": x, "weight": w}), ("layer_norm", {"x": x, "weight": w, "bias": w})):
        assert registry.FORWARD[op](inputs, {"eps": 1e-5}, Conventions(), BF16).v.shape == shape
        grads = registry.VJP[op](inputs, {"eps": 1e-5}, Conventions(), BF16, np.ones(shape))
        assert {k: t.v.shape for k, t in grads.items()} == {k: a.shape for k, a in inputs.items()}


def test_allocator_setting_applies_on_glibc(monkeypatch: pytest.MonkeyPatch) -> None:
    if sys.platform.startswith("linux") and platform.libc_ver()[0] == "glibc":
        assert allocator.keep_freed_memory()
    monkeypatch.setattr(sys, "platform", "darwin")
    assert not allocator.keep_freed_memory()
