"""Adapters: candidate implementations exposed through one contract (docs/adapter-contract.md)."""

from transformer_conformance.adapters.contract import (
    AUTOCAST,
    AUTOCAST_DTYPES,
    CHOICES,
    OPS,
    Adapter,
    Capability,
    ContractError,
    Conventions,
    OpSpec,
    capabilities,
    validate,
)
from transformer_conformance.adapters.registry import BUILTIN, DEFAULT, AdapterLoadError, load_adapter

__all__ = [
    "AUTOCAST",
    "AUTOCAST_DTYPES",
    "BUILTIN",
    "CHOICES",
    "DEFAULT",
    "OPS",
    "Adapter",
    "AdapterLoadError",
    "Capability",
    "ContractError",
    "Conventions",
    "OpSpec",
    "capabilities",
    "load_adapter",
    "validate",
]
