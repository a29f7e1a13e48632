"""Hypothesis strategies: the cases each family of checks draws (shapes, magnitudes, positions, parameters)."""
