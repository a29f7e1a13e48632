"""Parameter and weight-memory accounting of a LLaMA-style decoder from its configuration.

seed-002 §3.1.1 "A Worked Example": attention 4·d² per layer (W_Q, W_K, W_V, W_O, no biases), SwiGLU MLP
3·d·d_ff, the embedding table V·d; "6.7B × 2 bytes = 13.4 GB" of bf16 weights. Grouped-query attention
shrinks W_K and W_V to d × (n_kv·d_h); RMSNorm adds one weight vector of d per norm (two per layer and a
final one); an untied LM head adds another V·d.
"""

from __future__ import annotations

from dataclasses import dataclass

BYTES_PER_PARAM = {"float64": 8, "float32": 4, "bfloat16": 2, "float16": 2, "float8": 1, "int8": 1}


@dataclass(frozen=True)
class ModelConfig:
    vocab: int
    hidden: int  # d
    intermediate: int  # d_ff
    layers: int
    heads: int
    kv_heads: int | None = None  # None: as many as query heads (multi-head attention)
    tied: bool = False  # LM head shares the embedding table
    head_dim: int | None = None  # None: hidden // heads

    @property
    def d_head(self) -> int:
        return self.head_dim if self.head_dim is not None else self.hidden // self.heads

    @property
    def n_kv(self) -> int:
        return self.heads if self.kv_heads is None else self.kv_heads


LLAMA2_7B = ModelConfig(vocab=32000, hidden=4096, intermediate=11008, layers=32, heads=32)
LLAMA2_70B_SHAPE = ModelConfig(vocab=32000, hidden=8192, intermediate=28672, layers=80, heads=64, kv_heads=8)


def attention_params(c: ModelConfig) -> int:
    """W_Q (d × H·d_h), W_K and W_V (d × n_kv·d_h each), W_O (H·d_h × d); 4·d² without GQA."""
    q = c.hidden * c.heads * c.d_head
    kv = 2 * c.hidden * c.n_kv * c.d_head
    return q + kv + c.heads * c.d_head * c.hidden


def mlp_params(c: ModelConfig) -> int:
    """W₁, W₃ (d × d_ff) and W₂ (d_ff × d): 3·d·d_ff."""
    return 3 * c.hidden * c.intermediate


def layer_params(c: ModelConfig) -> int:
    """One block: attention, MLP and its two RMSNorm weights."""
    return attention_params(c) + mlp_params(c) + 2 * c.hidden


def param_breakdown(c: ModelConfig) -> dict[str, int]:
    """Parameters by part; ``total`` is their sum."""
    parts = {
        "embedding": c.vocab * c.hidden,
        "attention": c.layers * attention_params(c),
        "mlp": c.layers * mlp_params(c),
        "norms": (2 * c.layers + 1) * c.hidden,
        "lm_head": 0 if c.tied else c.vocab * c.hidden,
    }
    parts["total"] = sum(parts.values())
    return parts


def param_count(c: ModelConfig) -> int:
    return param_breakdown(c)["total"]


def weight_bytes(n_params: int, dtype: str) -> int:
    """Memory of the weights alone: parameters × bytes per parameter (seed-002: 6.7B × 2 bytes = 13.4 GB)."""
    return n_params * BYTES_PER_PARAM[dtype]
