"""MLX as a candidate: ``mlx.core.fast`` kernels and ``mlx.nn`` on MLX's CPU backend (``mlx[cpu]`` on Linux).

What each contract operation calls (adapters/mlx/ops.py):

* ``rms_norm``, ``layer_norm`` — ``mx.fast.rms_norm``, ``mx.fast.layer_norm`` (ε None: 1e-5, the default of
  ``mlx.nn.RMSNorm`` and ``mlx.nn.LayerNorm``);
* ``rope`` — ``mx.fast.rope`` with ``traditional`` set from the declared layout (True: the pairs (2i, 2i+1);
  False: the pairs (i, i + d/2), mlx-lm's LLaMA), ``base``, ``dims`` the rotated width, and each position given
  as the ``offset`` of a one-token sequence (the kernel's vector of per-sequence offsets), so any positions;
* ``rope_scaled`` — the same kernel; of the context-extension rules only ``linear`` (its ``scale``, 1/factor,
  multiplies the positions) is one MLX's kernel expresses, and only it is declared;
* ``attention`` — ``mx.fast.scaled_dot_product_attention``: grouped KV heads natively, ``mask="causal"``
  (lower-right, i.e. bottom-right, aligned), ``scale``. The kernel has no soft-capping: a soft-capped call is
  computed as mlx-lm's Gemma 2 writes it, with ``mx`` operations in the input dtype (as the kernel's own CPU
  path computes);
* ``sliding_window_attention`` — the same kernel with a boolean mask from mlx-lm's own
  ``create_causal_mask(N=L_q, offset=L_k − L_q, window_size=W)`` (what its KV caches hand the kernel for a
  windowed layer; ``mlx_lm/models/base.py``, loaded on its own, see ``ops.mlx_lm_base``): p − j < W, the
  query's own token among the W (``sliding_window="inclusive"``, read off the mask when the adapter is built);
  softcap ``none`` only (the kernel has no cap);
* ``sink_attention`` — the same kernel's ``sinks`` (one logit per query head, in the input dtype), as mlx-lm's
  gpt-oss calls it, with ``mask="causal"``, the window mask or none; declared only where the installed MLX's
  kernel takes ``sinks``. Its CPU path is the composed fallback (the sink column concatenated to the scores,
  the softmax, the column sliced off), so ``mx.vjp`` differentiates it with respect to the sinks too (the
  GPU backends' fused VJP refuses that);
* ``mlp``, ``glu_mlp``, ``swiglu_mlp`` — the matrix products and ``nn.relu``, ``nn.gelu``,
  ``nn.gelu_approx``, ``nn.gelu_fast_approx`` (x·σ(1.702x)), ``nn.relu2``, ``nn.silu``;
* ``cross_entropy`` — ``nn.losses.cross_entropy(reduction="none")``; ``cross_entropy_mean`` — that loss
  masked to the non-ignored tokens, summed and divided by their count (mlx-lm's training loss);
* ``z_loss``, ``softcap_z_loss`` — ``mx.logsumexp`` in float32 squared times α (on c·tanh(l/c), formed in the
  input dtype).

Every gradient is ``mx.vjp`` of the same function. The adapter refuses any MLX (and mlx-lm) outside the series
its conventions were measured on (``SUPPORTED``; adapters/versions.py).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from typing import Any

import ml_dtypes
import mlx.core as mx
import numpy as np

from transformer_conformance.adapters.contract import OPS, Capability, Conventions
from transformer_conformance.adapters.mlx import ops
from transformer_conformance.adapters.versions import MLX_LM, describe, installed, require
from transformer_conformance.adapters.versions import SUPPORTED as SUPPORTED_RELEASES

#: MLX versions this adapter is measured on: [low, high) as (major, minor)
SUPPORTED = ((0, 32), (0, 33))

ALL = frozenset({"float32", "bfloat16", "float16"})
F32_BF16 = frozenset({"float32", "bfloat16"})
F32 = frozenset({"float32"})


def check_version(version: str = mx.__version__) -> None:
    """Refuse, with one line, an MLX outside the versions the adapter's declarations were measured on."""
    (lo, hi), parts = SUPPORTED, version.split("+")[0].split(".")
    try:
        have = (int(parts[0]), int(parts[1]))
    except (IndexError, ValueError):
        have = (-1, -1)
    if not lo <= have < hi:
        raise RuntimeError(
            f"the mlx adapter supports mlx {lo[0]}.{lo[1]}.x (its conventions are measured there), not {version}"
        )


def to_mx(a: np.ndarray) -> mx.array:
    """A NumPy array as an MLX array of the same dtype (bfloat16 through ml_dtypes' buffer; int64 kept)."""
    return mx.array(np.array(a, copy=True, order="C"))  # a 0-d array stays 0-d


def to_numpy(a: mx.array, dtype: np.dtype[Any]) -> np.ndarray:
    """An MLX array back in NumPy, in ``dtype``; bfloat16 (no buffer format) widened to float32 first, exactly."""
    if a.dtype == mx.bfloat16:
        return np.array(a.astype(mx.float32)).astype(ml_dtypes.bfloat16)
    return np.array(a).astype(dtype, copy=False)


class MlxAdapter:
    """The built-in ``mlx`` adapter (MLX's CPU backend)."""

    name = "mlx"

    def __init__(self, device: str = "cpu", rope_layout: str = "half") -> None:
        check_version()
        require(self.name, (MLX_LM,))  # the window masks are mlx-lm's
        if device != "cpu":
            raise RuntimeError(f"the mlx adapter runs on MLX's CPU backend only, not {device!r}")
        mx.set_default_device(mx.cpu)
        # what the kernel is called with (the declaration below says the same; a test changes only that)
        self.traditional = rope_layout == "interleaved"
        self.conventions = Conventions(
            rope_layout=rope_layout,  # type: ignore[arg-type]
            rope_angle_dtype="float32",
            compute_dtype="float32",
            # the CPU runs mx.fast's composed fallbacks (mlx/fast.cpp): the norms normalise in float32, cast
            # to the input dtype, then multiply by the weight and add the bias in it, each a rounding
            norm_rounding="before_weight",
            # RoPE casts cos and sin to x's dtype and rotates in it; attention scales q, forms the scores and
            # the softmax's output in the input dtype (the softmax itself in float32); the norms' backwards
            # run in the input dtype; the MLPs, losses and soft-capped z-loss are chains of mx operations, each
            # rounding to the input dtype (the z-loss itself computes in float32 and rounds once)
            unfused=frozenset(
                {
                    "rope",
                    "rope_scaled",
                    "attention",
                    "sliding_window_attention",
                    "sink_attention",
                    "rms_norm.vjp",
                    "layer_norm",
                    "swiglu_mlp",
                    "mlp",
                    "glu_mlp",
                    "cross_entropy",
                    "cross_entropy_mean",
                    "softcap_z_loss",
                }
            ),
            eps_defaults={"rms_norm": ops.EPS_DEFAULT, "layer_norm": ops.EPS_DEFAULT},
            causal_alignment="bottom_right",
            # mlx-lm's create_causal_mask keeps p − j < W (the query's own token among the W): measured on its mask
            sliding_window=ops.window_counts(),
        )
        self.impl: dict[str, Callable[..., mx.array]] = {
            "rms_norm": ops.rms_norm,
            "layer_norm": ops.layer_norm,
            "rope": ops.rope_op(self.traditional),
            "rope_scaled": ops.rope_scaled_op(self.traditional),
            "attention": ops.attention,
            "sliding_window_attention": ops.sliding_window_attention,
            "swiglu_mlp": ops.swiglu_mlp,
            "mlp": ops.mlp,
            "glu_mlp": ops.glu_mlp,
            "cross_entropy": ops.cross_entropy,
            "cross_entropy_mean": ops.cross_entropy_mean,
            "z_loss": ops.z_loss,
            "softcap_z_loss": ops.softcap_z_loss,
        }
        if ops.has_sinks():  # mx.fast.scaled_dot_product_attention's sinks (MLX 0.29 on)
            self.impl["sink_attention"] = ops.sink_attention
        self.capabilities: dict[str, Capability] = {op: Capability(dtypes=ALL) for op in self.impl}
        # the kernel has no soft-cap
        self.capabilities["sliding_window_attention"] = Capability(dtypes=ALL, values={"softcap": frozenset({"none"})})
        self.capabilities["rope_scaled"] = Capability(dtypes=ALL, values={"scaling.type": frozenset({"linear"})})
        # Not declared in low precision: measured over their budgets under the declarations above (docs/adapters.md,
        # "mlx"): the two-matrix and GLU MLPs' gradients in bfloat16 and float16 (nn.gelu is four operations, each
        # rounding, where unfused rounds the activation once), the cross-entropy gradient in float16
        for op in ("mlp", "glu_mlp"):
            self.capabilities[op] = Capability(dtypes=F32)
        for op in ("cross_entropy", "cross_entropy_mean"):
            self.capabilities[op] = Capability(dtypes=F32_BF16)

    def environment(self) -> dict[str, str]:
        return {
            "mlx": mx.__version__,
            "numpy": np.__version__,
            "device": str(mx.default_device()),
            "mlx-lm": installed("mlx-lm") or "",
            "supports": describe(SUPPORTED_RELEASES["mlx"]),
        }

    def _call(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> Callable[..., mx.array]:
        """The operation as a function of its floating inputs (contract order), integers and params bound."""
        fn, spec, kw = self.impl[op], OPS[op], dict(params)
        ints = {k: to_mx(inputs[k]) for k in spec.int_inputs}
        return lambda *floats: fn(**dict(zip(spec.inputs, floats, strict=True)), **ints, **kw)

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op not in self.impl:
            raise KeyError(f"mlx adapter: operation {op!r} is not declared")
        first = inputs[OPS[op].inputs[0]]
        out = self._call(op, inputs, params)(*(to_mx(inputs[k]) for k in OPS[op].inputs))
        return to_numpy(out, first.dtype)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        names = OPS[op].inputs
        fn = self._call(op, inputs, params)
        primals = [to_mx(inputs[k]) for k in names]
        _, grads = mx.vjp(lambda *f: fn(*f), primals, [to_mx(cotangent)])
        return {k: to_numpy(g, inputs[k].dtype) for k, g in zip(names, grads, strict=True)}
