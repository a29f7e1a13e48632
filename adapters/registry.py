"""Finding adapters: built-in names, ``package.module:attr`` paths, and installed plugins."""

from __future__ import annotations

import importlib
import inspect
from importlib.metadata import entry_points

from transformer_conformance.adapters.contract import Adapter, ContractError, validate
from transformer_conformance.adapters.extras import EXTRAS  # noqa: F401 - re-exported: the extra each built-in adapter needs

#: Built-in adapters: name -> "module:factory".
BUILTIN: dict[str, str] = {
    "numpy": "transformer_conformance.adapters.numpy.adapter:NumpyAdapter",
    "torch": "transformer_conformance.adapters.torch.adapter:TorchAdapter",
    "torch-compile": "transformer_conformance.adapters.torch.compile:TorchCompileAdapter",
    "torch-compile-full": "transformer_conformance.adapters.torch.compile:TorchCompileFullAdapter",
    "torch-flex": "transformer_conformance.adapters.torch.flex:TorchFlexAdapter",
    "jax": "transformer_conformance.adapters.jax.adapter:JaxAdapter",
    "flax": "transformer_conformance.adapters.flax.adapter:FlaxLinenAdapter",
    "flax-nnx": "transformer_conformance.adapters.flax.adapter:FlaxNnxAdapter",
    "hf-llama": "transformer_conformance.adapters.hf.adapter:HFLlamaAdapter",
    "hf-gemma": "transformer_conformance.adapters.hf.adapter:HFGemmaAdapter",
    "hf-t5": "transformer_conformance.adapters.hf.adapter:HFT5Adapter",
    "hf-gpt-neox": "transformer_conformance.adapters.hf.families.models:HFGPTNeoXAdapter",
    "hf-cohere": "transformer_conformance.adapters.hf.families.models:HFCohereAdapter",
    "hf-phi3": "transformer_conformance.adapters.hf.families.models:HFPhi3Adapter",
    "hf-gemma2": "transformer_conformance.adapters.hf.families.models:HFGemma2Adapter",
    "hf-olmo2": "transformer_conformance.adapters.hf.families.models:HFOlmo2Adapter",
    "hf-qwen3": "transformer_conformance.adapters.hf.families.models:HFQwen3Adapter",
    "hf-mistral": "transformer_conformance.adapters.hf.families.models:HFMistralAdapter",
    "hf-gpt-oss": "transformer_conformance.adapters.hf.families.models:HFGptOssAdapter",
    "hf-llama4": "transformer_conformance.adapters.hf.families.models:HFLlama4Adapter",
    "hf-mixtral": "transformer_conformance.adapters.hf.families.moe:HFMixtralAdapter",
    "hf-qwen3-moe": "transformer_conformance.adapters.hf.families.moe:HFQwen3MoeAdapter",
    "hf-olmoe": "transformer_conformance.adapters.hf.families.moe:HFOlmoeAdapter",
    "hf-deepseek-v3": "transformer_conformance.adapters.hf.families.moe:HFDeepseekV3Adapter",
    "hf-switch-transformers": "transformer_conformance.adapters.hf.families.moe:HFSwitchTransformersAdapter",
    "hf-qwen2-vl": "transformer_conformance.adapters.hf.families.multimodal:HFQwen2VLAdapter",
    "hf-qwen3-vl": "transformer_conformance.adapters.hf.families.multimodal:HFQwen3VLAdapter",
    "liger": "transformer_conformance.adapters.liger.adapter:LigerAdapter",
    "liger-gemma": "transformer_conformance.adapters.liger.adapter:LigerGemmaAdapter",
    "liger-none": "transformer_conformance.adapters.liger.adapter:LigerNoneAdapter",
    "onnxruntime": "transformer_conformance.adapters.onnxruntime.adapter:OnnxRuntimeAdapter",
    "onnxruntime-contrib": "transformer_conformance.adapters.onnxruntime.adapter:OnnxRuntimeContribAdapter",
    "onnxruntime-export": "transformer_conformance.adapters.onnxruntime.export:OnnxRuntimeExportAdapter",
    "mlx": "transformer_conformance.adapters.mlx.adapter:MlxAdapter",
    "torchtune": "transformer_conformance.adapters.torchtune.adapter:TorchtuneAdapter",
    "keras-hub": "transformer_conformance.adapters.keras_hub.adapter:KerasHubAdapter",
    "equinox": "transformer_conformance.adapters.equinox.adapter:EquinoxAdapter",
    "cce": "transformer_conformance.adapters.cce.adapter:CCEAdapter",
    "cce-torch-compile": "transformer_conformance.adapters.cce.adapter:CCETorchCompileAdapter",
    "fla": "transformer_conformance.adapters.fla.adapter:FlaAdapter",
    "fla-interleaved": "transformer_conformance.adapters.fla.adapter:FlaInterleavedAdapter",
    "pallas": "transformer_conformance.adapters.pallas.adapter:PallasAdapter",
    "litgpt": "transformer_conformance.adapters.litgpt.adapter:LitgptAdapter",
    "megatron": "transformer_conformance.adapters.megatron.adapter:MegatronAdapter",
    "torchtitan": "transformer_conformance.adapters.torchtitan.adapter:TorchtitanAdapter",
    "vllm": "transformer_conformance.adapters.vllm.adapter:VllmAdapter",
    "vllm-deepseek": "transformer_conformance.adapters.vllm.adapter:VllmDeepseekAdapter",
    "unsloth": "transformer_conformance.adapters.unsloth.adapter:UnslothAdapter",
}


#: Names that stand for several built-in adapters: ``--adapter hf`` runs HF transformers' three RMSNorm
#: families (each model family ships its own norm, so each is an adapter of its own).
GROUPS: dict[str, tuple[str, ...]] = {
    "hf": ("hf-llama", "hf-gemma", "hf-t5"),
    # the model families of adapters/hf/families: a group of its own, so that ``--adapter hf`` keeps its length
    "hf-families": (
        "hf-gpt-neox",
        "hf-cohere",
        "hf-phi3",
        "hf-gemma2",
        "hf-olmo2",
        "hf-qwen3",
        "hf-mistral",
        "hf-gpt-oss",
        "hf-llama4",
        "hf-mixtral",
        "hf-qwen3-moe",
        "hf-olmoe",
        "hf-deepseek-v3",
        "hf-switch-transformers",
        "hf-qwen2-vl",
        "hf-qwen3-vl",
    ),
}


def expand(specs: list[str]) -> list[str]:
    """The adapter specs, each a name or a comma-separated list of them (as ``--adapter`` takes), with each group
    name replaced by its members."""
    names = [part.strip() for spec in specs for part in spec.split(",") if part.strip()]
    return [name for spec in names for name in GROUPS.get(spec, (spec,))]


#: Default adapters of a conformance run.
DEFAULT = ("numpy", "torch")

ENTRY_POINT_GROUP = "transformer_conformance.adapters"


class AdapterLoadError(Exception):
    """An adapter could not be found, imported or built; the message is one line."""


def _plugins() -> dict[str, str]:
    return {ep.name: ep.value for ep in entry_points(group=ENTRY_POINT_GROUP)}


def known_names() -> list[str]:
    return sorted(set(BUILTIN) | set(_plugins()))


def resolve(spec: str) -> str:
    """The ``package.module:attr`` an adapter spec names, importing nothing: a built-in or plugin name resolved, or
    the spec itself; an unknown name (no ``:``) is refused with the names there are."""
    target = BUILTIN.get(spec) or _plugins().get(spec)
    if target is not None:
        return target
    if ":" not in spec:
        plugins = sorted(_plugins())
        installed = f"; installed plugins: {', '.join(plugins)}" if plugins else ""
        raise AdapterLoadError(
            f"unknown adapter {spec!r}; built-in adapters: {', '.join(sorted(BUILTIN))}{installed}; "
            "or give package.module:attr"
        )
    return spec


def load_adapter(spec: str, device: str = "cpu") -> Adapter:
    """Build the adapter named by ``spec``: a built-in or plugin name, or ``package.module:attr``.

    ``attr`` may be an adapter object, or a class or function returning one (called with ``device=``
    when it accepts that keyword).
    """
    module_name, _, attr = resolve(spec).partition(":")
    try:
        module = importlib.import_module(module_name)
    except ContractError as exc:  # a release the adapter does not support (adapters/versions.py): its own line
        raise AdapterLoadError(f"adapter {spec!r}: {exc}") from None
    except Exception as exc:  # noqa: BLE001 - any import failure is reported the same way
        raise AdapterLoadError(
            f"adapter {spec!r}: cannot import {module_name!r}: {type(exc).__name__}: {exc}"
        ) from None
    try:
        obj = getattr(module, attr)
    except AttributeError:
        raise AdapterLoadError(f"adapter {spec!r}: module {module_name!r} has no attribute {attr!r}") from None
    if inspect.isclass(obj) or (callable(obj) and not hasattr(obj, "forward")):
        try:
            params = inspect.signature(obj).parameters
            obj = obj(device=device) if "device" in params else obj()
        except ContractError as exc:
            raise AdapterLoadError(f"adapter {spec!r}: {exc}") from None
        except Exception as exc:  # noqa: BLE001
            raise AdapterLoadError(f"adapter {spec!r}: building it failed: {type(exc).__name__}: {exc}") from None
    try:
        return validate(obj, f"adapter {spec!r}")
    except ContractError as exc:
        raise AdapterLoadError(str(exc)) from None


def import_path(spec: str) -> str:
    """The ``package.module:attr`` an adapter spec stands for (a built-in or plugin name resolved)."""
    return BUILTIN.get(spec) or _plugins().get(spec) or spec
