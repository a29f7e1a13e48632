"""The NumPy float64 oracle: each transformer building block as the seed documents state it.

Every forward function here is a few plain NumPy lines in float64, next to its hand-derived
vector-Jacobian product (``*_vjp``). No deep-learning framework is imported in this package.
Citations name the seed documents by short id (see ``docs/seeds.md``):

* ``seed-000`` — "Positions, normalization and the residual stream"
* ``seed-002`` — "Chapter 3 Transformer Architecture Interview Essentials"
* ``seed-004`` — the article on positional encoding and the residual stream
"""

from transformer_conformance.reference import accounting, positions, rope_scaling
from transformer_conformance.reference.losses import (
    cross_entropy,
    cross_entropy_vjp,
    logsumexp,
    softmax,
    z_loss,
    z_loss_vjp,
)
from transformer_conformance.reference.norms import layer_norm, layer_norm_vjp, rms_norm, rms_norm_vjp
from transformer_conformance.reference.rope import rope, rope_angles, rope_inv_freq, rope_pair_indices, rope_vjp
from transformer_conformance.reference.swiglu import (
    mlp_param_count,
    silu,
    swiglu_hidden_dim,
    swiglu_mlp,
    swiglu_mlp_vjp,
)

#: The seed documents the checks cite, by id (docs/seeds.md): the report names them for its readers.
SEEDS = {
    "seed-000": "“Positions, normalization and the residual stream”",
    "seed-002": "“Chapter 3 Transformer Architecture Interview Essentials”",
    "seed-004": "an article on positional encoding and the residual stream",
}

__all__ = [
    "SEEDS",
    "accounting",
    "cross_entropy",
    "cross_entropy_vjp",
    "layer_norm",
    "layer_norm_vjp",
    "logsumexp",
    "mlp_param_count",
    "positions",
    "rms_norm",
    "rms_norm_vjp",
    "rope",
    "rope_angles",
    "rope_inv_freq",
    "rope_pair_indices",
    "rope_scaling",
    "rope_vjp",
    "silu",
    "softmax",
    "swiglu_hidden_dim",
    "swiglu_mlp",
    "swiglu_mlp_vjp",
    "z_loss",
    "z_loss_vjp",
]
