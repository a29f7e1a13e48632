"""Unsloth's Triton kernels (``unsloth.kernels``: RMSNorm, LayerNorm, RoPE, cross-entropy, SwiGLU and GeGLU) under
Triton's interpreter on the CPU."""
