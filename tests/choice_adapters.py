"""Adapters that implement only part of an operation's named choices (adapters.CHOICES): the torch
adapter's ``rope_scaled``, ``glu_mlp`` and ``attention`` in float32, raising for the NTK rule, for GeGLU in its
erf form and for soft-capped attention (as a kernel without a cap).
``NarrowDeclared`` declares exactly what it implements; ``NarrowUndeclared`` declares every value."""

from __future__ import annotations

from typing import Any

from transformer_conformance.adapters.contract import CHOICES, Capability
from transformer_conformance.adapters.torch.adapter import TorchAdapter

F32 = frozenset({"float32"})
MISSING = {
    "rope_scaled": ("scaling.type", "ntk"),
    "glu_mlp": ("activation", "gelu_erf"),
    "attention": ("softcap", "tanh"),
}


def _chosen(key: str, params: dict[str, Any]) -> str | None:
    if key == "activation":
        return params.get("activation")
    if key == "softcap":
        return "none" if params.get("softcap") is None else "tanh"
    return (params.get("scaling") or {}).get("type")


class NarrowUndeclared(TorchAdapter):
    name = "narrow-undeclared"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.capabilities = {op: Capability(dtypes=F32) for op in MISSING}
        for op in MISSING:
            self.impl[op] = self._refusing(op, self.impl[op])

    @staticmethod
    def _refusing(op: str, inner: Any) -> Any:
        key, value = MISSING[op]

        def call(*args: Any, **params: Any) -> Any:
            if _chosen(key, params) == value:
                raise NotImplementedError(f"{op} has no {key} {value}")
            return inner(*args, **params)

        return call


class NarrowDeclared(NarrowUndeclared):
    name = "narrow-declared"

    def __init__(self, device: str = "cpu") -> None:
        super().__init__(device)
        self.capabilities = {
            op: Capability(dtypes=F32, values={key: frozenset(CHOICES[op][key]) - {value}})
            for op, (key, value) in MISSING.items()
        }
