"""The Liger-Kernel built-in adapters load, declare what they do, pass a smoke subset, and are held to
their declarations: writing into inputs, the cast before the weight, the gradient kept from the forward."""

from __future__ import annotations

from dataclasses import replace
from importlib.util import find_spec

import numpy as np
import pytest

# not importorskip: importing triton or liger_kernel here, before the adapter module, would define their
# kernels for compilation, where the adapter needs Triton's interpreter on a machine without a GPU
if find_spec("liger_kernel") is None or find_spec("triton") is None:
    pytest.skip("liger-kernel and triton are not installed", allow_module_level=True)

from tests.adapter_smoke import case, outside_hypothesis, smoke
from transformer_conformance.adapters.registry import load_adapter
from transformer_conformance.conformance.harness.compare import CheckFailure, Record, call_op, check_forward, check_vjp
from transformer_conformance.conformance.strategies.common import Case, fill
from transformer_conformance.reference.formats import fmt


def _record(op: str) -> Record:
    return Record(op, op, "", "")


@pytest.mark.parametrize("name", ["liger", "liger-gemma", "liger-none"])
def test_smoke(name: str) -> None:
    adapter = load_adapter(name)
    assert adapter.name == name
    assert smoke(adapter, ("float32", "float16"))


def test_declarations() -> None:
    from transformer_conformance.adapters.liger import adapter as liger_adapter

    adapter = load_adapter("liger")
    conv = adapter.conventions
    assert conv.rope_layout == "half" and conv.norm_rounding == "before_weight"
    assert conv.eps_defaults == {"rms_norm": 1e-6, "layer_norm": 1e-6}
    assert conv.in_place_ops == {
        "rope",
        "cross_entropy",
        "cross_entropy_mean",
        "z_loss_mean",
        "rms_norm.vjp",
        "rope.vjp",
    }
    assert conv.grad_in_forward == {"cross_entropy", "cross_entropy_mean", "linear_cross_entropy"}
    assert conv.zero_when_all_ignored == {"linear_cross_entropy", "z_loss_mean"}
    caps = adapter.capabilities
    assert set(caps) == {
        "rms_norm",
        "layer_norm",
        "rope",
        "swiglu_mlp",
        "glu_mlp",
        "mlp",
        "cross_entropy",
        "cross_entropy_mean",
        "z_loss",
        "softcap_z_loss",
        "linear_cross_entropy",
        "z_loss_mean",
    }
    # Liger's products and activations: SiLU and tanh-GELU gates, squared ReLU
    assert caps["glu_mlp"].values == {"activation": {"silu", "gelu_tanh"}}
    assert caps["mlp"].values == {"activation": {"relu_squared"}}
    # Liger's z-loss has no gradient of its own
    assert not caps["z_loss"].grad and not caps["softcap_z_loss"].grad and not caps["z_loss_mean"].grad
    assert caps["linear_cross_entropy"].grad and caps["linear_cross_entropy"].values == {}
    bf16 = all("bfloat16" in c.dtypes for c in caps.values())
    assert bf16 == (not liger_adapter.INTERPRETED)  # the interpreter's bfloat16 arithmetic is not trusted
    env = adapter.environment()
    assert env["liger-kernel"] and env["triton"]
    assert ("interpreter" in env["triton mode"]) == liger_adapter.INTERPRETED
    gemma = load_adapter("liger-gemma").conventions
    assert gemma.norm_weight_offset == 1.0 and gemma.norm_rounding == "single"


def test_writes_into_inputs_only_where_declared() -> None:
    """Liger's cross-entropy stores the gradient in the logits and its RoPE rotates q in place when q's
    (batch, seq, heads, dim) view is contiguous: with the declaration removed the suite catches both; the
    SwiGLU kernel's backward writes into its own arguments, x·W₁ and x·W₃ — not the MLP's inputs."""
    adapter = load_adapter("liger")
    dtype = fmt("float32")
    ce = case("cross_entropy", dtype)
    rope = Case({"x": fill(dtype, (1, 4, 8), 1.0, 3), "positions": np.arange(4, dtype=np.int64)}, {"base": 1e4})
    with outside_hypothesis():
        check_vjp(adapter, "cross_entropy", ce, fill(dtype, (3,), 1.0, 5), dtype, _record("ce"))
        check_forward(adapter, "rope", rope, dtype, _record("rope"))
        mlp = case("swiglu_mlp", dtype)
        check_vjp(adapter, "swiglu_mlp", mlp, fill(dtype, (3, 8), 1.0, 9), dtype, _record("mlp"))
    adapter.conventions = replace(adapter.conventions, in_place_ops=frozenset())
    with outside_hypothesis():
        with pytest.raises(CheckFailure, match="modified its input logits without declaring cross_entropy in-place"):
            check_vjp(adapter, "cross_entropy", ce, fill(dtype, (3,), 1.0, 5), dtype, _record("ce"))
        with pytest.raises(CheckFailure, match="modified its input x without declaring rope in-place"):
            check_forward(adapter, "rope", rope, dtype, _record("rope"))
        check_vjp(adapter, "swiglu_mlp", mlp, fill(dtype, (3, 8), 1.0, 9), dtype, _record("mlp"))


@pytest.mark.parametrize("name", ["liger", "liger-gemma", "liger-none"])
def test_rms_norm_backward_writes_into_its_cotangent(name: str) -> None:
    """Liger's RMSNorm backward (in_place=True, its default) stores ∂L/∂x in the incoming ∂L/∂y and returns
    it, in every casting mode: declared (``rms_norm.vjp``), the gradients pass and the caller's cotangent is
    given back intact; undeclared, the suite reports the write."""
    adapter, dtype = load_adapter(name), fmt("float32")
    assert "rms_norm.vjp" in adapter.conventions.in_place_ops
    c = case("rms_norm", dtype)
    cot = fill(dtype, c.inputs["x"].shape, 1.0, 5)
    kept = cot.copy()
    with outside_hypothesis():
        check_vjp(adapter, "rms_norm", c, cot, dtype, _record("rms"))
    assert np.array_equal(cot, kept)
    adapter.conventions = replace(adapter.conventions, in_place_ops=adapter.conventions.in_place_ops - {"rms_norm.vjp"})
    undeclared = r"wrote into its cotangent without declaring rms_norm\.vjp"
    with outside_hypothesis(), pytest.raises(CheckFailure, match=undeclared):
        check_vjp(adapter, "rms_norm", c, cot, dtype, _record("rms"))
    assert np.array_equal(cot, kept)


def test_rope_backward_writes_into_its_cotangent_for_one_head() -> None:
    """Liger's RoPE backward rotates the gradient in place when its (batch, seq, heads, dim) view is
    contiguous (one head here): declared as ``rope.vjp``; undeclared, the write is reported."""
    adapter, dtype = load_adapter("liger"), fmt("float32")
    rope = Case({"x": fill(dtype, (1, 4, 8), 1.0, 3), "positions": np.arange(4, dtype=np.int64)}, {"base": 1e4})
    cot = fill(dtype, (1, 4, 8), 1.0, 5)
    with outside_hypothesis():
        check_vjp(adapter, "rope", rope, cot, dtype, _record("rope"))
    adapter.conventions = replace(adapter.conventions, in_place_ops=adapter.conventions.in_place_ops - {"rope.vjp"})
    undeclared = r"wrote into its cotangent without declaring rope\.vjp"
    with outside_hypothesis(), pytest.raises(CheckFailure, match=undeclared):
        check_vjp(adapter, "rope", rope, cot, dtype, _record("rope"))


def test_swiglu_kernel_backward_overwrites_its_arguments() -> None:
    """What Liger's SwiGLU does to its own arguments: after the backward, a and b hold ∂L/∂a and ∂L/∂b."""
    import torch
    from liger_kernel.transformers.functional import liger_swiglu

    a = torch.tensor([[0.5, -1.0, 2.0]], requires_grad=True)
    b = torch.tensor([[1.5, 0.25, -3.0]], requires_grad=True)
    before = a.detach().clone(), b.detach().clone()
    liger_swiglu(a, b).backward(torch.ones(1, 3))
    assert torch.equal(a.detach(), a.grad) and torch.equal(b.detach(), b.grad)  # type: ignore[arg-type]
    assert not torch.equal(a.detach(), before[0]) and not torch.equal(b.detach(), before[1])
    # through the contract (NumPy copies in, the adapter's own tensors): the caller's arrays are untouched
    adapter, dtype = load_adapter("liger"), fmt("float32")
    inputs = {"x": fill(dtype, (2, 4), 1.0, 1)} | {
        k: fill(dtype, s, 0.5, i) for i, (k, s) in enumerate([("w1", (4, 6)), ("w3", (4, 6)), ("w2", (6, 4))])
    }
    kept = {k: v.copy() for k, v in inputs.items()}
    call_op(adapter, "swiglu_mlp", inputs, {}, "liger.swiglu_mlp.vjp", fill(dtype, (2, 4), 1.0, 7))
    assert all(np.array_equal(inputs[k], kept[k]) for k in inputs)


def test_before_weight_is_enforced() -> None:
    """Liger's llama casting mode casts x·(1/RMS) to the input dtype before the weight: declared as a
    single rounding it fails in float16; as declared it passes."""
    adapter, dtype = load_adapter("liger"), fmt("float16")
    c = case("rms_norm", dtype, seed=0)
    with outside_hypothesis():
        check_forward(adapter, "rms_norm", c, dtype, _record("rms"))
    adapter.conventions = replace(adapter.conventions, norm_rounding="single")
    with outside_hypothesis(), pytest.raises(CheckFailure, match="should be"):
        check_forward(adapter, "rms_norm", c, dtype, _record("rms"))


def test_grad_in_forward_is_enforced() -> None:
    """Liger's cross-entropy keeps (softmax − onehot) in float16 and multiplies it by the cotangent
    afterwards: two roundings. Undeclared, the float16 gradient fails; declared, it passes (measured under
    the interpreter)."""
    from transformer_conformance.adapters.liger import adapter as liger_adapter

    if not liger_adapter.INTERPRETED:
        pytest.skip("the example is measured under the interpreter")
    adapter, dtype = load_adapter("liger"), fmt("float16")
    c = case("cross_entropy", dtype)
    cot = fill(dtype, (3,), 1.0, 99)
    with outside_hypothesis():
        check_vjp(adapter, "cross_entropy", c, cot, dtype, _record("ce"))
    adapter.conventions = replace(adapter.conventions, grad_in_forward=frozenset())
    with outside_hypothesis(), pytest.raises(CheckFailure, match="∂L/∂logits"):
        check_vjp(adapter, "cross_entropy", c, cot, dtype, _record("ce"))


def test_grad_in_forward_budget() -> None:
    """The declaration charges one rounding of ∂loss/∂u to the input dtype before the product with g."""
    from transformer_conformance.adapters.contract import Conventions
    from transformer_conformance.conformance.budgets import registry as budgets

    dtype = fmt("float16")
    c = case("cross_entropy", dtype)
    g = np.array([1.0, -2.0, 0.5])
    plain = budgets.VJP["cross_entropy"](c.inputs, {}, Conventions(), dtype, g)["logits"]
    stored = budgets.VJP["cross_entropy"](
        c.inputs, {}, Conventions(grad_in_forward=frozenset({"cross_entropy"})), dtype, g
    )
    extra = stored["logits"].e - plain.e
    assert np.all(extra >= 0.99 * dtype.unit_roundoff * np.abs(plain.v))


def test_exp_via_exp2_declared() -> None:
    """Liger's cross-entropy takes exp(t) as exp2(t·log₂e): declared, the budget of ∂L/∂logits at a
    probability of e^-27 (t = x − max ≈ −26.8) carries u·|t| more (relative), and Liger's gradient passes.
    Undeclared it passes too since the budget also charges the rounding of t = x − max itself (the
    log-softmax order): over 1500 random rows Liger used at most 0.77 of the undeclared budget
    (docs/adapters.md), so no example separates the two any more."""
    from transformer_conformance.conformance.budgets import registry as budgets

    adapter, dtype = load_adapter("liger"), fmt("float32")
    logits = np.array([[-31.239698, -50.746395, -36.141903, -4.456827, -39.593666]], dtype=np.float32)
    c = Case({"logits": logits, "targets": np.array([0])}, {})
    cot = np.array([1.0], dtype=np.float32)
    with outside_hypothesis():
        check_vjp(adapter, "cross_entropy", c, cot, dtype, _record("ce"))
    values = {"logits": logits.astype(np.float64), "targets": c.inputs["targets"]}
    undeclared = replace(adapter.conventions, exp_via_exp2=frozenset())
    with_exp2 = budgets.VJP["cross_entropy"](values, {}, adapter.conventions, dtype, cot.astype(np.float64))
    without = budgets.VJP["cross_entropy"](values, {}, undeclared, dtype, cot.astype(np.float64))
    p = np.exp(-26.782871)  # the probability of the target class, e^t
    extra = float(with_exp2["logits"].e[0, 0] - without["logits"].e[0, 0])
    assert extra == pytest.approx(dtype.unit_roundoff * 26.782871 * p, rel=0.05)


def test_exp_via_exp2_budget() -> None:
    """exp(t) through exp2(t·log₂e) is charged u_work·|t| more in the exponent: e^t·u·|t| to first order."""
    from transformer_conformance.conformance.budgets import error_model as em

    t = em.exact(np.array([-60.0, -1.0, 0.0]))
    plain = em.exp(em.Rounding(2.0**-24, 2.0**-24), t)
    base2 = em.exp(em.Rounding(2.0**-24, 2.0**-24, exp2=True), t)
    np.testing.assert_allclose(base2.e - plain.e, 2.0**-24 * np.abs(t.v) * np.exp(t.v), rtol=1e-5)


def test_fused_linear_cross_entropy_all_ignored_is_zero() -> None:
    """LigerFusedLinearCrossEntropy with every token ignored returns 0 (not NaN) and zero gradients, its
    z-loss term 0 too: declared ``zero_when_all_ignored``."""
    adapter, dtype = load_adapter("liger"), fmt("float32")
    c = case("linear_cross_entropy", dtype, choice="mean")
    c.inputs["targets"][:] = -100
    out = call_op(adapter, "linear_cross_entropy", c.inputs, c.params, "lce")
    assert out.shape == () and float(out) == 0.0
    grads = call_op(adapter, "linear_cross_entropy", c.inputs, c.params, "lce", np.asarray(np.float32(1.5)))
    assert all(not np.asarray(g).any() for g in grads.values())
    z = case("z_loss_mean", dtype)
    z.inputs["targets"][:] = -100
    assert float(call_op(adapter, "z_loss_mean", z.inputs, z.params, "z")) == 0.0


def test_release_switches_on_the_installed_release() -> None:
    """What the adapter does differently on older releases (docs/adapters.md, "Measured releases") is off on the
    release CI installs (0.8.5): keyword functional API, z-loss declared, norm gradients declared on the CPU."""
    from transformer_conformance.adapters.liger import adapter as liger_adapter

    assert not liger_adapter.POSITIONAL and liger_adapter.HAS_Z_LOSS
    assert not liger_adapter.NORM_BACKWARD_NEEDS_CUDA
    adapter = load_adapter("liger")
    assert adapter.device_limits == "" and "not on this device" not in adapter.environment()
    assert adapter.capabilities["rms_norm"].grad and adapter.capabilities["layer_norm"].grad
    assert {"z_loss", "softcap_z_loss", "z_loss_mean"} <= set(adapter.capabilities)
