"""RoPE through vLLM's rotary embeddings, as a vLLM model builds and calls them: ``get_rope(head_size, max_position,
is_neox_style, rope_parameters, dtype)`` inside the op context (adapters/vllm/runtime.py), then
``forward_native(positions, query, key)`` with q and k laid out ``[num_tokens, num_heads · head_size]``.

* ``rope`` — ``rope_parameters`` ``{"rope_theta": base, "partial_rotary_factor": rotary_dim/d}`` (``rope_dim``
  where the factor does not give the width back): ``RotaryEmbedding``;
* ``rope_scaled`` — ``rope_type`` ``linear`` (``LinearScalingRotaryEmbedding``), ``llama3``
  (``Llama3RotaryEmbedding``), ``yarn`` (``YaRNScalingRotaryEmbedding``; ``deepseek_yarn``,
  ``DeepseekScalingRotaryEmbedding``, for the ``vllm-deepseek`` adapter) and ``dynamic`` with a ``factor``
  (``DynamicNTKScalingRotaryEmbedding``), with the rule's parameters under HF's names, as vLLM reads a model's
  ``rope_parameters``. vLLM's ``ntk`` rule divides θ_i by s^(2/d) after scaling the base by s — not the contract's
  ``ntk`` (base·s^(d/(d−2))): not declared; nor ``longrope`` (not run);
* ``mrope`` — ``rope_parameters`` with ``mrope_section`` and ``mrope_interleaved``: ``MRotaryEmbedding`` called with
  the (3, T) positions.

``max_position`` is what the model passes: the configuration's ``max_position_embeddings`` — the trained length L of
the rule for ``dynamic``, ``yarn`` and ``llama3`` configurations, and for plain RoPE and M-RoPE the length the call
needs (max(positions) + 1). Each embedding builds its ``cos_sin_cache`` at construction (float32 angles, cast to
the model dtype) and ``forward_native`` takes its rows by position.

Positions. Up to 2^17 rows the adapter builds the table as the model does. A table longer than that (2^24
positions; YaRN's L·s rows at L = 128k) is not built: the embedding's ``_compute_cos_sin_cache`` runs with
``torch.arange(n)`` — called from that method only — giving the distinct positions of the call instead of
0 … n − 1, so the cache holds exactly the rows of those positions (each row is its position's float32 value times
``inv_freq``, ``einsum`` of one product per element, then cos and sin: bit for bit the long table's rows), and the
positions are renumbered into it. ``dynamic`` always gets the table vLLM builds (L rows, see docs/adapters.md,
"vLLM"). vLLM's own cache of embeddings (``_ROPE_DICT``) is left as it was found after each construction.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any
from unittest import mock

import torch
from vllm.model_executor.layers import rotary_embedding
from vllm.model_executor.layers.rotary_embedding import get_rope

from transformer_conformance.adapters.vllm.runtime import building

#: the longest table of angles the adapter builds whole (module docstring)
WHOLE_TABLE = 1 << 17

#: the contract's scaling rules → vLLM's ``rope_type`` (the ``vllm-deepseek`` adapter maps ``yarn`` to
#: ``deepseek_yarn``)
RULES = {"linear": "linear", "llama3": "llama3", "yarn": "yarn", "dynamic": "dynamic"}


def rope_parameters(
    d: int, rotary_dim: int, base: float, scaling: Mapping[str, Any] | None, yarn: str = "yarn"
) -> tuple[dict[str, Any], int | None, int | None]:
    """The model configuration's ``rope_parameters``, its ``max_position`` (None: the call's length) and the
    number of rows vLLM's table holds for it (None: ``max_position``)."""
    params: dict[str, Any] = {"rope_type": "default", "rope_theta": float(base)}
    if rotary_dim != d:
        factor = rotary_dim / d
        params |= {"partial_rotary_factor": factor} if int(d * factor) == rotary_dim else {"rope_dim": rotary_dim}
    if not scaling:
        return params, None, None
    kind = scaling["type"]
    if kind not in RULES:
        raise NotImplementedError(f"the adapter declares no vLLM RoPE rule for {kind!r}")
    s = float(scaling["factor"])
    params |= {"rope_type": yarn if kind == "yarn" else RULES[kind], "factor": s}
    if kind == "linear":  # the table: max_position · s rows of positions / s
        return params, None, None
    trained = int(scaling["original_max_position_embeddings"])
    params["original_max_position_embeddings"] = trained
    if kind == "llama3":
        return params | {k: float(scaling[k]) for k in ("low_freq_factor", "high_freq_factor")}, None, None
    if kind == "yarn":
        params |= {"beta_fast": scaling.get("beta_fast", 32), "beta_slow": scaling.get("beta_slow", 1)}
        return params, trained, int(trained * s)
    return params, trained, trained  # dynamic: max_position = L, the table L rows


@contextmanager
def _rows_only(wanted: torch.Tensor) -> Iterator[None]:
    """``torch.arange(n)`` called from ``_compute_cos_sin_cache`` gives ``wanted`` (float32) instead (module
    docstring); every other call is torch's."""
    arange = torch.arange

    def rows(*args: Any, **kwargs: Any) -> torch.Tensor:
        if len(args) == 1 and sys._getframe(1).f_code.co_name == "_compute_cos_sin_cache":
            return wanted.to(dtype=kwargs.get("dtype") or torch.float32)
        return arange(*args, **kwargs)

    with mock.patch.object(torch, "arange", rows):
        yield


def build(
    d: int, max_position: int, dtype: torch.dtype, params: Mapping[str, Any], neox: bool,
    wanted: torch.Tensor | None = None,
) -> Any:  # fmt: skip
    """``get_rope`` as the model calls it; with ``wanted``, a table of those positions' rows only."""
    cached = dict(rotary_embedding._ROPE_DICT)
    try:
        with building():
            if wanted is None:
                return get_rope(d, max_position=max_position, is_neox_style=neox, rope_parameters=dict(params),
                                dtype=dtype)  # fmt: skip
            with _rows_only(wanted):
                return get_rope(d, max_position=max_position, is_neox_style=neox, rope_parameters=dict(params),
                                dtype=dtype)  # fmt: skip
    finally:
        rotary_embedding._ROPE_DICT.clear()
        rotary_embedding._ROPE_DICT.update(cached)


def _tokens(x: torch.Tensor, heads_apart: bool) -> torch.Tensor:
    """x (..., T, d) as the attention layer hands q to the embedding: [T, heads · d] (Llama's ``q``), or
    [T, heads, d] (DeepSeek MLA's ``q_pe``, ``heads_apart``)."""
    d, t = x.shape[-1], x.shape[-2]
    q = x.reshape(-1, t, d).transpose(0, 1)
    return q.contiguous() if heads_apart else q.reshape(t, -1)


def _back(out: torch.Tensor, x: torch.Tensor) -> torch.Tensor:
    d, t = x.shape[-1], x.shape[-2]
    return out.reshape(t, -1, d).transpose(0, 1).reshape(x.shape)


def rotate(
    x: torch.Tensor,
    positions: torch.Tensor,
    params: Mapping[str, Any],
    max_position: int | None,
    rows: int | None,
    neox: bool,
    whole: bool = False,
    per_position: int = 1,
    heads_apart: bool = False,
) -> torch.Tensor:
    """x rotated at ``positions`` ((T,) or (3, T)) by the embedding ``params`` configure (module docstring)."""
    d = x.shape[-1]
    top = int(positions.max()) + 1 if positions.numel() else 1
    length = max_position if max_position is not None else top
    table = rows if rows is not None else length * per_position
    if whole or (top <= table <= WHOLE_TABLE):
        module, at = build(d, length, x.dtype, params, neox), positions
    else:
        distinct, at = torch.unique(positions, sorted=True, return_inverse=True)
        module = build(d, length, x.dtype, params, neox, wanted=distinct.to(torch.float32))
    q = _tokens(x, heads_apart)
    out, _ = module.forward_native(at.to(torch.int64), q, q.clone())
    return _back(out, x)


def vllm_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
    *,
    neox: bool = True,
    yarn: str = "yarn",
) -> torch.Tensor:
    """``rope`` and ``rope_scaled``: the first ``rotary_dim`` features of x (..., T, d) rotated, the rest passed."""
    d = x.shape[-1]
    rd = d if rotary_dim is None else int(rotary_dim)
    params, max_position, rows = rope_parameters(d, rd, base, scaling, yarn)
    dynamic = scaling is not None and scaling.get("type") == "dynamic"
    return rotate(x, positions, params, max_position, rows, neox, whole=dynamic, heads_apart=yarn == "deepseek_yarn")


def vllm_mrope(
    x: torch.Tensor,
    positions: torch.Tensor,
    sections: tuple[int, int, int],
    base: float = 10000.0,
    streams: str = "sections",
    *,
    neox: bool = True,
) -> torch.Tensor:
    """``mrope``: ``MRotaryEmbedding`` with ``mrope_section`` (consecutive, Qwen2-VL) or ``mrope_interleaved``
    (Qwen3-VL) at the (3, T) positions."""
    params = {
        "rope_type": "default",
        "rope_theta": float(base),
        "mrope_section": [int(n) for n in sections],
        "mrope_interleaved": streams == "interleaved",
    }
    # MRotaryEmbedding's table holds max_position · positions_factor rows (4, get_rope's default)
    return rotate(x, positions, params, None, None, neox, per_position=4)
