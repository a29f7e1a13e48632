"""PyTorch as a candidate: torch.nn.functional where it has the operation, plain torch code elsewhere.

Runs on CPU, and on CUDA with ``--device cuda`` when a GPU is present. Gradients come from autograd.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from contextlib import AbstractContextManager
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from transformer_conformance.adapters.contract import AUTOCAST, AUTOCAST_DTYPES, OPS, Capability, Conventions
from transformer_conformance.adapters.torch import blocks, local_attention, mla, moe
from transformer_conformance.adapters.torch.positions import (
    attention_temperature,
    llama_param_count,
    mrope_torch,
    position_ops,
    rope_scaled_inv_freq,
)
from transformer_conformance.adapters.torch.tensors import backward_grads, input_tensors, rope_torch, to_numpy, to_torch
from transformer_conformance.adapters.versions import SUPPORTED, Supported, describe, require


def _ops(adapter: TorchAdapter) -> dict[str, Callable[..., torch.Tensor]]:
    def rms_norm(x: torch.Tensor, weight: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        return F.rms_norm(x, (x.shape[-1],), weight, eps)

    def layer_norm(x: torch.Tensor, weight: torch.Tensor, bias: torch.Tensor, eps: float | None = None) -> torch.Tensor:
        return F.layer_norm(x, (x.shape[-1],), weight, bias, 1e-5 if eps is None else eps)

    def rope(
        x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0, rotary_dim: int | None = None
    ) -> torch.Tensor:
        return rope_torch(x, positions, base, rotary_dim, adapter.conventions.rope_layout)

    def swiglu_mlp(x: torch.Tensor, w1: torch.Tensor, w3: torch.Tensor, w2: torch.Tensor) -> torch.Tensor:
        return (F.silu(x @ w1) * (x @ w3)) @ w2

    def cross_entropy(logits: torch.Tensor, targets: torch.Tensor) -> torch.Tensor:
        return F.cross_entropy(logits, targets, reduction="none")

    def z_loss(logits: torch.Tensor, alpha: float = 1e-4) -> torch.Tensor:
        # in float32, as trainers write it: z² in float16 overflows once |z| > 256 (α·z² would not)
        return (alpha * torch.logsumexp(logits.float(), dim=-1) ** 2).to(logits.dtype)

    def swiglu_product(gate: torch.Tensor, up: torch.Tensor) -> torch.Tensor:
        """The GLU element-wise product alone (benchmarked by ``native``; not a contract operation)."""
        return F.silu(gate) * up

    def rope_scaled(
        x: torch.Tensor,
        positions: torch.Tensor,
        base: float = 10000.0,
        rotary_dim: int | None = None,
        scaling: Mapping[str, Any] | None = None,
    ) -> torch.Tensor:
        rd = x.shape[-1] if rotary_dim is None else rotary_dim
        seq_len = int(positions.max()) + 1 if positions.numel() else 0
        inv_freq, factor = rope_scaled_inv_freq(rd, base, scaling, seq_len, x.device)
        return rope_torch(x, positions, base, rotary_dim, adapter.conventions.rope_layout, inv_freq, factor)

    def mrope(
        x: torch.Tensor,
        positions: torch.Tensor,
        sections: tuple[int, int, int],
        base: float = 10000.0,
        streams: str = "sections",
    ) -> torch.Tensor:
        n_t, n_h, n_w = (int(n) for n in sections)
        return mrope_torch(x, positions, base, (n_t, n_h, n_w), streams, adapter.conventions.rope_layout)

    def cross_entropy_mean(logits: torch.Tensor, targets: torch.Tensor, ignore_index: int = -100) -> torch.Tensor:
        return F.cross_entropy(logits, targets, ignore_index=ignore_index, reduction="mean")

    def softcap_z_loss(logits: torch.Tensor, alpha: float = 1e-4, cap: float = 30.0) -> torch.Tensor:
        capped = cap * torch.tanh(logits.float() / cap)
        return (alpha * torch.logsumexp(capped, dim=-1) ** 2).to(logits.dtype)

    def linear_cross_entropy(
        x: torch.Tensor,
        weight: torch.Tensor,
        bias: torch.Tensor,
        targets: torch.Tensor,
        ignore_index: int = -100,
        reduction: str = "mean",
    ) -> torch.Tensor:
        return F.cross_entropy(F.linear(x, weight, bias), targets, ignore_index=ignore_index, reduction=reduction)

    def z_loss_mean(
        logits: torch.Tensor, targets: torch.Tensor, alpha: float = 1e-4, ignore_index: int = -100
    ) -> torch.Tensor:
        valid = targets != ignore_index
        per_token = alpha * torch.logsumexp(logits.float(), dim=-1) ** 2
        return (torch.where(valid, per_token, 0.0).sum() / valid.sum()).to(logits.dtype)

    fns = (
        rms_norm,
        layer_norm,
        rope,
        swiglu_mlp,
        cross_entropy,
        z_loss,
        rope_scaled,
        mrope,
        attention_temperature,
        cross_entropy_mean,
        softcap_z_loss,
        linear_cross_entropy,
        z_loss_mean,
        swiglu_product,
    )
    table = {f.__name__: f for f in fns} | position_ops()
    table.update(blocks.ops(adapter.conventions.rope_layout, adapter.conventions.causal_alignment))
    table.update(local_attention.ops(adapter.conventions.causal_alignment, adapter.conventions.sliding_window))
    table.update(moe.ops(adapter.conventions.aux_loss_fraction))
    table.update(mla.ops(adapter.conventions.rope_layout, adapter.conventions.causal_alignment))
    return table


def llama_hidden_dim(d: int, multiple_of: int = 256, ffn_dim_multiplier: float | None = None) -> int:
    """The hidden width as LLaMA-style model code computes it: 4d, two thirds of that, rounded up."""
    hidden = int(2 * (4 * d) / 3)
    if ffn_dim_multiplier is not None:
        hidden = int(ffn_dim_multiplier * hidden)
    return multiple_of * ((hidden + multiple_of - 1) // multiple_of)


def with_autocast(caps: Mapping[str, Capability]) -> dict[str, Capability]:
    """``caps`` with the autocast mode declared for the operations it is defined for (``AUTOCAST``), in each
    low-precision dtype the operation declares: torch.autocast runs on CPU and CUDA in bfloat16 and float16
    (measured on torch 2.13 CPU: matmul lowered to either, the norms and elementwise ops left alone)."""
    return {
        op: dataclasses.replace(c, autocast=frozenset(AUTOCAST_DTYPES) & c.dtypes) if op in AUTOCAST else c
        for op, c in caps.items()
    }


class TorchAdapter:
    """The built-in ``torch`` adapter."""

    name = "torch"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported: tuple[Supported, ...] = SUPPORTED["torch"]

    def __init__(
        self,
        device: str = "cpu",
        rope_layout: str = "half",
        causal_alignment: str = "bottom_right",
        sliding_window: str = "inclusive",
    ) -> None:
        require(self.name, self.supported)
        if device.startswith("cuda") and not torch.cuda.is_available():
            raise RuntimeError("device 'cuda' requested but torch.cuda.is_available() is False")
        self.device = device
        self.conventions = Conventions(
            rope_layout=rope_layout,  # type: ignore[arg-type]
            rope_angle_dtype="float32",
            compute_dtype="float32",
            norm_rounding="single",
            # x @ w1, silu, the product and @ w2 each round to the input dtype; so do log_softmax's
            # intermediates and saved output, and logsumexp's.
            # The CPU layer_norm backward kernel rounds an intermediate and the weight and bias gradients'
            # partial sums to bfloat16/float16 (measured: ∂L/∂β of three rows off by one ulp).
            # The same for F.linear's logits ahead of F.cross_entropy (linear_cross_entropy). The z-losses
            # compute in float32 and round once.
            unfused=frozenset(
                {
                    "swiglu_mlp",
                    "cross_entropy",
                    "cross_entropy_mean",
                    "layer_norm.vjp",
                    "linear_cross_entropy",
                }
            ),
            # The embedding backward (learned positions) adds a repeated position's gradient rows in the
            # input dtype, one after another (measured: five bfloat16 rows sum to 0.203125, not 0.2046).
            low_precision_sums=frozenset({"layer_norm.vjp", "learned_positions.vjp"}),
            # F.rms_norm(eps=None) uses float32's machine epsilon for every input dtype here (its opmath
            # type), not the input dtype's: measured on torch 2.13 CPU, and held to by the suite.
            eps_defaults={"rms_norm": float(torch.finfo(torch.float32).eps), "layer_norm": 1e-5},
            # bottom-right through an explicit mask; "top_left" uses SDPA's is_causal=True as it is
            causal_alignment=causal_alignment,  # type: ignore[arg-type]
            # the window's mask as HF transformers builds it: p − j < W, the query's own token counted
            sliding_window=sliding_window,  # type: ignore[arg-type]
        )
        self.capabilities = with_autocast({op: Capability() for op in OPS})
        self.impl = _ops(self)

    def autocast(self, dtype: str) -> AbstractContextManager[Any]:
        """The mixed-precision context of a model trained in ``dtype``: ``torch.autocast`` on this device."""
        return torch.autocast(device_type=torch.device(self.device).type, dtype=getattr(torch, dtype))

    def environment(self) -> dict[str, str]:
        env = {"torch": torch.__version__, "numpy": np.__version__, "device": self.device}
        env["supports"] = describe(self.supported)
        if self.device.startswith("cuda"):
            env["gpu"] = torch.cuda.get_device_name(self.device)
        return env

    def _tensors(self, op: str, inputs: Mapping[str, np.ndarray], grad: bool) -> dict[str, torch.Tensor]:
        return input_tensors(op, inputs, self.device, grad)

    def _call(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], grad: bool
    ) -> tuple[torch.Tensor, dict[str, torch.Tensor]]:
        tensors = self._tensors(op, inputs, grad)
        out = self.impl[op](**tensors, **params)
        return out, tensors

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "swiglu_hidden_dim":
            return np.asarray(llama_hidden_dim(**params))
        if op == "param_count":
            return np.asarray(llama_param_count(**params))
        if op == "ffn_hidden_dim":
            return np.asarray(blocks.ffn_hidden_dim(**params))
        with torch.no_grad():
            out, _ = self._call(op, inputs, params, grad=False)
        return to_numpy(out)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        out, tensors = self._call(op, inputs, params, grad=True)
        return backward_grads(op, inputs, out, tensors, cotangent, self.device)

    def native(
        self,
        op: str,
        inputs: Mapping[str, np.ndarray],
        params: Mapping[str, Any],
        grad: bool = False,
        cotangent: np.ndarray | None = None,
    ) -> Callable[[], Any]:
        """Optional benchmark hook (docs/adapter-contract.md): a closure that runs ``op`` on tensors made
        once, here, from ``inputs`` — and with ``grad`` its backward too, for the ``cotangent`` given (a fixed
        random one if none is), returning the gradients of the floating inputs. Raises KeyError for an
        operation it lacks."""
        fn = self.impl[op]
        tensors = {k: to_torch(v, self.device) for k, v in inputs.items()}
        if not grad:

            def run_forward() -> torch.Tensor:
                with torch.no_grad():
                    return fn(**tensors, **params)

            return run_forward
        leaves = [t.requires_grad_(True) for t in tensors.values() if t.is_floating_point()]
        out = fn(**tensors, **params).detach()  # (also compiles the graph timed below)
        g = torch.randn_like(out) if cotangent is None else to_torch(cotangent, self.device).to(out.dtype)
        del out

        def run_forward_backward() -> tuple[torch.Tensor, ...]:
            return torch.autograd.grad(fn(**tensors, **params), leaves, g)

        return run_forward_backward
