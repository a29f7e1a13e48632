"""Liger-Kernel's Triton kernels."""
