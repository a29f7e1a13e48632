"""The oracle as a candidate: NumPy float64 rounded once (a self-check of the suite)."""
