"""Correct candidates that declare the top-left causal alignment (PyTorch's and JAX's ``is_causal``)."""

from __future__ import annotations

from transformer_conformance.adapters.numpy.adapter import NumpyAdapter
from transformer_conformance.adapters.torch.adapter import TorchAdapter


def torch_top_left(device: str = "cpu") -> TorchAdapter:
    """The torch adapter on F.scaled_dot_product_attention(is_causal=True), declared as top-left."""
    adapter = TorchAdapter(device, causal_alignment="top_left")
    adapter.name = "torch-top-left"
    return adapter


def numpy_top_left() -> NumpyAdapter:
    adapter = NumpyAdapter(causal_alignment="top_left")
    adapter.name = "numpy-top-left"
    return adapter
