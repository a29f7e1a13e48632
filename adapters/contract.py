"""The adapter contract: how a candidate implementation is exposed to the suite.

Read docs/adapter-contract.md for the prose version. In short, an adapter is any object with

* ``name: str`` — shown in reports;
* ``conventions: Conventions`` — what the candidate follows where real implementations differ;
* ``capabilities: Mapping[str, Capability]`` — which operations it implements, in which dtypes,
  whether it provides their gradients, and, for an operation with a named choice (``CHOICES``: the RoPE
  scaling rule, the MLP activation), which values of it. What is not declared is *unsupported*, never
  passed;
* ``forward(op, inputs, params) -> np.ndarray`` — run one operation;
* ``vjp(op, inputs, params, cotangent) -> dict[str, np.ndarray]`` — its vector-Jacobian product, one
  gradient per differentiable input (see ``OPS``);
* ``environment() -> dict[str, str]`` — library versions and device, for the report;
* optionally ``autocast(dtype) -> context manager`` — the framework's mixed-precision context for the
  low-precision dtype ``dtype`` (``torch.autocast``), needed by an adapter whose capabilities declare
  ``autocast`` (``AUTOCAST``: the operations, and in which dtype each input arrives, under that mode).

Arrays cross the boundary as NumPy arrays. Floating inputs arrive in the dtype under test
(``numpy.float32``, ``numpy.float16`` or ``ml_dtypes.bfloat16``) and outputs must come back in the
same dtype and shape the operation defines. Integer inputs (positions, targets) arrive as int64.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field, replace
from typing import Any, Literal, Protocol, runtime_checkable

import numpy as np

from transformer_conformance.reference.blocks import BLOCK_INPUTS, PLACEMENTS
from transformer_conformance.reference.linear_losses import REDUCTIONS
from transformer_conformance.reference.mla import FORMS
from transformer_conformance.reference.mlp import GLU_ACTIVATIONS, MLP_ACTIVATIONS
from transformer_conformance.reference.moe import NORMS, SCORES
from transformer_conformance.reference.mrope import STREAMS
from transformer_conformance.reference.rope_scaling import SCALING_TYPES


@dataclass(frozen=True)
class OpSpec:
    """One operation of the contract: its inputs, parameters and what its output looks like."""

    inputs: tuple[str, ...]  # floating inputs, all differentiable, in this order
    int_inputs: tuple[str, ...] = ()  # integer inputs (not differentiable)
    params: tuple[str, ...] = ()  # keyword parameters (Python scalars or None)
    summary: str = ""


OPS: dict[str, OpSpec] = {
    "rms_norm": OpSpec(
        ("x", "weight"),
        params=("eps",),
        summary="x (..., n), weight (n); eps float or None (None: the adapter's declared default). Output like x.",
    ),
    "layer_norm": OpSpec(
        ("x", "weight", "bias"),
        params=("eps",),
        summary="x (..., n), weight (n), bias (n); eps float or None. Biased variance. Output like x.",
    ),
    "rope": OpSpec(
        ("x",),
        int_inputs=("positions",),
        params=("base", "rotary_dim"),
        summary="x (..., T, d), positions (T,); base float; rotary_dim int (first dims rotate). Output like x.",
    ),
    "swiglu_mlp": OpSpec(
        ("x", "w1", "w3", "w2"),
        summary="x (..., d), w1 and w3 (d, h), w2 (h, d): (silu(x@w1) * (x@w3)) @ w2. Output like x.",
    ),
    "cross_entropy": OpSpec(
        ("logits",),
        int_inputs=("targets",),
        summary="logits (N, V), targets (N,): per-token loss logsumexp(logits) - logits[target], shape (N,).",
    ),
    "z_loss": OpSpec(
        ("logits",),
        params=("alpha",),
        summary="logits (N, V); alpha float: per-token alpha * logsumexp(logits)**2, shape (N,).",
    ),
    "sinusoidal_positions": OpSpec(
        ("x",),
        int_inputs=("positions",),
        params=("base",),
        summary="x (..., T, d), d even, positions (T,); base float (10000): x + PE, PE[:, 2i] = sin(pos·base^(−2i/d)), "
        "PE[:, 2i+1] = cos(…). Output like x.",
    ),
    "learned_positions": OpSpec(
        ("table",),
        int_inputs=("positions",),
        summary="table (L, d), positions (T,): the rows table[positions], (T, d). A position outside 0 … L−1 must "
        "raise (never wrap or clamp).",
    ),
    "alibi": OpSpec(
        ("scores",),
        int_inputs=("q_positions", "k_positions"),
        summary="scores (..., H, Tq, Tk), q_positions (Tq,), k_positions (Tk,): scores − m_h·|i − j|, m_h the ALiBi "
        "slopes of H heads. Output like scores.",
    ),
    "rope_scaled": OpSpec(
        ("x",),
        int_inputs=("positions",),
        params=("base", "rotary_dim", "scaling"),
        summary="rope with context extension: scaling = {'type': 'linear'|'ntk'|'dynamic'|'yarn'|'llama3'|'longrope', "
        "'factor': s, ...} (docs/adapter-contract.md). Output like x.",
    ),
    "mrope": OpSpec(
        ("x",),
        int_inputs=("positions",),
        params=("base", "sections", "streams"),
        summary="multimodal RoPE (Qwen2-VL): x (..., T, d), positions (3, T) — temporal, height, width; sections "
        "(n_t, n_h, n_w) summing to d/2; pair i rotated by p_s(i)·θ_i in the declared layout, s(i) by streams "
        "'sections' (consecutive blocks: Qwen2-VL) or 'interleaved' (Qwen3-VL). Output like x.",
    ),
    "attention_temperature": OpSpec(
        ("q",),
        int_inputs=("positions",),
        params=("floor_scale", "attn_scale"),
        summary="q (..., T, D), positions (T,): the query at token t times log(1 + ⌊(p_t + 1)/floor_scale⌋)·attn_scale "
        "+ 1 (Llama 4's attention temperature tuning on NoPE layers). Output like q.",
    ),
    "cross_entropy_mean": OpSpec(
        ("logits",),
        int_inputs=("targets",),
        params=("ignore_index",),
        summary="logits (N, V), targets (N,); ignore_index int (-100): mean of the per-token loss over tokens whose "
        "target is not ignore_index, a 0-d array.",
    ),
    "softcap_z_loss": OpSpec(
        ("logits",),
        params=("alpha", "cap"),
        summary="logits (N, V); alpha, cap floats: per-token alpha * logsumexp(cap * tanh(logits / cap))**2, (N,).",
    ),
    "param_count": OpSpec(
        (),
        params=("vocab", "hidden", "intermediate", "layers", "heads", "kv_heads", "tied"),
        summary="parameters of a LLaMA-style decoder of this configuration (GQA, SwiGLU, RMSNorm, no biases, "
        "tied or untied head): an int (or 0-d integer array).",
    ),
    "attention": OpSpec(
        ("q", "k", "v"),
        params=("causal", "softcap", "scale"),
        summary="q (B, Hq, Lq, D), k (B, Hkv, Lk, D), v (B, Hkv, Lk, Dv): softmax(cap(q kᵀ·scale) + mask) v; "
        "query head h reads KV head h // (Hq/Hkv); causal bool (aligned as declared), softcap c or None "
        "(c·tanh(l/c)), scale float or None (1/√D). Output (B, Hq, Lq, Dv).",
    ),
    "qk_norm_attention": OpSpec(
        ("q", "k", "v", "q_weight", "k_weight"),
        params=("causal", "softcap", "eps"),
        summary="attention on rms_norm(q, q_weight, eps) and rms_norm(k, k_weight, eps) over D; scale 1/√D.",
    ),
    "rope_attention": OpSpec(
        ("q", "k", "v"),
        int_inputs=("q_positions", "k_positions"),
        params=("causal", "softcap", "base"),
        summary="attention on RoPE(q, q_positions) and RoPE(k, k_positions) in the declared layout; v not rotated.",
    ),
    "sliding_window_attention": OpSpec(
        ("q", "k", "v"),
        params=("window", "softcap", "scale"),
        summary="causal attention (shapes, GQA, softcap and scale as attention) in which the query at token p sees key "
        "j only if p − j < W (window W, the query's own token counted) or ≤ W (its own not counted), as declared "
        "(sliding_window); query i is token i + L_k − L_q bottom-right, i top-left. Output (B, Hq, Lq, Dv).",
    ),
    "chunked_attention": OpSpec(
        ("q", "k", "v"),
        params=("chunk", "scale"),
        summary="causal attention in which the query at token p sees key j only if ⌊j/C⌋ = ⌊p/C⌋ (chunk C, Llama 4's "
        "local layers); positions as sliding_window_attention. Output (B, Hq, Lq, Dv).",
    ),
    "sink_attention": OpSpec(
        ("q", "k", "v", "sinks"),
        params=("causal", "window", "scale"),
        summary="attention with sinks (H_q,), one logit per query head joining the softmax and dropped after it: "
        "Σ_j e^{s_j} v_j / (Σ_j e^{s_j} + e^{σ_h}); causal bool, window W or None (causal and sliding, as "
        "sliding_window_attention). Output (B, Hq, Lq, Dv).",
    ),
    "mla_attention": OpSpec(
        ("q_nope", "q_rope", "latent", "k_rope", "w_uk", "w_uv"),
        int_inputs=("q_positions", "k_positions"),
        params=("causal", "base", "mscale", "form"),
        summary="multi-head latent attention (DeepSeek-V2/V3): q_nope (B, H, L_q, D_n), q_rope (B, H, L_q, D_r), "
        "latent (B, L_k, D_c), k_rope (B, L_k, D_r) shared by the heads, w_uk (H, D_c, D_n), w_uv (H, D_c, D_v): keys "
        "[latent·w_uk[h], RoPE(k_rope)], values latent·w_uv[h], queries [q_nope, RoPE(q_rope)] (RoPE at the positions "
        "in the declared layout); softmax scale mscale²/√(D_n + D_r), mscale None or {'factor': s, 'mscale_all_dim': "
        "m} (0.1·m·ln s + 1); causal as attention; form 'naive' or 'absorbed' (w_uk folded into the query, w_uv "
        "applied after the softmax). Output (B, H, L_q, D_v).",
    ),
    "moe_router": OpSpec(
        ("logits", "bias"),
        params=("k", "score", "norm", "routed_scaling_factor", "n_group", "topk_group"),
        summary="logits (N, E), bias (E,): dense combine weights (N, E) — score s = softmax or sigmoid of the logits; "
        "each token selects the top k of s + bias (the bias selects only), within its topk_group best of n_group "
        "groups of consecutive experts (a group scored by its two highest s + bias) when n_group is an int; weight "
        "routed_scaling_factor·s on the selected, divided by their sum when norm is 'topk', exactly 0 elsewhere.",
    ),
    "moe_aux_loss": OpSpec(
        ("logits",),
        params=("k",),
        summary="logits (N, E): the load-balancing loss E·Σ_e f_e·P_e of a softmax top-k router, P_e the mean "
        "probability of expert e, f_e the fraction routed to it (as declared: aux_loss_fraction); a 0-d array.",
    ),
    "moe_z_loss": OpSpec(
        ("logits",),
        summary="logits (N, E): ST-MoE's router z-loss, the mean over the N tokens of logsumexp(logits)² (no "
        "coefficient: the trainer's); a 0-d array.",
    ),
    "mlp": OpSpec(
        ("x", "w_in", "w_out"),
        params=("activation",),
        summary="x (..., d), w_in (d, h), w_out (h, d): act(x@w_in) @ w_out, no biases; activation one of relu, "
        "gelu_erf, gelu_tanh, gelu_sigmoid (x·σ(1.702x)), relu_squared.",
    ),
    "glu_mlp": OpSpec(
        ("x", "w1", "w3", "w2"),
        params=("activation",),
        summary="(act(x@w1) * (x@w3)) @ w2, no biases; activation silu (SwiGLU), gelu_erf / gelu_tanh / "
        "gelu_sigmoid (GeGLU), relu (ReGLU).",
    ),
    "ffn_hidden_dim": OpSpec(
        (),
        params=("d", "base_ratio", "gated", "multiple_of", "ffn_dim_multiplier"),
        summary="the MLP hidden width the candidate builds against a two-matrix base_ratio·d MLP: an int.",
    ),
    "block": OpSpec(
        BLOCK_INPUTS,
        int_inputs=("positions",),
        params=("placement", "n_heads", "n_kv_heads", "eps", "base"),
        summary="one decoder block on x (B, T, d): RMSNorm, causal GQA self-attention with RoPE on q and k, SwiGLU "
        "MLP, no biases; placement pre, post, double or parallel (docs/adapter-contract.md). Output like x.",
    ),
    "lm_head": OpSpec(
        ("x", "norm_weight", "w_head"),
        params=("eps",),
        summary="x (..., d), norm_weight (d), w_head (d, V): rms_norm(x, norm_weight, eps) @ w_head, shape (..., V).",
    ),
    "linear_cross_entropy": OpSpec(
        ("x", "weight", "bias"),
        int_inputs=("targets",),
        params=("ignore_index", "reduction"),
        summary="x (N, H), weight (V, H), bias (V,), targets (N,); ignore_index int (-100); reduction 'mean' or "
        "'none': the cross-entropy of the logits x·Wᵀ + b (the LM head fused with its loss), per token (N,) with 0 "
        "on ignored tokens, or their mean over tokens whose target is not ignore_index, a 0-d array.",
    ),
    "z_loss_mean": OpSpec(
        ("logits",),
        int_inputs=("targets",),
        params=("alpha", "ignore_index"),
        summary="logits (N, V), targets (N,); alpha float, ignore_index int (-100): the mean over tokens whose target "
        "is not ignore_index of alpha * logsumexp(logits)**2, a 0-d array (the z-loss term as trainers add it).",
    ),
    "swiglu_hidden_dim": OpSpec(
        (),
        params=("d", "multiple_of", "ffn_dim_multiplier"),
        summary="the SwiGLU hidden width the candidate builds for model width d: an int (or 0-d integer array).",
    ),
}

DTYPES = ("float32", "bfloat16", "float16")

#: The low-precision dtypes of the autocast mode: a case of mode ``autocast-D`` runs inside the adapter's
#: ``autocast(D)`` context, as a model trained in mixed precision runs (docs/adapter-contract.md, "Autocast").
AUTOCAST_DTYPES = ("bfloat16", "float16")

#: The operations the autocast mode is defined for, and the dtype their floating inputs arrive in under
#: ``autocast(D)``, as a model under autocast hands them over: ``"low"`` (D: RoPE's q and k leave a projection,
#: which autocast runs in D) or ``"float32"`` (the norms read the float32 residual stream with their float32
#: weights, the sinusoidal encoding the float32 embeddings). None of these operations' own steps is on
#: autocast's lower-precision lists, so the output keeps that dtype and the budget of that dtype applies:
#: a step that autocast lowers (a matmul forming RoPE's angles, a dot product forming mean(x²)) is a
#: rounding the budget does not contain.
AUTOCAST: dict[str, Literal["low", "float32"]] = {
    "rope": "low",
    "rope_scaled": "low",
    "rms_norm": "float32",
    "layer_norm": "float32",
    "sinusoidal_positions": "float32",
}

RopeLayout = Literal["interleaved", "half"]
NormRounding = Literal["single", "before_weight"]
Variance = Literal["two_pass", "one_pass"]
EpsDefault = float | Literal["finfo"]
CausalAlignment = Literal["bottom_right", "top_left"]
SlidingWindow = Literal["inclusive", "exclusive"]
AuxLossFraction = Literal["per_token", "per_assignment"]
#: How a candidate runs an operation: "no" — as it is called (eager code, an interpreter, a program compiled for
#: any shape); "per_shape" — a program built for each new shape of its inputs (torch.compile without dynamic
#: sizes, jax.jit, an ONNX export, a kernel specialised on its sizes), so the checks draw its shapes from a
#: small, stated plan (conformance/strategies/plan.py) and build each program once; "per_value" — a program built
#: for each shape and for each value of a structural parameter its code branches on or bakes in as a constant
#: (causal, a soft-cap, the scale, a window or chunk length: torch.compile's guards, a FlexAttention mask mod's
#: captured window), so the plan's shapes also state those values
Compiles = Literal["no", "per_shape", "per_value"]
COMPILES: tuple[Compiles, ...] = ("no", "per_shape", "per_value")


@dataclass(frozen=True)
class Conventions:
    """What a candidate follows where correct implementations legitimately differ.

    The suite holds the candidate to what it declares: a declared convention changes the oracle
    (RoPE layout, eps default) or the rounding model of the tolerance (where it rounds), never the
    size of a tolerance by hand.
    """

    #: Pair layout of RoPE: "interleaved" pairs (2i, 2i+1) as in the seeds, or "half" pairs (i, i + d/2)
    #: as in HF transformers and Liger-Kernel.
    rope_layout: RopeLayout = "interleaved"
    #: Precision of position angles (and their cos/sin): RoPE's m·θ_i, scaled or not, and the sinusoidal
    #: encoding's pos·ω_i: "float32" or "float64".
    rope_angle_dtype: str = "float32"
    #: Working precision for float32, bfloat16 and float16 inputs: reductions and fused arithmetic run in
    #: the wider of this and the input dtype.
    compute_dtype: str = "float32"
    #: Where a low-precision norm rounds: "single" (one rounding of the final result) or "before_weight"
    #: (the normalised value is cast to the input dtype and then multiplied by the weight, as in HF Llama).
    norm_rounding: NormRounding = "single"
    #: How LayerNorm's variance is computed: "two_pass", mean((x − μ)²), or "one_pass", mean(x²) − μ² clamped
    #: at 0 (Flax's use_fast_variance, jax.nn.standardize's "fast"), which cancels catastrophically when
    #: |μ| is large against the spread.
    variance: Variance = "two_pass"
    #: The norms' weight is stored zero-centred as w = γ − offset and applied as (offset + w) (HF Gemma,
    #: TransformerEngine's zero_centered_gamma: offset 1). The suite still passes γ; the adapter stores
    #: γ − offset in the dtype under test, and that rounding enters the budget.
    norm_weight_offset: float = 0.0
    #: Operations computed as a chain of separate framework ops whose intermediates (and saved
    #: activations) are stored in the input dtype: "op" for forward and backward, "op.vjp" for the
    #: backward only.
    unfused: frozenset[str] = frozenset()
    #: Operations whose reductions keep partial sums in the input dtype ("op" or "op.vjp", as above).
    low_precision_sums: frozenset[str] = frozenset()
    #: eps used when the suite passes eps=None: a number, or "finfo" for the input dtype's machine epsilon.
    eps_defaults: Mapping[str, EpsDefault] = field(default_factory=lambda: {"rms_norm": 1e-6, "layer_norm": 1e-5})
    #: Subnormal results are flushed to zero (and subnormal operands read as zero), as XLA does on the CPU.
    flush_subnormals: bool = False
    #: What a candidate may write into: "op", the operation's inputs (forward and backward); "op.vjp", the
    #: cotangent its backward is handed (the caller's own array, docs/adapter-contract.md). Each is separate.
    in_place_ops: frozenset[str] = frozenset()
    #: Operations whose forward computes the gradient for a unit cotangent and stores it in the input dtype,
    #: the backward multiplying it by the cotangent (fused cross-entropy kernels such as Liger-Kernel's, which
    #: keep it in the logits): one more rounding of the gradient, before the product.
    grad_in_forward: frozenset[str] = frozenset()
    #: Operations ("op" or "op.vjp") that evaluate exp(t) as exp2(t·log₂e), as GPU kernels do for the
    #: hardware's base-2 exponential: the product t·log₂e is one more rounding, u·|t| in the exponent.
    exp_via_exp2: frozenset[str] = frozenset()
    #: Where causal attention puts the diagonal when there are fewer queries than keys: "bottom_right" (query i
    #: of L_q sees keys ≤ i + L_k − L_q, as decoding with a KV cache needs) or "top_left" (keys ≤ i, as
    #: is_causal in torch's and JAX's fused attention).
    causal_alignment: CausalAlignment = "bottom_right"
    #: What a sliding window of W counts: "inclusive" — W keys, the query's own token among them (p − j < W: HF
    #: transformers' sliding_window, mlx-lm, Mistral's and Gemma's model code); "exclusive" — W keys before the
    #: query's own, W + 1 in all (p − j ≤ W: flash-attention's window_size=(W, 0), JAX's local_window_size).
    sliding_window: SlidingWindow = "inclusive"
    #: What f_e of the MoE load-balancing loss E·Σ f_e·P_e counts with k experts per token: "per_token" — the
    #: fraction of tokens that selected e, Σ f_e = k (HF transformers' load_balancing_loss_func: Mixtral, Qwen-MoE,
    #: OLMoE); "per_assignment" — the fraction of the N·k assignments, Σ f_e = 1 (Megatron-Core's switch loss).
    aux_loss_fraction: AuxLossFraction = "per_token"
    #: Means over valid tokens ("linear_cross_entropy", "z_loss_mean") that are 0 when every token is ignored,
    #: with zero gradients (Liger-Kernel's kernels); any other is NaN there, 0/0 (torch's F.cross_entropy).
    zero_when_all_ignored: frozenset[str] = frozenset()
    #: Operations ("op" or "op.vjp") whose repeated identical calls may differ in the last bits (atomics, a
    #: reduction order chosen at run time): each answer is still held to the oracle's budget, not to bit-identity
    #: with the last (conformance/checks/test_integrity.py).
    nondeterministic: frozenset[str] = frozenset()

    def describe(self) -> dict[str, Any]:
        """A JSON-ready summary for reports."""
        return {
            "rope_layout": self.rope_layout,
            "rope_angle_dtype": self.rope_angle_dtype,
            "compute_dtype": self.compute_dtype,
            "norm_rounding": self.norm_rounding,
            "variance": self.variance,
            "norm_weight_offset": self.norm_weight_offset,
            "unfused": sorted(self.unfused),
            "low_precision_sums": sorted(self.low_precision_sums),
            "eps_defaults": dict(self.eps_defaults),
            "flush_subnormals": self.flush_subnormals,
            "in_place_ops": sorted(self.in_place_ops),
            "grad_in_forward": sorted(self.grad_in_forward),
            "exp_via_exp2": sorted(self.exp_via_exp2),
            "causal_alignment": self.causal_alignment,
            "sliding_window": self.sliding_window,
            "aux_loss_fraction": self.aux_loss_fraction,
            "zero_when_all_ignored": sorted(self.zero_when_all_ignored),
            "nondeterministic": sorted(self.nondeterministic),
        }


#: attention's logit soft-capping: "none" (softcap None) and "tanh" (a cap c: c·tanh(l/c)); a kernel without
#: soft-capping declares ``values={"softcap": frozenset({"none"})}``
SOFTCAPS = ("none", "tanh")

#: the named choices of an operation's parameters, with every value the contract defines: an adapter may
#: declare a part of them (``Capability.values``); the checks then draw only what it declares
CHOICES: dict[str, dict[str, tuple[str, ...]]] = {
    "rope_scaled": {"scaling.type": SCALING_TYPES},
    "mrope": {"streams": STREAMS},
    "mla_attention": {"form": FORMS},
    "mlp": {"activation": MLP_ACTIVATIONS},
    "glu_mlp": {"activation": GLU_ACTIVATIONS},
    "block": {"placement": PLACEMENTS},
    "linear_cross_entropy": {"reduction": REDUCTIONS},
    "attention": {"softcap": SOFTCAPS},
    "sliding_window_attention": {"softcap": SOFTCAPS},
    # the selection: top_k of the scores (bias 0), of score + bias, or group-limited; the routed scaling factor: 1
    # ("none") or a factor
    "moe_router": {
        "score": SCORES,
        "norm": NORMS,
        "selection": ("top_k", "bias", "groups"),
        "routed_scaling": ("none", "factor"),
    },
}


@dataclass(frozen=True)
class Capability:
    """Declared support for one operation: its dtypes, its gradient, the values of its named choices
    (``CHOICES``) it implements: ``values={"activation": frozenset({"silu", "gelu_tanh"})}`` (a choice left
    out of ``values`` is declared with every value the contract defines), and the dtypes in which it runs
    under the framework's mixed-precision context too: ``autocast=frozenset({"bfloat16"})``."""

    dtypes: frozenset[str] = frozenset(DTYPES)
    grad: bool = True
    values: Mapping[str, frozenset[str]] = field(default_factory=dict)
    #: the dtypes of ``AUTOCAST_DTYPES`` in which the operation also runs under the adapter's ``autocast(D)``
    #: context (the checks' mode ``autocast-D``); only for an operation of ``AUTOCAST``
    autocast: frozenset[str] = frozenset()
    #: "per_shape": the candidate builds a program per shape of the inputs (``Compiles``), and the checks draw
    #: the operation's shapes from the plan; "per_value": per shape and per value of a structural parameter, and
    #: the planned shapes also state those values; "no" (the default): shapes are drawn freely
    compiles: Compiles = "no"
    #: the operation's kernels run in an interpreter (Triton's ``TRITON_INTERPRET=1``, Pallas's ``interpret=True``),
    #: every program of their grid in Python: each size regime then runs once, in the operation's narrowest declared
    #: dtype (``regime_dtype``), where accumulations lose most, and is skipped in the others — the regime's shape,
    #: not its repetition (a regime of 32,768 rows takes minutes there)
    interpreted: bool = False

    def declared(self, key: str, values: tuple[str, ...]) -> tuple[str, ...]:
        """Those of ``values`` (in their order) this capability declares for the choice ``key``."""
        allowed = self.values.get(key)
        return values if allowed is None else tuple(v for v in values if v in allowed)


def interpreted(table: Mapping[str, Capability]) -> dict[str, Capability]:
    """``table`` with every operation declared ``interpreted`` (its kernels run in an interpreter)."""
    return {op: replace(cap, interpreted=True) for op, cap in table.items()}


#: the order in which an interpreted operation's size regimes pick their one dtype: the narrowest declared
REGIME_DTYPE_ORDER = ("bfloat16", "float16", "float32")


def regime_dtype(cap: Capability) -> str | None:
    """The one dtype an interpreted operation's size regimes run in (None: every declared dtype, not interpreted)."""
    if not getattr(cap, "interpreted", False):
        return None
    return next((d for d in REGIME_DTYPE_ORDER if d in cap.dtypes), None)


def per_shape(table: Mapping[str, Capability], skip: frozenset[str] = frozenset()) -> dict[str, Capability]:
    """``table`` with every operation but ``skip`` declared ``compiles="per_shape"`` (a candidate that builds a
    program per shape of its inputs: ``jax.jit``, an ONNX export, a compiled kernel)."""
    return {op: cap if op in skip else replace(cap, compiles="per_shape") for op, cap in table.items()}


def capabilities(ops: Mapping[str, Capability] | None = None, **kw: Capability) -> dict[str, Capability]:
    """Build a capability table; unknown operation names are rejected at once."""
    table = dict(ops or {}, **kw)
    unknown = sorted(set(table) - set(OPS))
    if unknown:
        raise ValueError(f"unknown operation(s) {', '.join(unknown)}; the contract defines {', '.join(OPS)}")
    return table


@runtime_checkable
class Adapter(Protocol):
    name: str
    conventions: Conventions
    capabilities: Mapping[str, Capability]

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray: ...

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> Mapping[str, np.ndarray]: ...

    def environment(self) -> dict[str, str]: ...


class ContractError(Exception):
    """An object offered as an adapter does not meet this contract."""


def validate(obj: object, origin: str) -> Adapter:
    """Check an adapter object against the contract; raise ContractError with one line if it fails."""
    missing = [
        a for a in ("name", "conventions", "capabilities", "forward", "vjp", "environment") if not hasattr(obj, a)
    ]
    if missing:
        raise ContractError(
            f"{origin} is not an adapter: it has no {', '.join(missing)}"
            " (docs/adapter-contract.md: transformer-conformance --docs adapter-contract)"
        )
    assert isinstance(obj, Adapter)
    if not isinstance(obj.name, str) or not obj.name:
        raise ContractError(f"{origin}: adapter.name must be a non-empty string")
    if not isinstance(obj.conventions, Conventions):
        raise ContractError(f"{origin}: adapter.conventions must be a transformer_conformance.adapters.Conventions")
    if not isinstance(obj.capabilities, Mapping):
        raise ContractError(
            f"{origin}: adapter.capabilities must be a mapping of operation name to Capability, "
            f"not {type(obj.capabilities).__name__}"
        )
    for op, cap in obj.capabilities.items():
        if op not in OPS:
            raise ContractError(f"{origin}: declares unknown operation {op!r}; the contract defines {', '.join(OPS)}")
        if not isinstance(cap, Capability):
            raise ContractError(f"{origin}: capabilities[{op!r}] must be a transformer_conformance.adapters.Capability")
        bad = sorted(set(cap.dtypes) - set(DTYPES))
        if bad:
            raise ContractError(f"{origin}: capabilities[{op!r}] names unknown dtype(s) {', '.join(bad)}")
        _validate_values(origin, op, cap)
        _validate_autocast(obj, origin, op, cap)
        if not isinstance(getattr(cap, "interpreted", False), bool):
            raise ContractError(f"{origin}: capabilities[{op!r}].interpreted must be True or False")
        compiles = getattr(cap, "compiles", "no")  # a Capability of an older contract may lack it
        if compiles not in COMPILES:
            raise ContractError(
                f"{origin}: capabilities[{op!r}].compiles is {compiles!r}; the contract defines {', '.join(COMPILES)}"
            )
    return obj


def _validate_autocast(obj: object, origin: str, op: str, cap: Capability) -> None:
    autocast: frozenset[str] = getattr(cap, "autocast", frozenset())  # a Capability of an older contract may lack it
    if not autocast:
        return
    where = f"{origin}: capabilities[{op!r}].autocast"
    if isinstance(autocast, str):
        raise ContractError(f"{where} must be a set of dtypes, not a string")
    bad = sorted(set(autocast) - set(AUTOCAST_DTYPES))
    if bad:
        raise ContractError(f"{where} names {', '.join(bad)}; the autocast mode has {', '.join(AUTOCAST_DTYPES)}")
    if op not in AUTOCAST:
        raise ContractError(f"{where}: the autocast mode is defined for {', '.join(AUTOCAST)} only")
    if not callable(getattr(obj, "autocast", None)):
        raise ContractError(f"{where} is declared but the adapter has no autocast(dtype) method")


def _validate_values(origin: str, op: str, cap: Capability) -> None:
    choices = CHOICES.get(op, {})
    for key, values in cap.values.items():
        where = f"{origin}: capabilities[{op!r}].values[{key!r}]"
        if key not in choices:
            named = f"; {op} has {', '.join(choices)}" if choices else f"; {op} has no named choice"
            raise ContractError(f"{origin}: capabilities[{op!r}] narrows unknown choice {key!r}{named}")
        if isinstance(values, str) or not values:
            raise ContractError(f"{where} must be a non-empty set of values (leave {op} out to declare none)")
        bad = sorted(set(values) - set(choices[key]))
        if bad:
            raise ContractError(
                f"{where} names unknown value(s) {', '.join(bad)}; the contract defines {', '.join(choices[key])}"
            )
