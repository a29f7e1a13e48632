"""The library releases each built-in adapter supports (adapters/versions.py), and the refusal of any other.

The refusal is tested through the helper with made-up version strings, and against the releases installed
here; the rope-scaling tests run HF's own rotary embedding on whichever transformers major is installed
(4.x or 5.x), so each major is covered where it is installed (docs/adapters.md, "Supported releases").
"""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from transformer_conformance.adapters import BUILTIN, load_adapter
from transformer_conformance.adapters.registry import AdapterLoadError
from transformer_conformance.adapters.versions import (
    LIGER,
    SUPPORTED,
    Supported,
    UnsupportedVersion,
    at_least,
    describe,
    installed,
    release,
    require,
)

ROOT = Path(__file__).resolve().parents[1]


@pytest.mark.parametrize(
    ("text", "numbers"),
    [
        ("2.13.0+cpu", (2, 13, 0)),
        ("0.4.2.dev1", (0, 4, 2)),
        ("5.0.0rc1", (5, 0, 0)),
        ("4.46.3", (4, 46, 3)),
        ("1.32", (1, 32)),
        ("nightly", (-1,)),
    ],
)
def test_release_numbers(text: str, numbers: tuple[int, ...]) -> None:
    assert release(text) == numbers


def test_refusal_is_one_line_naming_release_and_range() -> None:
    versions = {"liger-kernel": "0.3.1", "triton": "3.9.0", "torch": "2.13.0"}
    with pytest.raises(UnsupportedVersion) as err:
        require("liger", SUPPORTED["liger"], versions)
    assert (
        str(err.value) == "liger-kernel 0.3.1 is not supported: the liger adapter supports liger-kernel >= 0.4, < 0.9"
    )


@pytest.mark.parametrize(
    ("have", "admitted"),
    [("0.3.1", False), ("0.4.0", True), ("0.4.2", True), ("0.6.4", True), ("0.8.5", True), ("0.9.0", False)],
)
def test_liger_range(have: str, admitted: bool) -> None:
    assert LIGER.admits(have) is admitted


@pytest.mark.parametrize(
    ("name", "versions", "refused"),
    [
        ("hf-llama", {"transformers": "4.44.2", "torch": "2.13.0"}, "transformers 4.44.2"),
        ("hf-llama", {"transformers": "6.0.0", "torch": "2.13.0"}, "transformers 6.0.0"),
        ("hf-llama", {"transformers": "4.46.3", "torch": "2.3.1"}, "torch 2.3.1"),
        ("torch", {"torch": "3.0.0"}, "torch 3.0.0"),
        ("jax", {"jax": "0.4.29"}, "jax 0.4.29"),
        ("flax", {"flax": "0.9.0", "jax": "0.10.2"}, "flax 0.9.0"),
        ("onnxruntime", {"onnxruntime": "1.31.1"}, "onnxruntime 1.31.1"),
        ("onnxruntime-export", {"onnxruntime": "1.32.0", "torch": "2.12.1", "onnxscript": "0.7.2"}, "torch 2.12.1"),
    ],
)
def test_each_library_of_an_adapter_is_checked(name: str, versions: dict[str, str], refused: str) -> None:
    with pytest.raises(UnsupportedVersion, match=f"^{re.escape(refused)} is not supported: the {name} adapter"):
        require(name, SUPPORTED[name], versions)


@pytest.mark.parametrize(
    ("name", "versions"),
    [
        ("hf-llama", {"transformers": "4.46.3", "torch": "2.4.1"}),
        ("hf-llama", {"transformers": "4.55.4", "torch": "2.13.0+cpu"}),
        ("hf-llama", {"transformers": "5.24.0", "torch": "2.13.0+cpu"}),
        ("liger", {"liger-kernel": "0.4.2", "triton": "3.9.0", "torch": "2.13.0"}),
        ("flax-nnx", {"flax": "0.12.8", "jax": "0.10.2"}),
    ],
)
def test_the_releases_people_run_are_admitted(name: str, versions: dict[str, str]) -> None:
    require(name, SUPPORTED[name], versions)


def test_a_missing_library_is_named() -> None:
    with pytest.raises(UnsupportedVersion, match=r"^the jax adapter needs jax >= 0\.4\.30, < 0\.11 \(not installed\)$"):
        require("jax", SUPPORTED["jax"], {})


def test_at_least() -> None:
    assert at_least("torch", "2.5", {"torch": "2.5.0+cpu"})
    assert not at_least("torch", "2.5", {"torch": "2.4.1"})
    assert not at_least("torch", "2.5", {})


def test_every_builtin_adapter_states_its_releases() -> None:
    assert set(SUPPORTED) == set(BUILTIN)
    assert all(SUPPORTED[name] and all(isinstance(s, Supported) for s in SUPPORTED[name]) for name in BUILTIN)


def test_docs_list_the_same_releases() -> None:
    """docs/adapters.md's table says what adapters/versions.py declares, row for row."""
    text = (ROOT / "docs" / "adapters.md").read_text()
    for name, supported in SUPPORTED.items():
        assert f"| `{name}` | {describe(supported)} |" in text, name


def test_installed_releases_are_supported() -> None:
    """What the project's CI installs is inside every range that names it (the measured releases)."""
    for s in {s for group in SUPPORTED.values() for s in group}:
        have = installed(s.distribution, s.module)
        if have is not None:
            assert s.admits(have), (s, have)


class _NeedsAFutureNumpy:
    """An adapter that supports only numpy releases that do not exist yet."""

    name = "future-numpy"

    def __init__(self) -> None:
        require(self.name, (Supported("numpy", "99", "100"),))


def test_registry_reports_the_refusal_in_one_line() -> None:
    with pytest.raises(AdapterLoadError) as err:
        load_adapter("tests.test_adapter_versions:_NeedsAFutureNumpy")
    message = str(err.value)
    assert "\n" not in message
    assert re.fullmatch(
        r"adapter '[^']+': numpy \S+ is not supported: the future-numpy adapter supports numpy >= 99, < 100", message
    ), message


def test_environment_names_the_releases() -> None:
    adapter = load_adapter("numpy")
    assert adapter.environment()["supports"] == describe(SUPPORTED["numpy"])
    pytest.importorskip("torch")
    assert load_adapter("torch").environment()["supports"] == describe(SUPPORTED["torch"])


# ---- HF: the scaling asked for is the scaling built, on 4.x and 5.x ------------------------------------------


def _hf() -> Any:
    pytest.importorskip("transformers")
    return load_adapter("hf-llama")


RULES = [
    {"type": "yarn", "factor": 8.0, "original_max_position_embeddings": 64},
    {
        "type": "llama3",
        "factor": 8.0,
        "original_max_position_embeddings": 64,
        "low_freq_factor": 1.0,
        "high_freq_factor": 4.0,
    },
    {"type": "dynamic", "factor": 4.0, "original_max_position_embeddings": 64},
]


@pytest.mark.parametrize("rule", RULES, ids=[r["type"] for r in RULES])
def test_hf_scaled_rope_is_scaled(rule: dict[str, Any]) -> None:
    """A rule asked for gives that rule's angles (the oracle's, to float32 accuracy), not plain RoPE's, on the
    transformers major installed: 5.x builds it from rope_parameters, 4.x from rope_scaling."""
    adapter = _hf()
    numpy = load_adapter("tests.test_adapter_versions:_half_numpy")
    x = np.random.default_rng(0).standard_normal((1, 3, 16)).astype(np.float32)
    inputs = {"x": x, "positions": np.array([3, 63, 200])}  # beyond the trained length 64: a dynamic call scales
    params = {"base": 10000.0, "scaling": rule}
    got = adapter.forward("rope_scaled", inputs, params).astype(np.float64)
    plain = adapter.forward("rope", inputs, {"base": 10000.0}).astype(np.float64)
    want = numpy.forward("rope_scaled", inputs, params).astype(np.float64)
    assert np.max(np.abs(got - want)) < 1e-4
    assert np.max(np.abs(plain - want)) > 1e-2  # the scaling changes these angles far beyond that


def _half_numpy() -> Any:
    from transformer_conformance.adapters.numpy.adapter import NumpyAdapter

    return NumpyAdapter(rope_layout="half")


def test_hf_refuses_a_parameter_the_release_does_not_read() -> None:
    """A rule with a parameter this release's configuration does not recognise is refused in one line, not
    run without it."""
    adapter = _hf()
    x = np.ones((1, 2, 8), dtype=np.float32)
    rule = {"type": "llama3", "factor": 8.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0}
    rule |= {"high_freq_factor": 4.0, "not_a_parameter": 1.0}
    with pytest.raises(UnsupportedVersion, match=r"^transformers \S+ cannot set llama3 RoPE scaling as asked: "):
        adapter.forward("rope_scaled", {"x": x, "positions": np.array([0, 1])}, {"base": 10000.0, "scaling": rule})


def test_hf_refuses_a_rotary_embedding_of_another_rope_type() -> None:
    """On 4.x a configuration given 5.x's rope_parameters builds plain RoPE: the check refuses that module (on
    5.x the same configuration is the one the adapter builds, and is accepted)."""
    pytest.importorskip("transformers")
    from transformers import LlamaConfig
    from transformers.models.llama.modeling_llama import LlamaRotaryEmbedding

    from transformer_conformance.adapters.hf.rope_config import check_rotary, uses_rope_parameters

    config = LlamaConfig(
        hidden_size=8,
        num_attention_heads=1,
        head_dim=8,
        max_position_embeddings=513,
        rope_parameters={"rope_type": "linear", "rope_theta": 10000.0, "factor": 8.0},
    )
    module = LlamaRotaryEmbedding(config=config)
    if uses_rope_parameters(LlamaConfig):
        assert check_rotary(module, "linear") is module
    else:
        with pytest.raises(UnsupportedVersion, match=r"cannot set linear RoPE scaling as asked: .* applies 'default'"):
            check_rotary(module, "linear")
