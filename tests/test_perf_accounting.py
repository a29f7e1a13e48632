"""The performance report's byte and FLOP accounting: minimum bytes (inputs read once, outputs written once)
and FLOPs, checked by hand for the seeds' shapes."""

from __future__ import annotations

from benchmarks.perf.accounting import OPS, backward_bytes, forward_bytes, pass_bytes, pass_flops
from benchmarks.perf.sizes import FULL, QUICK

N, D, H = 4 * 2048, 4096, 11008  # seed-002 §3.1.1 / §3.2.1: batch 4 × sequence 2048, d = 4096, d_ff = 11008
NORM = {"batch": 4, "seq": 2048, "d": D}


def test_rms_norm_bf16_reads_x_and_weight_writes_y() -> None:
    op = OPS["rms_norm"]
    assert forward_bytes(op, NORM, "bfloat16") == 2 * (N * D + D) + 2 * N * D == 134_225_920
    # backward: reads the cotangent, x and the weight; writes dx and dweight
    assert backward_bytes(op, NORM, "bfloat16") == 2 * (N * D + N * D + D) + 2 * (N * D + D)
    assert pass_bytes(op, NORM, "bfloat16", grad=True) == 134_225_920 + 201_342_976
    assert pass_flops(op, NORM, grad=False) == 4 * N * D


def test_layer_norm_float32_also_reads_the_bias() -> None:
    op = OPS["layer_norm"]
    assert forward_bytes(op, NORM, "float32") == 4 * (N * D + 2 * D) + 4 * N * D
    assert backward_bytes(op, NORM, "float32") == 4 * (N * D + N * D + D) + 4 * (N * D + 2 * D)
    assert pass_flops(op, NORM, grad=False) == 7 * N * D  # seed-002 §3.2.1: "≈ 7d scalar ops"


def test_rope_reads_int64_positions_and_its_backward_needs_no_x() -> None:
    op = OPS["rope"]
    dims = {"batch": 4, "heads": 32, "seq": 2048, "head_dim": 128}
    x = 4 * 32 * 2048 * 128
    assert forward_bytes(op, dims, "bfloat16") == 2 * x + 8 * 2048 + 2 * x
    assert backward_bytes(op, dims, "bfloat16") == 2 * x + 8 * 2048 + 2 * x


def test_swiglu_mlp_flops_are_three_matmuls_plus_the_product() -> None:
    op = OPS["swiglu_mlp"]
    dims = {"batch": 4, "seq": 2048, "d": D, "hidden": H}
    assert forward_bytes(op, dims, "bfloat16") == 2 * (N * D + 3 * D * H) + 2 * N * D
    assert pass_flops(op, dims, grad=False) == 3 * (2 * N * D * H) + 5 * N * H
    assert pass_flops(op, dims, grad=True) == 9 * (2 * N * D * H) + 16 * N * H


def test_cross_entropy_reads_logits_and_targets_writes_per_token_loss() -> None:
    op = OPS["cross_entropy"]
    dims = {"tokens": N, "vocab": 32000}
    assert forward_bytes(op, dims, "bfloat16") == 2 * N * 32000 + 8 * N + 2 * N
    assert backward_bytes(op, dims, "bfloat16") == 2 * N + 2 * N * 32000 + 8 * N + 2 * N * 32000


def test_only_the_mlp_is_above_the_seed_ridge_point() -> None:
    """seed-002 §3.2.1: an H100 does ~300 FLOPs per byte of bandwidth; below that an operation is memory-bound."""
    for name, op in OPS.items():
        dims = FULL[name][0]
        intensity = pass_flops(op, dims, grad=False) / forward_bytes(op, dims, "bfloat16")
        assert (intensity > 300) == (op.bound == "compute"), (name, intensity)


def test_sizes_start_with_the_seed_shapes_and_cover_every_operation() -> None:
    assert set(FULL) == set(QUICK) == set(OPS)
    assert FULL["rms_norm"][0] == NORM
    assert FULL["swiglu_mlp"][0] == {"batch": 4, "seq": 2048, "d": D, "hidden": H}
    assert FULL["rope"][0]["head_dim"] == 128
    assert {s["vocab"] for s in FULL["cross_entropy"]} == {32000, 128000}
