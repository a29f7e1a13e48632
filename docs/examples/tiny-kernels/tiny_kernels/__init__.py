"""tiny-kernels: an RMSNorm and a RoPE written in plain PyTorch."""

from tiny_kernels.norms import RMSNorm, apply_rope, rms_norm

__version__ = "0.1.0"
__all__ = ["RMSNorm", "apply_rope", "rms_norm"]
