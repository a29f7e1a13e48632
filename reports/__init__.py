"""Reports a person reads: the conformance report (report.json, report.md)."""
