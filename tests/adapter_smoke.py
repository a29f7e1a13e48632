"""A quick in-process smoke subset for built-in adapters: every declared operation on one small example
per dtype (and per declared value of its named choices: each RoPE scaling rule, each activation), forward
and gradient, held to the same oracle and budget as the conformance checks."""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any
from unittest import mock

import numpy as np

from transformer_conformance.adapters.contract import CHOICES, Adapter
from transformer_conformance.conformance.harness.compare import Record, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import Format, fmt

#: the parameters of each RoPE scaling rule in the smoke examples
SCALING = {
    "linear": {"factor": 4.0},
    "ntk": {"factor": 4.0},
    "dynamic": {"factor": 4.0, "original_max_position_embeddings": 4},
    "yarn": {"factor": 4.0, "original_max_position_embeddings": 64},
    "llama3": {"factor": 8.0, "original_max_position_embeddings": 64, "low_freq_factor": 1.0, "high_freq_factor": 4.0},
    # rotary_dim 8: four pairs; positions up to 7, so the long factors
    "longrope": {
        "factor": 4.0,
        "original_max_position_embeddings": 4,
        "short_factor": [1.0, 1.1, 1.2, 1.05],
        "long_factor": [1.0, 2.0, 4.5, 7.0],
    },
}


def case(op: str, dtype: Format, seed: int = 0, n: int = 64, choice: str | None = None) -> Case:
    """A small, ordinary example of ``op`` in ``dtype`` (``choice``: the value of its named choice)."""
    inputs: dict[str, np.ndarray]
    params: dict[str, Any] = {}
    if op in ("mlp", "glu_mlp"):
        d, h = 8, 12
        w_in, w_out = fill(dtype, (d, h), d**-0.5, seed + 1), fill(dtype, (h, d), h**-0.5, seed + 3)
        inputs = {"x": fill(dtype, (3, d), 1.0, seed)}
        if op == "glu_mlp":
            inputs |= {"w1": w_in, "w3": fill(dtype, (d, h), d**-0.5, seed + 2), "w2": w_out}
        else:
            inputs |= {"w_in": w_in, "w_out": w_out}
        params = {"activation": choice}
    elif op == "rope_scaled":
        inputs = {"x": fill(dtype, (2, 5, 16), 1.0, seed), "positions": np.arange(3, 8, dtype=np.int64)}
        params = {"base": 10000.0, "rotary_dim": 8, "scaling": {"type": choice, **SCALING[str(choice)]}}
    elif op in ("rms_norm", "layer_norm"):
        inputs = {"x": fill(dtype, (3, n), 1.0, seed), "weight": fill(dtype, (n,), 0.5, seed + 1, offset=1.0)}
        if op == "layer_norm":
            inputs["bias"] = fill(dtype, (n,), 0.5, seed + 2)
        params = {"eps": 1e-5}
    elif op == "rope":
        inputs = {"x": fill(dtype, (2, 5, 16), 1.0, seed), "positions": np.arange(3, 8, dtype=np.int64)}
        params = {"base": 10000.0, "rotary_dim": 8}
    elif op == "swiglu_mlp":
        d, h = 8, 12
        inputs = {
            "x": fill(dtype, (3, d), 1.0, seed),
            "w1": fill(dtype, (d, h), d**-0.5, seed + 1),
            "w3": fill(dtype, (d, h), d**-0.5, seed + 2),
            "w2": fill(dtype, (h, d), h**-0.5, seed + 3),
        }
    elif op == "attention":  # grouped heads (4 query heads on 2 KV heads), fewer queries than keys, causal
        inputs = {
            "q": fill(dtype, (1, 4, 3, 8), 1.0, seed),
            "k": fill(dtype, (1, 2, 5, 8), 1.0, seed + 1),
            "v": fill(dtype, (1, 2, 5, 8), 1.0, seed + 2),
        }
        params = {"causal": True, "softcap": 5.0 if choice == "tanh" else None, "scale": None}
    elif op in ("sliding_window_attention", "chunked_attention", "sink_attention"):  # as attention, spans of 2
        inputs = {
            "q": fill(dtype, (1, 4, 3, 8), 1.0, seed),
            "k": fill(dtype, (1, 2, 5, 8), 1.0, seed + 1),
            "v": fill(dtype, (1, 2, 5, 8), 1.0, seed + 2),
        }
        if op == "sliding_window_attention":
            params = {"window": 2, "softcap": 5.0 if choice == "tanh" else None, "scale": None}
        elif op == "chunked_attention":
            params = {"chunk": 2, "scale": None}
        else:
            inputs["sinks"] = fill(dtype, (4,), 1.0, seed + 3)
            params = {"causal": True, "window": None, "scale": None}
    elif op == "moe_router":  # the declared value named by ``choice``, the first of each other choice
        inputs = {
            "logits": dtype.round(np.arange(24.0).reshape(3, 8)[:, ::-1] * 0.25),
            "bias": dtype.round(np.zeros(8)),
        }
        params = {
            "k": 2,
            "score": choice if choice in ("softmax", "sigmoid") else "softmax",
            "norm": "topk" if choice == "topk" else "none",
            "routed_scaling_factor": 2.5 if choice == "factor" else 1.0,
            "n_group": 2 if choice == "groups" else None,
            "topk_group": 1 if choice == "groups" else None,
        }
    elif op == "moe_aux_loss":
        inputs = {"logits": dtype.round(np.arange(24.0).reshape(3, 8)[:, ::-1] * 0.25)}
        params = {"k": 2}
    elif op == "mrope":  # an image's three position streams
        pos = np.stack([np.full(5, 3), 3 + np.arange(5) // 2, 3 + np.arange(5) % 2]).astype(np.int64)
        inputs = {"x": fill(dtype, (2, 5, 16), 1.0, seed), "positions": pos}
        params = {"base": 10000.0, "sections": (2, 3, 3), "streams": choice or "sections"}
    elif op == "attention_temperature":  # consecutive positions across the step at p + 1 = 1024
        inputs = {"q": fill(dtype, (2, 5, 8), 1.0, seed), "positions": np.arange(1021, 1026, dtype=np.int64)}
        params = {"floor_scale": 1024, "attn_scale": 0.1}
    elif op == "mla_attention":  # 3 queries over 5 keys, two heads, YaRN's mscale
        b, h, lq, lk, dn, dr, dc, dv = 1, 2, 3, 5, 4, 4, 6, 4
        inputs = {
            "q_nope": fill(dtype, (b, h, lq, dn), 1.0, seed),
            "q_rope": fill(dtype, (b, h, lq, dr), 1.0, seed + 1),
            "latent": fill(dtype, (b, lk, dc), 1.0, seed + 2),
            "k_rope": fill(dtype, (b, lk, dr), 1.0, seed + 3),
            "w_uk": fill(dtype, (h, dc, dn), dc**-0.5, seed + 4),
            "w_uv": fill(dtype, (h, dc, dv), dc**-0.5, seed + 5),
            "q_positions": np.arange(2, 5, dtype=np.int64),
            "k_positions": np.arange(5, dtype=np.int64),
        }
        params = {"causal": True, "base": 10000.0, "mscale": {"factor": 40.0, "mscale_all_dim": 1.0}, "form": choice}
    elif op == "block":  # four query heads on two KV heads, the placement the candidate declares
        d, hd, h = 8, 2, 12
        shapes = {
            "wq": (d, 4 * hd),
            "wk": (d, 2 * hd),
            "wv": (d, 2 * hd),
            "wo": (4 * hd, d),
            "w1": (d, h),
            "w3": (d, h),
            "w2": (h, d),
        }
        inputs = {k: fill(dtype, sh, sh[0] ** -0.5, seed + i) for i, (k, sh) in enumerate(shapes.items(), 1)}
        for i, k in enumerate(("attn_norm", "mlp_norm", "attn_post_norm", "mlp_post_norm")):
            inputs[k] = fill(dtype, (d,), 0.2, seed + 10 + i, offset=1.0)
        inputs |= {"x": fill(dtype, (1, 3, d), 1.0, seed), "positions": np.arange(5, 8, dtype=np.int64)}
        params = {"placement": choice, "n_heads": 4, "n_kv_heads": 2, "eps": 1e-6, "base": 10000.0}
    elif op == "linear_cross_entropy":  # one of four tokens ignored
        inputs = {
            "x": fill(dtype, (4, 8), 1.0, seed),
            "weight": fill(dtype, (17, 8), 8**-0.5, seed + 1),
            "bias": fill(dtype, (17,), 0.5, seed + 2),
            "targets": np.array([0, -100, 5, 16], dtype=np.int64),
        }
        params = {"ignore_index": -100, "reduction": choice}
    elif op == "moe_z_loss":  # a router's logits: 5 tokens over 8 experts
        inputs = {"logits": fill(dtype, (5, 8), 2.0, seed)}
    elif op == "z_loss_mean":
        inputs = {"logits": fill(dtype, (3, 17), 2.0, seed), "targets": np.array([0, -100, 16], dtype=np.int64)}
        params = {"alpha": 1e-4, "ignore_index": -100}
    else:
        inputs = {"logits": fill(dtype, (3, 17), 2.0, seed)}
        if op in ("cross_entropy", "cross_entropy_mean"):
            inputs["targets"] = np.array([0, 5, 16], dtype=np.int64)
            if op == "cross_entropy_mean":
                inputs["targets"][1] = -100
                params = {"ignore_index": -100}
        else:
            params = {"alpha": 1e-4} | ({"cap": 5.0} if op == "softcap_z_loss" else {})
    return Case(inputs, params)


@contextmanager
def outside_hypothesis() -> Iterator[None]:
    """Let the checks run outside a Hypothesis test (they steer its search with ``target``)."""
    with mock.patch("transformer_conformance.conformance.harness.compare.target", lambda *a, **k: None):
        yield


def smoke(adapter: Adapter, dtypes: tuple[str, ...] = ("float32", "bfloat16")) -> list[str]:
    """Run every declared floating operation of ``adapter``; return what was checked."""
    checked: list[str] = []
    with outside_hypothesis():
        _smoke(adapter, dtypes, checked)
    return checked


def router_case(dtype: Format, picks: dict[str, str | None]) -> Case:
    """A moe_router example with these values of its four choices."""
    grouped = picks["selection"] == "groups"
    params = {
        "k": 2,
        "score": picks["score"],
        "norm": picks["norm"],
        "routed_scaling_factor": 2.5 if picks["routed_scaling"] == "factor" else 1.0,
        "n_group": 2 if grouped else None,
        "topk_group": 1 if grouped else None,
    }
    bias = np.zeros(8) if picks["selection"] == "top_k" else np.linspace(-0.1, 0.1, 8)
    logits = dtype.round(np.arange(24.0).reshape(3, 8)[:, ::-1] * 0.25)
    return Case({"logits": logits, "bias": dtype.round(bias)}, params)


def _smoke(adapter: Adapter, dtypes: tuple[str, ...], checked: list[str]) -> None:
    for op, cap in adapter.capabilities.items():
        if op in ("swiglu_hidden_dim", "param_count", "ffn_hidden_dim"):  # integers of a configuration
            continue
        for name in dtypes:
            if name not in cap.dtypes:
                continue
            declared: list[tuple[str | None, str | None]] = [
                (key, v) for key, values in CHOICES.get(op, {}).items() for v in cap.declared(key, values)
            ]
            for key, choice in declared or [(None, None)]:
                dtype, rec = fmt(name), Record(op, op, "smoke", "")
                c = case(op, dtype, choice=choice)
                if op == "moe_router":  # the other choices at the first value the adapter declares
                    picks = {k: cap.declared(k, values)[0] for k, values in CHOICES[op].items()} | {str(key): choice}
                    c = router_case(dtype, picks)
                out = check_forward(adapter, op, c, dtype, rec)
                if cap.grad:
                    cot = fill(dtype, out.shape, 1.0, 99)
                    check_vjp(adapter, op, c, cot, dtype, rec)
                checked.append(f"{op}[{name}]" + (f"[{choice}]" if choice else ""))


def assert_default_eps(adapter: Adapter, op: str, declared: float) -> None:
    """ε = None is the declared default (``declared``): a row of small values, where ε shows, comes out as with
    ε = declared and not as with ε = declared / 10."""
    dtype = fmt("float32")
    inputs = {"x": fill(dtype, (3, 16), 1e-3, 0), "weight": fill(dtype, (16,), 0.2, 1, offset=1.0)}
    if op == "layer_norm":
        inputs["bias"] = fill(dtype, (16,), 0.2, 2)
    default = adapter.forward(op, inputs, {"eps": None})
    assert adapter.conventions.eps_defaults[op] == declared
    assert np.array_equal(default, adapter.forward(op, inputs, {"eps": declared}))
    assert not np.array_equal(default, adapter.forward(op, inputs, {"eps": declared / 10}))


def assert_rms_norm_keeps_the_input_dtype(adapter: Adapter) -> None:
    """RMSNorm's output and gradients come back in the input dtype (bfloat16) and shape, leading axes kept."""
    dtype = fmt("bfloat16")
    inputs = {"x": fill(dtype, (2, 3, 8), 1.0, 0), "weight": fill(dtype, (8,), 0.2, 1, offset=1.0)}
    assert adapter.forward("rms_norm", inputs, {"eps": None}).dtype == dtype.np_dtype
    grads = adapter.vjp("rms_norm", inputs, {"eps": None}, fill(dtype, (2, 3, 8), 1.0, 2))
    assert {k: g.dtype for k, g in grads.items()} == {"x": dtype.np_dtype, "weight": dtype.np_dtype}
    assert grads["x"].shape == (2, 3, 8) and grads["weight"].shape == (8,)
