"""Adapters: candidate implementations exposed through one contract (docs/adapter-contract.md)."""

from transformer_conformance.adapters.contract import (
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
