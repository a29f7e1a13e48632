"""The error model (``error_model``) and the error budget of every operation, one module per family of
operations, all registered in ``registry`` (``registry.FORWARD[op]``, ``registry.VJP[op]``):
docs/tolerance.md."""
