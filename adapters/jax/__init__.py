"""JAX: ``jax.nn`` and plain jax.numpy."""
