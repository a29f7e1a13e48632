"""Triton without a GPU: its interpreter switched on before anything imports triton (``env``), and the
bridges Liger's kernels need under it (``interpreter_compat``)."""
