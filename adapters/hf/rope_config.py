"""How a model configuration asks HF transformers for a RoPE scaling rule, on each supported major.

seed-000 §Extending context with RoPE (the rules); the configuration keys are HF's (``modeling_rope_utils``).

* transformers 5.x: ``rope_parameters={"rope_type": ..., "rope_theta": base, <the rule's parameters>}``;
* transformers 4.x (4.45 and later): ``rope_theta=base`` and ``rope_scaling={"rope_type": ..., <parameters>}``.
  A 4.x configuration given ``rope_parameters`` keeps it as an unknown attribute and its rotary embedding is
  plain RoPE; so the form is chosen by what the configuration class accepts, never assumed. Two trained
  lengths are read elsewhere on 4.x: LongRoPE's from the configuration's own ``original_max_position_embeddings``
  (Phi-3's field), and YaRN's, on releases whose YaRN does not know ``original_max_position_embeddings``
  (4.46 computes its correction range from ``max_position_embeddings``), from ``max_position_embeddings``.
  4.x's LongRoPE also takes its factor as ``max_position_embeddings / original_max_position_embeddings``, so the
  extended length is set to exactly original·factor there.

LongRoPE switches from its short to its long factors per call (by the call's length): transformers applies that
switch in a model's rotary embedding from 4.48 on (``modeling_rope_utils.dynamic_rope_update``); before, a
Llama rotary embedding picks the long factors once, from the configuration, for every call (measured on 4.46:
rope_scaled fails by 10⁷ ulps of float32 within the trained length). There LongRoPE cannot be set, and is not
declared (:func:`settable`).

Whatever a release does not read is refused, not dropped: its configuration reports a parameter it does not
recognise ("Unrecognized keys ...", a warning) and its rotary embedding may report another ``rope_type`` than
the one asked for; either raises :class:`~transformer_conformance.adapters.versions.UnsupportedVersion` with one
line, so a run never checks a rule other than the one its report names.
"""

from __future__ import annotations

import inspect
import logging
from collections.abc import Iterator, Mapping
from contextlib import contextmanager
from typing import Any

import transformers
import transformers.modeling_rope_utils

from transformer_conformance.adapters.versions import UnsupportedVersion

#: (rope_type, parameter) pairs a release was seen not to read: its warning is logged once per message on some
#: releases, so a later configuration with the same parameter is refused from this record
_UNREAD: set[tuple[str, str]] = set()


def settable(kind: str) -> bool:
    """Whether this release's rotary embedding can apply ``kind`` as the contract defines it (module docstring)."""
    if kind == "longrope":
        return hasattr(transformers.modeling_rope_utils, "dynamic_rope_update")
    return True


def uses_rope_parameters(config_cls: type) -> bool:
    """Whether the configuration class takes ``rope_parameters`` (5.x) rather than ``rope_scaling`` (4.x)."""
    return "rope_parameters" in inspect.signature(config_cls).parameters


class _Unrecognised(logging.Handler):
    """Collects the configuration's "Unrecognized keys in `rope_…` for 'rope_type'=…: {…}" warnings."""

    def __init__(self) -> None:
        super().__init__(logging.WARNING)
        self.messages: list[str] = []

    def emit(self, record: logging.LogRecord) -> None:
        message = record.getMessage()
        if message.startswith("Unrecognized keys"):
            self.messages.append(message)


@contextmanager
def _unrecognised() -> Iterator[_Unrecognised]:
    logger = logging.getLogger("transformers")
    handler, level = _Unrecognised(), logger.level
    logger.addHandler(handler)
    if logger.getEffectiveLevel() > logging.WARNING:
        logger.setLevel(logging.WARNING)
    try:
        yield handler
    finally:
        logger.removeHandler(handler)
        logger.setLevel(level)


def _unread(messages: list[str], kind: str, keys: Mapping[str, Any]) -> set[str]:
    found = {k for k in keys if any(repr(k) in m for m in messages)}
    _UNREAD.update((kind, k) for k in found)
    return found | {k for k in keys if (kind, k) in _UNREAD}


def _refuse(kind: str, what: str) -> UnsupportedVersion:
    return UnsupportedVersion(
        f"transformers {transformers.__version__} cannot set {kind} RoPE scaling as asked: {what}"
    )


def rotary_config(config_cls: type, kind: str, rotary_dim: int, base: float, rule: Mapping[str, Any]) -> Any:
    """A configuration of ``config_cls`` (``LlamaConfig``) whose rotary embedding of a ``rotary_dim`` head applies
    ``kind`` (HF's ``rope_type``; "default": none) with the contract's parameters ``rule`` (its scaling dict
    without ``type``), as a model that extends its context configures it."""
    if not settable(kind):
        raise _refuse(kind, "its rotary embeddings choose LongRoPE's factors once, not per call")
    params = dict(rule)
    original = int(params.get("original_max_position_embeddings", 2048))
    if kind == "dynamic":
        # HF's dynamic NTK reads the trained length from max_position_embeddings, not from its parameters
        params.pop("original_max_position_embeddings", None)
        longest = original
    else:
        # what a configuration that extends its context says: the extended length
        longest = int(original * params.get("factor", 1.0)) + 1
    common: dict[str, Any] = {"hidden_size": rotary_dim, "num_attention_heads": 1, "head_dim": rotary_dim}
    if uses_rope_parameters(config_cls):
        with _unrecognised() as seen:
            config = config_cls(
                **common,
                max_position_embeddings=longest,
                rope_parameters={"rope_type": kind, "rope_theta": base, **params},
            )
    else:
        if kind == "longrope":  # 4.x's LongRoPE reads the trained length from the configuration itself
            common["original_max_position_embeddings"] = original
            # and its factor as max_position_embeddings / original_max_position_embeddings, not from rope_scaling
            # (4.57.6: the extended length one more than original·factor gave sqrt(1 + ln(33/16) / ln 16))
            extended = original * float(params.get("factor", 1.0))
            if extended != int(extended):
                raise _refuse(kind, f"its factor is max_position_embeddings / {original}, and {extended} is no length")
            longest = int(extended)
        with _unrecognised() as seen:
            config = config_cls(
                **common,
                max_position_embeddings=longest,
                rope_theta=base,
                rope_scaling={"rope_type": kind, **params} if kind != "default" else None,
            )
        if kind == "yarn" and _unread(seen.messages, kind, params) == {"original_max_position_embeddings"}:
            # this release's YaRN takes the trained length from max_position_embeddings
            params.pop("original_max_position_embeddings")
            with _unrecognised() as seen:
                config = config_cls(
                    **common,
                    max_position_embeddings=original,
                    rope_theta=base,
                    rope_scaling={"rope_type": kind, **params},
                )
    unread = _unread(seen.messages, kind, params)
    if unread:
        raise _refuse(kind, f"it does not read {', '.join(sorted(unread))}")
    return config


def check_rotary(module: Any, kind: str) -> Any:
    """The rotary embedding module, refused when it does not apply the ``rope_type`` asked for."""
    built = getattr(module, "rope_type", None)
    if built != kind:
        raise _refuse(kind, f"its rotary embedding applies {built!r}")
    return module
