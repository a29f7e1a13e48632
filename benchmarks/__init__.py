"""Benchmarks: the performance report (``nox -s bench``) and the conformance-run timing (``nox -s bench-conformance``).

Never part of a conformance verdict, and no test asserts a timing.
"""
