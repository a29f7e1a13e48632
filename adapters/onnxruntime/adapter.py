"""ONNX Runtime as a candidate: the standard ONNX operators, one per graph, on the CPU execution provider.

Each contract operation is one node of the default domain, in a graph built with ``onnx.helper`` and run by
an ``InferenceSession`` on ``CPUExecutionProvider`` (one thread, onnxruntime's default full graph
optimisation); sessions are cached per operation, dtype and attribute values (their inputs have no fixed
shape, so one session serves every shape):

* ``layer_norm`` — ``LayerNormalization`` (opset 17; ``axis=-1``, ``stash_type`` float32);
* ``rms_norm`` — ``RMSNormalization`` (opset 23);
* ``rope`` — ``RotaryEmbedding`` (opset 23) on x viewed as (batch, 1, T, d), ``interleaved`` set from the
  declared layout, ``rotary_embedding_dim`` for a partial rotation. The operator takes cos and sin caches
  in x's type, indexed by ``position_ids``: the adapter computes the angles of the call's positions in
  float32 (as model code builds its cache) and rounds cos and sin to x's dtype, as the operator requires;
* ``attention`` — ``Attention`` (opset 23) on 4-D q, k, v: grouped KV heads, ``softcap``, ``scale``,
  ``is_causal``. Its causal mask is offset by the length of ``past_key`` (``j ≤ i + past``), so without a
  cache it is top-left; a causal call with fewer queries than keys passes the first L_k − L_q keys and
  values as ``past_key``/``past_value``, the decoding path, which is bottom-right;
* ``cross_entropy``, ``cross_entropy_mean`` — ``SoftmaxCrossEntropyLoss`` (opset 13), ``reduction`` none
  or mean with ``ignore_index``.

ONNX Runtime inference has no gradients: every operation is declared forward only.

Declared, because measured on onnxruntime 1.32.0 (CPU provider):

* dtypes: the CPU provider registers bfloat16 kernels for ``LayerNormalization`` only; ``RMSNormalization``
  and ``Attention`` are expanded into their function bodies for bfloat16, whose ``Mul``/``Expand`` have no
  bfloat16 kernel, ``RotaryEmbedding`` has none, and the bfloat16 ``SoftmaxCrossEntropyLoss`` function body
  does not type-check: those declare float32 and float16 (a bfloat16 session fails to build, NOT_IMPLEMENTED
  or INVALID_GRAPH);
* ε defaults: 1e-5 for both norms (the operators' attribute default, used when ε is None);
* RoPE: ``interleaved=0`` rotates the pairs (i, i + d/2), ``interleaved=1`` the pairs (2i, 2i+1); cos and
  sin are stored in x's dtype (``unfused`` rope);
* float16 ``Attention`` stores its intermediates in float16 (``unfused`` attention: undeclared, a 1×1 head
  with two keys is 0.134 ulp off against a fused budget of 0.005);
* ``SoftmaxCrossEntropyLoss`` is expanded into its function body; for float16 the CPU provider runs its
  ``LogSoftmax`` in float32 between inserted Casts, stores it in float16, and averages those float16
  losses: ``unfused`` cross_entropy_mean (the per-token loss is the stored value negated: one rounding);
* the norms compute in float32 and round once (``LayerNormalization`` in bfloat16 too): 0.5 ulp;
* causal attention in the alignment declared (above).
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from dataclasses import replace
from typing import Any

import ml_dtypes
import numpy as np
import onnx
import onnxruntime as ort
from onnx import TensorProto, helper

from transformer_conformance.adapters.contract import OPS, Capability, Conventions, SlidingWindow
from transformer_conformance.adapters.onnxruntime import graphs
from transformer_conformance.adapters.onnxruntime.graphs import ELEM
from transformer_conformance.adapters.versions import ONNXRUNTIME, SUPPORTED, describe, release, require

DTYPE_NAMES = {
    np.dtype(np.float32): "float32",
    np.dtype(np.float16): "float16",
    np.dtype(ml_dtypes.bfloat16): "bfloat16",
}

F32_F16 = frozenset({"float32", "float16"})
ALL = frozenset({"float32", "float16", "bfloat16"})


def check_version(version: str = ort.__version__) -> None:
    """Refuse, with one line, an onnxruntime outside the releases the adapter's declarations were measured on."""
    require("onnxruntime", (ONNXRUNTIME,), {"onnxruntime": version})


#: the first release whose GroupQueryAttention counts the query's own token in ``local_window_size``
#: (microsoft/onnxruntime#25927, merged September 2025: "previously, local window size of GQA op excluded the
#: current token"); measured on the CPU provider: 1.22.0 and 1.23.0 exclude it, 1.24.1 and 1.32.0 include it
GQA_WINDOW_INCLUDES_OWN_TOKEN = (1, 24)


def gqa_window_counts(version: str = ort.__version__) -> SlidingWindow:
    """What GroupQueryAttention's ``local_window_size`` W counts on onnxruntime ``version``: "inclusive" (W keys, the
    query's own token among them, p − j < W) from 1.24, "exclusive" (W keys before it, p − j ≤ W) before."""
    have = release(version)
    return "inclusive" if have + (0,) * (2 - len(have)) >= GQA_WINDOW_INCLUDES_OWN_TOKEN else "exclusive"


def pad_last(a: np.ndarray, width: int) -> np.ndarray:
    """``a`` with its last axis zero-padded to ``width`` (a zero adds nothing to a dot product, exactly)."""
    if a.shape[-1] == width:
        return a
    return np.pad(a, [(0, 0)] * (a.ndim - 1) + [(0, width - a.shape[-1])])


def rope_cache(positions: np.ndarray, rd: int, base: float) -> tuple[np.ndarray, np.ndarray]:
    """cos and sin of the angles m·θ_i of ``positions`` (T, rd/2), in float32 as model code builds its cache."""
    inv_freq = np.float32(1.0) / (np.float32(base) ** (np.arange(0, rd, 2, dtype=np.float32) / np.float32(rd)))
    angles = positions.astype(np.float32)[:, None] * inv_freq[None, :]
    return np.cos(angles), np.sin(angles)


class OnnxRuntimeAdapter:
    """The built-in ``onnxruntime`` adapter: standard ONNX operators on the CPU execution provider."""

    name = "onnxruntime"
    #: the releases it supports (adapters/versions.py; docs/adapters.md)
    supported = SUPPORTED["onnxruntime"]

    def __init__(self, device: str = "cpu", rope_layout: str = "half", causal_alignment: str = "bottom_right") -> None:
        require(self.name, self.supported)
        # what the graphs are built with (the declarations below say the same; a test changes only those)
        self.interleaved = rope_layout == "interleaved"
        self.cache_for_causal = causal_alignment == "bottom_right"
        if device != "cpu":
            raise RuntimeError(f"the onnxruntime adapter runs on the CPU execution provider only, not {device!r}")
        self.conventions = Conventions(
            rope_layout=rope_layout,  # type: ignore[arg-type]
            rope_angle_dtype="float32",
            compute_dtype="float32",
            # RotaryEmbedding takes cos and sin in x's type: rounded to it before the rotation. Attention in
            # float16 stores its intermediates in float16. SoftmaxCrossEntropyLoss is a function: its
            # LogSoftmax runs in float32 (between inserted Casts) and is stored in float16, then the mean is
            # taken of those float16 losses (a second rounding; the per-token loss is the stored value negated,
            # one rounding, so cross_entropy is not unfused). Each measured: undeclared, float16 fails.
            unfused=frozenset({"rope", "attention", "cross_entropy_mean"}),
            eps_defaults={"rms_norm": 1e-5, "layer_norm": 1e-5},
            causal_alignment=causal_alignment,  # type: ignore[arg-type]
        )
        self.capabilities: dict[str, Capability] = {
            "layer_norm": Capability(dtypes=ALL, grad=False),
            "rms_norm": Capability(dtypes=F32_F16, grad=False),
            "rope": Capability(dtypes=F32_F16, grad=False),
            "attention": Capability(dtypes=F32_F16, grad=False),
            "cross_entropy": Capability(dtypes=F32_F16, grad=False),
            "cross_entropy_mean": Capability(dtypes=F32_F16, grad=False),
        }
        self._sessions: dict[tuple[Any, ...], ort.InferenceSession] = {}
        self._build: dict[str, Callable[..., bytes]] = {
            "layer_norm": self._layer_norm,
            "rms_norm": self._rms_norm,
            "rope": self._rope,
            "attention": self._attention,
            "cross_entropy": self._cross_entropy,
            "cross_entropy_mean": self._cross_entropy,
        }

    def environment(self) -> dict[str, str]:
        return {
            "onnxruntime": ort.__version__,
            "onnx": onnx.__version__,
            "numpy": np.__version__,
            "provider": "CPUExecutionProvider",
            "supports": describe(self.supported),
            "device": "cpu",
        }

    # ---- graphs: each builder returns a serialised model for (elem type, attributes) ---------------------------

    @staticmethod
    def _eps(eps: float | None) -> dict[str, Any]:
        return {} if eps is None else {"epsilon": float(eps)}

    def _layer_norm(self, elem: int, eps: float | None) -> bytes:
        node = helper.make_node("LayerNormalization", ["x", "weight", "bias"], ["y"], axis=-1, **self._eps(eps))
        return graphs.model([node], [("x", elem), ("weight", elem), ("bias", elem)], [("y", elem)], 17)

    def _rms_norm(self, elem: int, eps: float | None) -> bytes:
        node = helper.make_node("RMSNormalization", ["x", "weight"], ["y"], axis=-1, **self._eps(eps))
        return graphs.model([node], [("x", elem), ("weight", elem)], [("y", elem)], 23)

    def _rope(self, elem: int, rotary_dim: int) -> bytes:
        interleaved = int(self.interleaved)
        node = helper.make_node(
            "RotaryEmbedding",
            ["x", "cos", "sin", "position_ids"],
            ["y"],
            interleaved=interleaved,
            rotary_embedding_dim=rotary_dim,
        )
        ins = [("x", elem), ("cos", elem), ("sin", elem), ("position_ids", TensorProto.INT64)]
        return graphs.model([node], ins, [("y", elem)], 23)

    def _attention(self, elem: int, causal: bool, softcap: float | None, scale: float | None, past: bool) -> bytes:
        attrs: dict[str, Any] = {"is_causal": int(causal)}
        if softcap:
            attrs["softcap"] = float(softcap)
        if scale is not None:
            attrs["scale"] = float(scale)
        names = ["q", "k", "v"] + (["", "past_key", "past_value"] if past else [])
        outs = ["y"] + (["present_key", "present_value"] if past else [])
        node = helper.make_node("Attention", names, outs, **attrs)
        ins = [(n, elem) for n in names if n]
        return graphs.model([node], ins, [(n, elem) for n in outs], 23)

    def _cross_entropy(self, elem: int, reduction: str, ignore_index: int | None) -> bytes:
        attrs: dict[str, Any] = {"reduction": reduction}
        if ignore_index is not None:
            attrs["ignore_index"] = int(ignore_index)
        node = helper.make_node("SoftmaxCrossEntropyLoss", ["logits", "targets"], ["y"], **attrs)
        return graphs.model([node], [("logits", elem), ("targets", TensorProto.INT64)], [("y", elem)], 13)

    def _session(self, op: str, dtype: str, *key: Any) -> ort.InferenceSession:
        k = (op, dtype, *key)
        sess = self._sessions.get(k)
        if sess is None:
            sess = self._sessions[k] = graphs.session(self._build[op](ELEM[dtype], *key))
        return sess

    # ---- the contract ------------------------------------------------------------------------------------------

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        np_dtype = inputs[OPS[op].inputs[0]].dtype
        dtype = DTYPE_NAMES[np.dtype(np_dtype)]
        if op == "layer_norm":
            sess = self._session(op, dtype, params.get("eps"))
            return graphs.run(sess, dict(inputs), "y", np_dtype)
        if op == "rms_norm":
            sess = self._session(op, dtype, params.get("eps"))
            return graphs.run(sess, dict(inputs), "y", np_dtype)
        if op == "rope":
            return self._forward_rope(dtype, inputs, params)
        if op == "attention":
            return self._forward_attention(dtype, inputs, params)
        if op == "cross_entropy":
            sess = self._session(op, dtype, "none", None)
            return graphs.run(sess, dict(inputs), "y", np_dtype)
        if op == "cross_entropy_mean":
            sess = self._session(op, dtype, "mean", params.get("ignore_index", -100))
            return graphs.run(sess, dict(inputs), "y", np_dtype)
        raise KeyError(f"onnxruntime adapter: operation {op!r} is not declared")

    def _forward_rope(self, dtype: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        x, positions = inputs["x"], inputs["positions"]
        t, d = x.shape[-2], x.shape[-1]
        rd = d if params.get("rotary_dim") is None else int(params["rotary_dim"])
        cos, sin = rope_cache(positions, rd, float(params.get("base", 10000.0)))
        # the cache holds the rows of this call's positions; position_ids index them, as a model's would
        # x as (batch, 1 head, T, d): every leading row a batch entry, with its own row of position ids
        rows = x.reshape(-1, 1, t, d)
        feeds = {
            "x": rows,
            "cos": cos.astype(x.dtype),
            "sin": sin.astype(x.dtype),
            "position_ids": np.broadcast_to(np.arange(t, dtype=np.int64), (rows.shape[0], t)),
        }
        sess = self._session("rope", dtype, 0 if rd == d else rd)
        return graphs.run(sess, feeds, "y", x.dtype).reshape(x.shape)

    def _forward_attention(self, dtype: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        causal, lq, lk = bool(params.get("causal")), q.shape[2], k.shape[2]
        # bottom-right: the keys before the last L_q are the cache (past_key), as in decoding
        past = causal and lq < lk and self.cache_for_causal
        sess = self._session("attention", dtype, causal, params.get("softcap"), params.get("scale"), past)
        if not past:
            return graphs.run(sess, {"q": q, "k": k, "v": v}, "y", q.dtype)
        cut = lk - lq
        feeds = {"q": q, "k": k[:, :, cut:], "v": v[:, :, cut:], "past_key": k[:, :, :cut], "past_value": v[:, :, :cut]}
        return graphs.run(sess, feeds, "y", q.dtype)

    def vjp(
        self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any], cotangent: np.ndarray
    ) -> dict[str, np.ndarray]:
        raise NotImplementedError("ONNX Runtime inference has no gradients (every operation is declared grad=False)")


class OnnxRuntimeContribAdapter(OnnxRuntimeAdapter):
    """The built-in ``onnxruntime-contrib`` adapter: the operators ONNX Runtime's own exporters and transformer
    optimiser emit, outside the ONNX standard, on the CPU provider.

    * ``rms_norm`` — ``SimplifiedLayerNormalization`` (registered by onnxruntime in the default domain, the
      norm of exported LLaMA-style models before opset 23);
    * ``rope`` — ``com.microsoft.RotaryEmbedding`` on x viewed as (batch, 1, T, d) (``num_heads=1``, which it
      requires with ``rotary_embedding_dim``), ``position_ids`` indexing cos and sin caches in x's type,
      ``interleaved`` from the declared layout;
    * ``sliding_window_attention`` — ``com.microsoft.GroupQueryAttention`` with ``local_window_size`` W, as
      inference runtimes call it: q, k, v packed (B, L, H·D), ``num_heads``/``kv_num_heads`` for grouped KV heads,
      ``softcap`` and ``scale`` (always given: 1/√D of the call's D by default). The operator is causal with the
      new tokens last (query i is token i + past): with L_q < L_k the first L_k − L_q keys and values are its
      ``past_key``/``past_value`` (B, H_kv, past, D), ``seqlens_k`` = L_k − 1 and ``total_sequence_length`` = L_k,
      which is bottom-right; declared top-left, query i sees only keys ≤ i, so it runs on the first L_q keys alone.
      The CPU kernel takes head sizes that are multiples of 8 with v's equal to k's: q, k and v are zero-padded
      to a common multiple of 8 (exact: the zeros add nothing to q·k, and the padded output columns are dropped);
      it takes several new tokens after a past for one sequence only, so such a batch runs a sequence at a time.

    What W counts depends on the release (microsoft/onnxruntime#25927, ``gqa_window_counts``): measured on the CPU
    provider, 1.22.0 and 1.23.0 exclude the query's own token (p − j ≤ W), 1.24.1 and 1.32.0 include it
    (p − j < W); ``sliding_window`` is declared from ``onnxruntime.__version__``. The CPU kernel has no bfloat16
    implementation (NOT_IMPLEMENTED): float32 and float16. Float16 computes in float32 and rounds once.

    The contract's ``attention`` is not declared here: ``GroupQueryAttention`` is causal only (no attribute turns
    the mask off) and ``MultiHeadAttention`` has one head count for q, k and v (no grouped KV heads), so neither
    computes every case of it (non-causal GQA).
    """

    name = "onnxruntime-contrib"

    def __init__(self, device: str = "cpu", rope_layout: str = "half", causal_alignment: str = "bottom_right") -> None:
        super().__init__(device, rope_layout, causal_alignment)
        self.conventions = replace(
            self.conventions, unfused=frozenset({"rope"}), sliding_window=gqa_window_counts(ort.__version__)
        )
        self.capabilities = {
            # bfloat16 has a kernel here, unlike the standard RMSNormalization
            "rms_norm": Capability(dtypes=ALL, grad=False),
            "rope": Capability(dtypes=F32_F16, grad=False),
            # no bfloat16 GroupQueryAttention kernel on the CPU provider; softcap none and tanh
            "sliding_window_attention": Capability(dtypes=F32_F16, grad=False),
        }
        self._build = self._build | {
            "rms_norm": self._simplified_layer_norm,
            "rope": self._contrib_rope,
            "sliding_window_attention": self._group_query_attention,
        }

    def environment(self) -> dict[str, str]:
        operators = "SimplifiedLayerNormalization, com.microsoft.RotaryEmbedding, com.microsoft.GroupQueryAttention"
        return super().environment() | {"operators": operators}

    def forward(self, op: str, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        if op == "sliding_window_attention":
            return self._forward_window(inputs, params)
        return super().forward(op, inputs, params)

    def _simplified_layer_norm(self, elem: int, eps: float | None) -> bytes:
        node = helper.make_node("SimplifiedLayerNormalization", ["x", "weight"], ["y"], axis=-1, **self._eps(eps))
        return graphs.model([node], [("x", elem), ("weight", elem)], [("y", elem)], 17)

    def _contrib_rope(self, elem: int, rotary_dim: int) -> bytes:
        node = helper.make_node(
            "RotaryEmbedding",
            ["x", "position_ids", "cos", "sin"],
            ["y"],
            domain=graphs.MS_DOMAIN,
            num_heads=1,  # required with rotary_embedding_dim
            interleaved=int(self.interleaved),
            rotary_embedding_dim=rotary_dim,
        )
        ins = [("x", elem), ("position_ids", TensorProto.INT64), ("cos", elem), ("sin", elem)]
        return graphs.model([node], ins, [("y", elem)], 17, contrib=True)

    def _group_query_attention(
        self, elem: int, heads: int, kv_heads: int, window: int, softcap: float | None, scale: float, past: bool
    ) -> bytes:
        attrs: dict[str, Any] = {"num_heads": heads, "kv_num_heads": kv_heads, "local_window_size": window}
        attrs["scale"] = scale
        if softcap:
            attrs["softcap"] = float(softcap)
        cache = ["past_key", "past_value"] if past else ["", ""]
        names = ["q", "k", "v", *cache, "seqlens_k", "total_sequence_length"]
        outs = ["y", "present_key", "present_value"]
        node = helper.make_node("GroupQueryAttention", names, outs, domain=graphs.MS_DOMAIN, **attrs)
        ins = [(n, elem) for n in names[:5] if n] + [(n, TensorProto.INT32) for n in names[5:]]
        return graphs.model([node], ins, [(n, elem) for n in outs], 17, contrib=True)

    def _forward_window(self, inputs: Mapping[str, np.ndarray], params: Mapping[str, Any]) -> np.ndarray:
        q, k, v = inputs["q"], inputs["k"], inputs["v"]
        (b, hq, lq, d), (hkv, lk, dv) = q.shape, (k.shape[1], k.shape[2], v.shape[3])
        if lq > lk:
            raise NotImplementedError(f"GroupQueryAttention appends the queries to the keys: L_q {lq} > L_k {lk}")
        if not self.cache_for_causal:  # top-left: query i sees keys j ≤ i < L_q only
            k, v, lk = k[:, :, :lq], v[:, :, :lq], lq
        width = -(-max(d, dv) // 8) * 8  # the CPU kernel's head size: a multiple of 8, v's equal to k's
        q, k, v = pad_last(q, width), pad_last(k, width), pad_last(v, width)
        scale = float(d**-0.5 if params.get("scale") is None else params["scale"])
        cut = lk - lq
        dtype = DTYPE_NAMES[np.dtype(q.dtype)]
        key = (hq, hkv, int(params["window"]), params.get("softcap"), scale, cut > 0)
        sess = self._session("sliding_window_attention", dtype, *key)
        if b > 1 and lq > 1 and cut:
            # the CPU kernel takes several new tokens after a past for one sequence only ("batch_size must be 1
            # when sequence_length > 1 and past context is given"): each batch entry is its own call
            parts = [self._run_gqa(sess, q[i : i + 1], k[i : i + 1], v[i : i + 1], cut) for i in range(b)]
            return np.ascontiguousarray(np.concatenate(parts)[..., :dv])
        return np.ascontiguousarray(self._run_gqa(sess, q, k, v, cut)[..., :dv])

    @staticmethod
    def _run_gqa(sess: ort.InferenceSession, q: np.ndarray, k: np.ndarray, v: np.ndarray, cut: int) -> np.ndarray:
        """GroupQueryAttention of (B, H, L, D) q, k, v, the first ``cut`` keys and values as the past."""
        (b, hq, lq, width), lk = q.shape, k.shape[2]

        def packed(x: np.ndarray) -> np.ndarray:  # (B, H, L, D) → (B, L, H·D)
            return x.transpose(0, 2, 1, 3).reshape(x.shape[0], x.shape[2], -1)

        feeds = {
            "q": packed(q),
            "k": packed(k[:, :, cut:]),
            "v": packed(v[:, :, cut:]),
            "seqlens_k": np.full((b,), lk - 1, dtype=np.int32),
            "total_sequence_length": np.array(lk, dtype=np.int32),
        }
        if cut:
            feeds |= {"past_key": k[:, :, :cut], "past_value": v[:, :, :cut]}
        y = graphs.run(sess, feeds, "y", q.dtype)
        return y.reshape(b, lq, hq, width).transpose(0, 2, 1, 3)
