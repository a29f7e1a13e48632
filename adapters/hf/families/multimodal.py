"""HF transformers' vision-language text models: multimodal RoPE as their language models run it.

* ``hf-qwen2-vl`` — ``Qwen2VLRotaryEmbedding`` on the (3, B, T) position ids (temporal, height, width), whose
  ``mrope_section`` splits the frequencies into consecutive sections (``streams="sections"``), and the modeling
  file's ``apply_rotary_pos_emb`` (halves; cos and sin rounded to x's dtype, the rotation in x's dtype: unfused).
  In transformers 5.0 the rotary embedding returns each stream's cos and sin, and the attention merges the sections
  in ``apply_multimodal_rotary_pos_emb(q, k, cos, sin, mrope_section)``: the adapter calls what the release's
  ``Qwen2VLAttention`` calls, chosen by the shape of the cos and sin the rotary embedding returns.
* ``hf-qwen3-vl`` — ``Qwen3VLTextRotaryEmbedding``, whose frequencies interleave the three streams
  (``streams="interleaved"``: t, h, w, t, h, w, …), and Qwen3-VL's ``apply_rotary_pos_emb``.

Each configuration holds the suite's base as ``rope_theta`` and its sections as ``mrope_section``; no weights are
downloaded. Supported: transformers 5.x, measured on 5.0.0 and 5.25.0 with torch 2.13, CPU.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn
from transformers.models.qwen2_vl import modeling_qwen2_vl as qwen2_vl
from transformers.models.qwen2_vl.configuration_qwen2_vl import Qwen2VLTextConfig
from transformers.models.qwen3_vl import modeling_qwen3_vl as qwen3_vl
from transformers.models.qwen3_vl.configuration_qwen3_vl import Qwen3VLTextConfig

from transformer_conformance.adapters.contract import Capability, Conventions
from transformer_conformance.adapters.hf.adapter import _HFAdapter
from transformer_conformance.adapters.versions import SUPPORTED, require


class _MRopeAdapter(_HFAdapter):
    """An adapter whose ``mrope`` is one VL family's text rotary embedding and ``apply_rotary_pos_emb``."""

    config: type
    rotary: type[nn.Module]
    streams: str

    def __init__(self, device: str = "cpu") -> None:
        self.supported = SUPPORTED[self.name]
        require(self.name, self.supported)
        super().__init__(device)
        self.conventions = Conventions(rope_layout="half", unfused=frozenset({"mrope"}))
        self.capabilities = {"mrope": Capability(values={"streams": frozenset({self.streams})})}

    def mrope(
        self,
        x: torch.Tensor,
        positions: torch.Tensor,
        sections: tuple[int, int, int],
        base: float = 10000.0,
        streams: str = "sections",
    ) -> torch.Tensor:
        if streams != self.streams:
            raise NotImplementedError(f"{self.name}'s rotary embedding has {self.streams} streams, not {streams}")
        t, d = x.shape[-2:]
        config = self.config(
            hidden_size=d,
            num_attention_heads=1,
            num_key_value_heads=1,
            head_dim=d,
            rope_parameters={"rope_type": "default", "rope_theta": float(base), "mrope_section": list(sections)},
        )
        module = self.rotary(config).to(x.device)
        q = x.reshape(1, -1, t, d)  # (batch, heads, T, d)
        cos, sin = module(q, positions[:, None, :])  # position ids (3, batch, T)
        out = self.rotate(q, cos, sin, sections)
        return out.reshape(x.shape)

    def rotate(self, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sections: tuple[int, int, int]) -> Any:
        """q rotated by the rotary embedding's cos and sin, as the family's attention rotates its queries."""
        raise NotImplementedError

    def _impl(self, op: str) -> Any:
        return {"mrope": self.mrope}[op]


class HFQwen2VLAdapter(_MRopeAdapter):
    """``hf-qwen2-vl``: Qwen2-VL's M-RoPE, consecutive sections."""

    name = "hf-qwen2-vl"
    config = Qwen2VLTextConfig
    rotary = qwen2_vl.Qwen2VLRotaryEmbedding
    streams = "sections"

    def rotate(self, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sections: tuple[int, int, int]) -> Any:
        if cos.dim() == 3:  # the sections already merged by the rotary embedding (later 5.x)
            out, _ = qwen2_vl.apply_rotary_pos_emb(q, q, cos, sin)
            return out
        # each stream's cos and sin (3, B, T, D), as 5.0's rotary embedding returns them: its attention merges the
        # sections; any other layout, or a release with neither, is refused, not run
        merge = getattr(qwen2_vl, "apply_multimodal_rotary_pos_emb", None)
        if cos.dim() != 4 or cos.shape[0] != 3:
            raise NotImplementedError(f"{self.name}: cos of shape {tuple(cos.shape)}, neither merged nor per stream")
        if merge is None:
            raise NotImplementedError(f"{self.name}: per-stream cos and sin, and no apply_multimodal_rotary_pos_emb")
        out, _ = merge(q, q, cos, sin, list(sections))
        return out


class HFQwen3VLAdapter(_MRopeAdapter):
    """``hf-qwen3-vl``: Qwen3-VL's M-RoPE, interleaved streams."""

    name = "hf-qwen3-vl"
    config = Qwen3VLTextConfig
    rotary = qwen3_vl.Qwen3VLTextRotaryEmbedding
    streams = "interleaved"

    def rotate(self, q: torch.Tensor, cos: torch.Tensor, sin: torch.Tensor, sections: tuple[int, int, int]) -> Any:
        out, _ = qwen3_vl.apply_rotary_pos_emb(q, q, cos, sin)
        return out
