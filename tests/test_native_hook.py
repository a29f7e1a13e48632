"""The torch adapter's optional ``native`` hook runs what the contract's ``forward`` runs: the performance
report times the same computation the conformance checks judge."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from benchmarks.perf.accounting import OPS
from benchmarks.perf.inputs import make_inputs
from transformer_conformance.adapters.torch.adapter import TorchAdapter
from transformer_conformance.adapters.torch.tensors import to_numpy

TINY = {
    "rms_norm": {"batch": 2, "seq": 3, "d": 8},
    "layer_norm": {"batch": 2, "seq": 3, "d": 8},
    "rope": {"batch": 1, "heads": 2, "seq": 3, "head_dim": 8},
    "swiglu_mlp": {"batch": 1, "seq": 3, "d": 8, "hidden": 16},
    "swiglu_product": {"batch": 1, "seq": 3, "hidden": 16},
    "cross_entropy": {"tokens": 3, "vocab": 11},
    "z_loss": {"tokens": 3, "vocab": 11},
}


@pytest.mark.parametrize("name", sorted(OPS))
def test_native_forward_matches_forward_and_backward_gives_one_gradient_per_floating_input(name: str) -> None:
    adapter = TorchAdapter()
    op = OPS[name]
    inputs = make_inputs(op, TINY[name], "float32")
    out = adapter.native(name, inputs, dict(op.params), grad=False)()
    if name != "swiglu_product":  # not a contract operation: no forward() to compare with
        np.testing.assert_array_equal(to_numpy(out), adapter.forward(name, inputs, dict(op.params)))
    grads = adapter.native(name, inputs, dict(op.params), grad=True)()
    floating = op.floating(TINY[name])
    assert [tuple(g.shape) for g in grads] == list(floating.values())
    assert all(isinstance(g, torch.Tensor) and bool(torch.isfinite(g).all()) for g in grads)


def test_native_raises_key_error_for_an_operation_it_lacks() -> None:
    with pytest.raises(KeyError):
        TorchAdapter().native("no_such_operation", {}, {}, grad=False)
