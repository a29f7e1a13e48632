"""The torch-compile adapter's compile-cost design holds: an operation compiled with unbacked sizes serves
shapes with and without size-1 dimensions from one graph, forward and VJP alike, and agrees with the oracle."""

from __future__ import annotations

import torch._dynamo.utils

from tests.adapter_smoke import outside_hypothesis
from transformer_conformance.adapters.torch.compile import UNBACKED_OPS, UNBACKED_SIZES, TorchCompileAdapter
from transformer_conformance.conformance.harness.compare import Record, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


def test_one_graph_serves_every_shape_forward_and_vjp() -> None:
    assert "rms_norm" in UNBACKED_OPS and UNBACKED_SIZES  # unbacked sizes from torch 2.13, the CI's release
    adapter, dtype = TorchCompileAdapter(), fmt("float32")
    before = torch._dynamo.utils.counters["stats"]["unique_graphs"]
    with outside_hypothesis():
        for rows, n in ((3, 5), (1, 7), (2, 1), (1, 1)):  # 0/1 specialisation would compile anew for the last three
            case = Case(
                {"x": fill(dtype, (rows, n), 1.0, rows), "weight": fill(dtype, (n,), 0.5, n, offset=1.0)},
                {"eps": 1e-5},
            )
            rec = Record("rms_norm", "rms_norm", "smoke", "")
            out = check_forward(adapter, "rms_norm", case, dtype, rec)
            check_vjp(adapter, "rms_norm", case, fill(dtype, out.shape, 1.0, 99), dtype, rec)
    assert torch._dynamo.utils.counters["stats"]["unique_graphs"] - before == 1
