"""The context vLLM's custom ops are built in, without an engine, on a machine without a GPU.

A ``CustomOp`` reads the current ``VllmConfig`` when it is constructed (``get_current_vllm_config()``; outside a
``set_current_vllm_config`` context it raises "Current vLLM config is not set"). vLLM's own op tests use a default
``VllmConfig()`` (the ``default_vllm_config`` fixture of its tests/conftest.py); on a machine without a GPU that
fails ("Failed to infer device type") unless the device is named, so the adapter builds every op inside
``set_current_vllm_config(VllmConfig(device_config=DeviceConfig(device="cpu")))``. vLLM's platform then stays
``UnspecifiedPlatform`` (no CUDA, ROCm, XPU or CPU build of vLLM detected), and every op's ``forward_native`` is
what the adapter calls. ``VLLM_TARGET_DEVICE=cpu`` (vLLM's CPU platform) is refused by the CUDA wheel on x86
without triton-cpu ("vLLM on x86 CPUs requires Triton (triton-cpu)."): the adapter does not set it.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from functools import cache

from vllm.config import DeviceConfig, VllmConfig, set_current_vllm_config


@cache
def cpu_config() -> VllmConfig:
    """The default configuration with the CPU named as the device."""
    return VllmConfig(device_config=DeviceConfig(device="cpu"))


@contextmanager
def building() -> Iterator[None]:
    """The context a custom op is constructed in (module docstring)."""
    with set_current_vllm_config(cpu_config()):
        yield
