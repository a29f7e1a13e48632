"""The performance report: each behaviour timed on each adapter's own framework tensors, placed against the
machine's measured copy bandwidth and matmul rate (docs/performance.md)."""
