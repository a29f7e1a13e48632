"""The jax, flax and flax-nnx built-in adapters load, declare honestly, and pass a smoke subset."""

from __future__ import annotations

import numpy as np
import pytest

pytest.importorskip("jax")
pytest.importorskip("flax")

from tests.adapter_smoke import outside_hypothesis, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, check_forward
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


@pytest.mark.parametrize("name", ["jax", "flax", "flax-nnx"])
def test_smoke(name: str) -> None:
    adapter = load_adapter(name)
    assert adapter.name == name
    assert smoke(adapter)


def test_jax_hidden_dim() -> None:
    assert int(load_adapter("jax").forward("swiglu_hidden_dim", {}, {"d": 4096, "multiple_of": 256})) == 11008


def test_flax_declares_only_its_norms() -> None:
    for name in ("flax", "flax-nnx"):
        a = load_adapter(name)
        assert set(a.capabilities) == {"rms_norm", "layer_norm"}
        assert a.conventions.variance == "one_pass" and a.conventions.eps_defaults["layer_norm"] == 1e-6


def test_flax_default_output_is_promoted() -> None:
    """By default a bfloat16 input gives a float32 output (fp32 parameters); the adapter casts it once."""
    from transformer_conformance.adapters.flax.adapter import FlaxLinenAdapter

    dtype = fmt("bfloat16")
    inputs = {"x": fill(dtype, (2, 8), 1.0, 0), "weight": fill(dtype, (8,), 0.5, 1, offset=1.0)}
    raw = FlaxLinenAdapter(output="module").forward("rms_norm", inputs, {"eps": None})
    cast = FlaxLinenAdapter().forward("rms_norm", inputs, {"eps": None})
    assert raw.dtype == np.float32 and cast.dtype == dtype.np_dtype
    assert np.array_equal(dtype.round(raw.astype(np.float64)), cast)


def test_one_pass_variance_is_enforced() -> None:
    """Flax's LayerNorm declared with a two-pass variance is caught where the one-pass formula cancels:
    rows whose mean is large against their spread."""
    from transformer_conformance.adapters.contract import Conventions
    from transformer_conformance.adapters.flax.adapter import FlaxLinenAdapter

    declared = FlaxLinenAdapter()
    undeclared = FlaxLinenAdapter()
    undeclared.conventions = Conventions(eps_defaults=declared.conventions.eps_defaults)  # two-pass
    dtype = fmt("float32")
    n = 256
    x = fill(dtype, (4, n), 1.0, 3, offset=300.0)  # |μ|/σ = 300: mean(x²) − μ² loses ~17 bits
    c = Case(
        {"x": x, "weight": fill(dtype, (n,), 0.5, 4, offset=1.0), "bias": fill(dtype, (n,), 0.5, 5)}, {"eps": 1e-5}
    )
    with outside_hypothesis():
        check_forward(declared, "layer_norm", c, dtype, Record("ln", "layer_norm", "", ""))
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(undeclared, "layer_norm", c, dtype, Record("ln", "layer_norm", "", ""))


def test_jax_sliding_window_is_exclusive_and_top_left() -> None:
    """``local_window_size=(1, 0)`` under ``is_causal`` with L_q = 3 < L_k = 5: query i sees keys i − 1 and i (two:
    W counts the keys before its own, exclusive) and is token i (top-left). Zero scores make the weights uniform over
    the visible keys, and one-hot values show which they are; the oracle under either other declaration disagrees."""
    from dataclasses import replace

    from transformer_conformance.reference.local_attention import window_mask

    adapter = load_adapter("jax")
    conv = adapter.conventions
    assert (conv.sliding_window, conv.causal_alignment) == ("exclusive", "top_left")
    lq, lk = 3, 5
    onehot = {"q": np.zeros((1, 2, lq, 1), np.float32), "k": np.zeros((1, 1, lk, 1), np.float32)}
    onehot["v"] = np.eye(lk, dtype=np.float32)[None, None]
    seen = adapter.forward("sliding_window_attention", onehot, {"window": 1, "softcap": None, "scale": None}) > 0
    assert np.array_equal(seen, np.broadcast_to(window_mask(lq, lk, 1, "top_left", "exclusive"), seen.shape))

    dtype = fmt("float32")
    inputs = {"q": fill(dtype, (1, 2, lq, 4), 1.0, 0), "k": fill(dtype, (1, 1, lk, 4), 1.0, 1)}
    c = Case(inputs | {"v": fill(dtype, (1, 1, lk, 3), 1.0, 2)}, {"window": 1, "softcap": None, "scale": None})
    record = Record("swa", "sliding_window_attention", "", "")
    with outside_hypothesis():
        check_forward(adapter, "sliding_window_attention", c, dtype, record)
    for wrong in (replace(conv, sliding_window="inclusive"), replace(conv, causal_alignment="bottom_right")):
        adapter.conventions = wrong
        with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
            check_forward(adapter, "sliding_window_attention", c, dtype, record)


def test_programs_are_counted_and_shared(tmp_path: object) -> None:
    """compiles() counts what XLA compiled, not what the persistent cache served; every jax adapter plans shapes."""
    import jax

    from transformer_conformance.adapters.jax.compiles import backend_compiles, cache_dir

    adapter = load_adapter("jax")
    assert all(c.compiles == "per_shape" for op, c in adapter.capabilities.items() if op != "swiglu_hidden_dim")
    assert jax.config.jax_compilation_cache_dir == str(cache_dir())
    x = np.ones((7, 13), np.float32)
    before = adapter.compiles()
    f = jax.jit(lambda x: x * 3.0 + 1.0)
    f(x).block_until_ready()  # compiled, or served by the persistent cache of an earlier run
    first = backend_compiles()
    f(x).block_until_ready()  # in memory: nothing built
    assert first - before <= 1 and backend_compiles() == first
