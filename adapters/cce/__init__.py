"""Apple's Cut Cross-Entropy as candidates: ``cce`` (its Triton kernels) and ``cce-torch-compile``."""
