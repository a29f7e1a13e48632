"""MLX: ``mlx.core.fast`` kernels and ``mlx.nn`` on the CPU backend."""
