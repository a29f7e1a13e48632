"""flash-linear-attention's (``fla``) Triton kernels for the transformer building blocks: fused norms, rotary
embedding, SwiGLU, fused and fused-linear cross-entropy."""
