"""How a check declares what it is and what it needs of a candidate: the ``conformance`` marker, and the
values of an operation's named choices a check draws for an adapter."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import pytest

from transformer_conformance.adapters.contract import CHOICES, Adapter

#: The prefix of the skip message of a check the candidate does not declare (reported *unsupported*).
UNSUPPORTED = "unsupported: "

#: Every behaviour a check may name (``--behaviour`` accepts these; the report groups checks by them).
BEHAVIOURS = (
    "accounting",
    "alibi",
    "attention",
    "attention_sinks",
    "attention_temperature",
    "blocks",
    "chunked_attention",
    "cross_entropy",
    "cross_entropy_mean",
    "integrity",
    "layer_norm",
    "learned",
    "linear_cross_entropy",
    "mla",
    "mlp",
    "moe_aux_loss",
    "moe_routing",
    "moe_z_loss",
    "mrope",
    "rms_norm",
    "rope",
    "rope_scaling",
    "sinusoidal",
    "sliding_window",
    "softcap_z_loss",
    "swiglu",
    "z_loss",
    "z_loss_mean",
)


def check(
    id: str,
    behaviour: str,
    prop: str,
    cites: str,
    op: str | None = None,
    grad: bool = False,
    choices: Mapping[str, tuple[str, ...]] | None = None,
    autocast: bool = True,
) -> Any:
    """Mark a test as a conformance check. ``op``: the contract operation it needs from the adapter
    (``grad``: and its VJP); the check is *unsupported* for an adapter that does not declare them.
    ``choices``: the values of ``op``'s named choices (``adapters.CHOICES``) the check draws; it draws only
    those the adapter declares (:func:`declared`), the report names the others, and with none declared the
    check is unsupported. ``autocast=False``: the check has no column in the autocast modes (the size regimes:
    autocast casts per operation, whatever the size — its modes' own cases reach those casts, the regimes reach
    the kernels' size dispatch in each dtype)."""
    if behaviour not in BEHAVIOURS:
        raise ValueError(f"check {id!r}: unknown behaviour {behaviour!r}; add it to BEHAVIOURS")
    return pytest.mark.conformance(
        id=id,
        behaviour=behaviour,
        prop=prop,
        cites=cites,
        op=op,
        grad=grad,
        choices=dict(choices or {}),
        autocast=autocast,
        regime=is_regime(id),
    )


def is_regime(check_id: str) -> bool:
    """Whether a check is a size regime's (its id ends in ``/regime-forward`` or ``/regime-gradient``)."""
    return check_id.rsplit("/", 1)[-1] in ("regime-forward", "regime-gradient")


def declared(adapter: Adapter, op: str, key: str, values: tuple[str, ...] | None = None) -> tuple[str, ...]:
    """The values of ``op``'s choice ``key`` a check draws for ``adapter``: those of ``values`` (default:
    every value the contract defines) its capability declares, in their order."""
    values = CHOICES[op][key] if values is None else values
    cap = adapter.capabilities.get(op)
    return values if cap is None else cap.declared(key, values)
