"""Hypothesis-driven conformance checks: agreement with the oracle and the seeds' properties."""
