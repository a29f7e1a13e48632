"""What each benchmarked operation must move and compute: the byte and FLOP accounting of the report.

Bytes are the *minimum* traffic of one pass: every input read once and every output written once, in its
own dtype (floating tensors in the dtype under test, integer positions and targets as int64). A pass is
the forward (inputs → output) or the backward (cotangent and the forward inputs it needs → one gradient
per floating input); "forward+backward" is their sum. Per-row statistics a kernel may save between the two
(a norm's 1/rms, a loss's logsumexp) are a few bytes per row and not counted: the minimum recomputes them.

FLOPs count each add, multiply, divide, exp and compare as one (a multiply-add is two); matrix products are
exact (2·m·n·k), element-wise counts are per element and approximate, which matters little: every
operation here but the SwiGLU MLP is memory-bound (seed-002 §3.2.1: normalisation is ~0.2 % of a
transformer's FLOPs yet ~25 % of its runtime), so its position is its fraction of the copy bandwidth, and
the MLP's is its fraction of the matmul rate, where the matrix products are 99.9 % of the FLOPs.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any, Literal

Shapes = dict[str, tuple[int, ...]]
Dims = Mapping[str, int]
Bound = Literal["memory", "compute"]

ELEMENT_BYTES = {"float32": 4, "bfloat16": 2, "float16": 2, "float64": 8}
INT_BYTES = 8  # positions and targets cross the contract as int64


def _numel(shape: tuple[int, ...]) -> int:
    return math.prod(shape)


@dataclass(frozen=True)
class BenchOp:
    """One benchmarked operation: its inputs, outputs and FLOPs as functions of a size's dimensions."""

    name: str  # the name the adapter's ``native`` hook is asked for
    behaviour: str  # the behaviour of the report it belongs to
    contract_op: str  # the contract operation whose declared capability (dtypes, grad) it needs
    bound: Bound  # which ceiling the seeds say limits it
    summary: str
    floating: Callable[[Dims], Shapes]  # floating inputs (all differentiable), in the dtype under test
    outputs: Callable[[Dims], Shapes]  # forward outputs, in the dtype under test
    flops_forward: Callable[[Dims], int]
    flops_backward: Callable[[Dims], int]
    integer: Callable[[Dims], Shapes] = lambda d: {}  # int64 inputs
    backward_reads: tuple[str, ...] = ()  # forward inputs the backward needs, besides the cotangent
    params: Mapping[str, Any] = field(default_factory=dict)
    label: Callable[[Dims], str] = lambda d: "×".join(str(v) for v in d.values())


def _tokens(d: Dims) -> int:
    return d["batch"] * d["seq"]


def _norm_x(d: Dims) -> tuple[int, ...]:
    return (d["batch"], d["seq"], d["d"])


def _rope_x(d: Dims) -> tuple[int, ...]:
    return (d["batch"], d["heads"], d["seq"], d["head_dim"])


OPS: dict[str, BenchOp] = {
    op.name: op
    for op in (
        BenchOp(
            name="rms_norm",
            behaviour="rms_norm",
            contract_op="rms_norm",
            bound="memory",
            summary="RMSNorm over the last dimension, x (batch, seq, d), weight (d)",
            floating=lambda d: {"x": _norm_x(d), "weight": (d["d"],)},
            outputs=lambda d: {"y": _norm_x(d)},
            # x² and its sum, ·1/rms, ·γ; backward: x̂, g·γ, Σ g·γ·x̂, dx, dγ
            flops_forward=lambda d: 4 * _numel(_norm_x(d)),
            flops_backward=lambda d: 9 * _numel(_norm_x(d)),
            backward_reads=("x", "weight"),
            params={"eps": 1e-6},
        ),
        BenchOp(
            name="layer_norm",
            behaviour="layer_norm",
            contract_op="layer_norm",
            bound="memory",
            summary="LayerNorm over the last dimension, x (batch, seq, d), weight and bias (d)",
            floating=lambda d: {"x": _norm_x(d), "weight": (d["d"],), "bias": (d["d"],)},
            outputs=lambda d: {"y": _norm_x(d)},
            # seed-002 §3.2.1's ≈7d: mean, x−μ, square, sum, ·1/σ, ·γ, +β
            flops_forward=lambda d: 7 * _numel(_norm_x(d)),
            flops_backward=lambda d: 12 * _numel(_norm_x(d)),
            backward_reads=("x", "weight"),
            params={"eps": 1e-5},
        ),
        BenchOp(
            name="rope",
            behaviour="rope",
            contract_op="rope",
            bound="memory",
            summary="RoPE on x (batch, heads, seq, head_dim) at positions (seq), angles from the positions",
            floating=lambda d: {"x": _rope_x(d)},
            integer=lambda d: {"positions": (d["seq"],)},
            outputs=lambda d: {"y": _rope_x(d)},
            # per pair: 4 multiplies and 2 adds; the backward rotates the cotangent back, reading only positions
            flops_forward=lambda d: 3 * _numel(_rope_x(d)),
            flops_backward=lambda d: 3 * _numel(_rope_x(d)),
            backward_reads=("positions",),
            params={"base": 10000.0, "rotary_dim": None},
        ),
        BenchOp(
            name="swiglu_mlp",
            behaviour="swiglu_mlp",
            contract_op="swiglu_mlp",
            bound="compute",
            summary="(silu(x@w1) * (x@w3)) @ w2, x (batch, seq, d), w1 and w3 (d, hidden), w2 (hidden, d)",
            floating=lambda d: {
                "x": (d["batch"], d["seq"], d["d"]),
                "w1": (d["d"], d["hidden"]),
                "w3": (d["d"], d["hidden"]),
                "w2": (d["hidden"], d["d"]),
            },
            outputs=lambda d: {"y": (d["batch"], d["seq"], d["d"])},
            # three matrix products; silu and the product: 5 per hidden element (backward: 11)
            flops_forward=lambda d: 6 * _tokens(d) * d["d"] * d["hidden"] + 5 * _tokens(d) * d["hidden"],
            flops_backward=lambda d: 12 * _tokens(d) * d["d"] * d["hidden"] + 11 * _tokens(d) * d["hidden"],
            backward_reads=("x", "w1", "w3", "w2"),
            label=lambda d: f"{d['batch']}×{d['seq']}×{d['d']}→{d['hidden']}",
        ),
        BenchOp(
            name="swiglu_product",
            behaviour="swiglu_mlp",
            contract_op="swiglu_mlp",
            bound="memory",
            summary="the GLU element-wise product alone: silu(gate) * up, gate and up (batch, seq, hidden)",
            floating=lambda d: {"gate": (d["batch"], d["seq"], d["hidden"]), "up": (d["batch"], d["seq"], d["hidden"])},
            outputs=lambda d: {"y": (d["batch"], d["seq"], d["hidden"])},
            # σ (exp, add, divide), ·gate, ·up; backward: σ, silu, silu', two products with the cotangent
            flops_forward=lambda d: 5 * _tokens(d) * d["hidden"],
            flops_backward=lambda d: 11 * _tokens(d) * d["hidden"],
            backward_reads=("gate", "up"),
        ),
        BenchOp(
            name="cross_entropy",
            behaviour="cross_entropy",
            contract_op="cross_entropy",
            bound="memory",
            summary="per-token softmax cross-entropy, logits (tokens, vocab), targets (tokens)",
            floating=lambda d: {"logits": (d["tokens"], d["vocab"])},
            integer=lambda d: {"targets": (d["tokens"],)},
            outputs=lambda d: {"loss": (d["tokens"],)},
            # max, subtract, exp, sum; backward: subtract logsumexp, exp, ·g (the one-hot term is per row)
            flops_forward=lambda d: 4 * d["tokens"] * d["vocab"],
            flops_backward=lambda d: 3 * d["tokens"] * d["vocab"],
            backward_reads=("logits", "targets"),
        ),
        BenchOp(
            name="z_loss",
            behaviour="z_loss",
            contract_op="z_loss",
            bound="memory",
            summary="per-token z-loss alpha·logsumexp(logits)², logits (tokens, vocab)",
            floating=lambda d: {"logits": (d["tokens"], d["vocab"])},
            outputs=lambda d: {"loss": (d["tokens"],)},
            flops_forward=lambda d: 4 * d["tokens"] * d["vocab"],
            flops_backward=lambda d: 3 * d["tokens"] * d["vocab"],
            backward_reads=("logits",),
            params={"alpha": 1e-4},
        ),
    )
}

#: Order of the report's sections.
BEHAVIOURS = ("rms_norm", "layer_norm", "rope", "swiglu_mlp", "cross_entropy", "z_loss")

PASSES = ("forward", "forward+backward")


def forward_bytes(op: BenchOp, dims: Dims, dtype: str) -> int:
    """Inputs read once, output written once."""
    e = ELEMENT_BYTES[dtype]
    read = sum(_numel(s) for s in op.floating(dims).values()) * e
    read += sum(_numel(s) for s in op.integer(dims).values()) * INT_BYTES
    written = sum(_numel(s) for s in op.outputs(dims).values()) * e
    return read + written


def backward_bytes(op: BenchOp, dims: Dims, dtype: str) -> int:
    """The cotangent and the forward inputs the backward needs read once, one gradient per floating input
    written once."""
    e = ELEMENT_BYTES[dtype]
    floating, integer = op.floating(dims), op.integer(dims)
    read = sum(_numel(s) for s in op.outputs(dims).values()) * e
    for name in op.backward_reads:
        read += _numel(floating[name]) * e if name in floating else _numel(integer[name]) * INT_BYTES
    written = sum(_numel(s) for s in floating.values()) * e
    return read + written


def pass_bytes(op: BenchOp, dims: Dims, dtype: str, grad: bool) -> int:
    """Minimum bytes of the forward, or of forward and backward together (``grad``)."""
    return forward_bytes(op, dims, dtype) + (backward_bytes(op, dims, dtype) if grad else 0)


def pass_flops(op: BenchOp, dims: Dims, grad: bool) -> int:
    return op.flops_forward(dims) + (op.flops_backward(dims) if grad else 0)


def pass_name(grad: bool) -> str:
    return PASSES[1] if grad else PASSES[0]
