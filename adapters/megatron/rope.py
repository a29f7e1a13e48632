"""RoPE through Megatron-Core's rotary embeddings (``megatron.core.models.common.embeddings``), as ``GPTModel`` and
``Attention`` use them: the embedding module builds the angles ``emb`` (``[seq, 1, 1, rotary dim]``, float32) and
``apply_rotary_pos_emb`` rotates q or k, laid out ``[seq, batch, heads, head dim]`` (its unfused path: no
Transformer Engine, ``apply_rope_fusion`` False).

* ``rope`` — ``RotaryEmbedding(kv_channels=d, rotary_percent=rotary_dim/d, rotary_base=base)``;
* ``rope_scaled`` — ``linear``: ``seq_len_interpolation_factor=factor`` (positions times 1/factor); ``llama3``:
  ``RotaryEmbedding._apply_scaling`` on the module's ``inv_freq`` with the rule's factor, low and high frequency
  factors and trained length (the constructor's ``rope_scaling=True`` passes only the factor, leaving the others at
  Llama 3.1's 1, 4 and 8192: bit for bit the same call then, tests/test_adapters_megatron.py); ``yarn``:
  ``YarnRotaryEmbedding`` with ``scaling_factor``, ``original_max_position_embeddings``, ``beta_fast``, ``beta_slow``
  and its default ``mscale`` 1 and ``mscale_all_dim`` 0, the concentration factor 0.1·ln s + 1 it returns handed to
  ``apply_rotary_pos_emb(mscale=...)`` as ``Attention`` hands it;
* ``mrope`` — ``MultimodalRotaryEmbedding(kv_channels=d, rotary_percent=1)`` called with the (3, 1, T) position ids
  and ``mrope_section``: consecutive sections (Qwen2-VL).

Positions. ``GPTModel`` builds the angles of positions 0 … n − 1 (``forward(n)``: ``arange(n) + offset`` in float32)
and attention takes rows of them; the adapter does the same up to 2^16 positions. Past that it builds each distinct
position's row alone, ``forward(1, offset=p)``: arange(1) + p is p rounded to float32 once, as the whole table's row
p is (float32 ``arange`` rounds each position once), so bit for bit the same rows without a table of 2^24 rows.
"""

from __future__ import annotations

from collections.abc import Mapping
from functools import cache
from typing import Any

import torch
from megatron.core import parallel_state
from megatron.core.models.common.embeddings.rope_utils import apply_rotary_pos_emb
from megatron.core.models.common.embeddings.rotary_pos_embedding import MultimodalRotaryEmbedding, RotaryEmbedding
from megatron.core.models.common.embeddings.yarn_rotary_pos_embedding import YarnRotaryEmbedding
from megatron.core.transformer import TransformerConfig

from transformer_conformance.adapters.megatron.runtime import ensure_model_parallel, on_cpu

#: positions up to which the whole table of angles is built (``forward(max + 1)``); beyond, each row alone
WHOLE_TABLE = 1 << 16

#: Llama 3.1's band parameters: what ``RotaryEmbedding(rope_scaling=True)`` gives ``_apply_scaling``
LLAMA3_DEFAULTS = {"low_freq_factor": 1.0, "high_freq_factor": 4.0, "original_max_position_embeddings": 8192}


@cache
def rope_config(d: int, interleaved: bool) -> TransformerConfig:
    """The configuration ``apply_rotary_pos_emb`` reads: the layout, no fusion, no MLA (one head of width d)."""
    return TransformerConfig(
        num_layers=1,
        hidden_size=d,
        num_attention_heads=1,
        kv_channels=d,
        rotary_interleaved=interleaved,
        apply_rope_fusion=False,
        use_cpu_initialization=True,
    )


@cache
def rotary_module(
    d: int, rotary_dim: int, base: float, interleaved: bool, scaling: tuple[tuple[str, Any], ...]
) -> RotaryEmbedding:
    """The embedding ``GPTModel`` builds for this head width, rotary width, base and context-extension rule."""
    rule = dict(scaling)
    kind = rule.get("type")
    common: dict[str, Any] = {
        "kv_channels": d,
        "rotary_percent": rotary_dim / d,
        "rotary_interleaved": interleaved,
        "rotary_base": base,
        "use_cpu_initialization": True,
    }
    with on_cpu():
        if kind == "yarn":
            return YarnRotaryEmbedding(
                **common,
                scaling_factor=float(rule["factor"]),
                original_max_position_embeddings=int(rule["original_max_position_embeddings"]),
                beta_fast=float(rule.get("beta_fast", 32.0)),
                beta_slow=float(rule.get("beta_slow", 1.0)),
            )
        if kind == "linear":
            return RotaryEmbedding(**common, seq_len_interpolation_factor=float(rule["factor"]))
        module = RotaryEmbedding(**common)
        if kind == "llama3":
            bands = {key: rule.get(key, value) for key, value in LLAMA3_DEFAULTS.items()}
            module.inv_freq = module._apply_scaling(module.inv_freq, factor=float(rule["factor"]), **bands)
        elif kind is not None:
            raise NotImplementedError(f"Megatron-Core has no RoPE scaling rule {kind!r} (linear, llama3, yarn)")
        return module


def _emb(module: RotaryEmbedding, n: int, offset: int = 0) -> tuple[torch.Tensor, float]:
    """``module(n, offset)``: the angles of positions offset … offset + n − 1 and YaRN's concentration factor."""
    with on_cpu():
        out = module(n, offset)
    if isinstance(out, tuple):  # YarnRotaryEmbedding returns (emb, mscale)
        return out[0], float(out[1])
    return out, 1.0


def rows(module: RotaryEmbedding, positions: torch.Tensor) -> tuple[torch.Tensor, float]:
    """The angle rows of ``positions`` (T, 1, 1, rotary dim) and the concentration factor (module docstring)."""
    wanted = [int(p) for p in positions.tolist()]
    top = max(wanted, default=0) + 1
    if top <= WHOLE_TABLE:
        emb, mscale = _emb(module, top)
        return emb[positions.cpu()], mscale
    built = {p: _emb(module, 1, p) for p in dict.fromkeys(wanted)}
    mscale = next(iter(built.values()))[1]
    return torch.cat([built[p][0] for p in wanted]), mscale


def apply(x: torch.Tensor, emb: torch.Tensor, interleaved: bool, mscale: float = 1.0) -> torch.Tensor:
    """``apply_rotary_pos_emb`` on x (..., T, d) laid out as ``[T, batch·heads, 1, d]``, as attention calls it."""
    ensure_model_parallel()
    d, t = x.shape[-1], x.shape[-2]
    sbhd = x.reshape(-1, t, d).transpose(0, 1)[:, :, None, :]
    out = apply_rotary_pos_emb(
        sbhd,
        emb.to(x.device),
        config=rope_config(d, interleaved),
        mscale=mscale,
        cp_group=parallel_state.get_context_parallel_group(),
    )
    return out[:, :, 0, :].transpose(0, 1).reshape(x.shape)


def megatron_rope(
    x: torch.Tensor,
    positions: torch.Tensor,
    base: float = 10000.0,
    rotary_dim: int | None = None,
    scaling: Mapping[str, Any] | None = None,
    interleaved: bool = False,
) -> torch.Tensor:
    """x (..., T, d) rotated at ``positions`` by ``RotaryEmbedding`` (or ``YarnRotaryEmbedding``) and
    ``apply_rotary_pos_emb``: the first ``rotary_dim`` features, the rest passed through."""
    d = x.shape[-1]
    rd = d if rotary_dim is None else int(rotary_dim)
    rule = tuple(sorted((k, tuple(v) if isinstance(v, list) else v) for k, v in (scaling or {}).items()))
    module = rotary_module(d, rd, float(base), interleaved, rule)
    emb, mscale = rows(module, positions)
    return apply(x, emb, interleaved, mscale)


def megatron_mrope(
    x: torch.Tensor,
    positions: torch.Tensor,
    sections: tuple[int, int, int],
    base: float = 10000.0,
    streams: str = "sections",
    interleaved: bool = False,
) -> torch.Tensor:
    """x (..., T, d) rotated by ``MultimodalRotaryEmbedding`` at the (3, T) positions, consecutive sections."""
    if streams != "sections":
        raise NotImplementedError("Megatron-Core's MultimodalRotaryEmbedding has consecutive sections only")
    d = x.shape[-1]
    with on_cpu():
        module = MultimodalRotaryEmbedding(kv_channels=d, rotary_percent=1.0, rotary_interleaved=interleaved,
                                           rotary_base=base)  # fmt: skip
        emb = module(positions.cpu()[:, None, :], [int(n) for n in sections])
    return apply(x, emb, interleaved)
