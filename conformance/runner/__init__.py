"""Running the checks: the pytest plugin (options, verdicts, the report), the CLI, the Hypothesis profiles and
the expectation files."""
