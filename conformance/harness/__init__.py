"""What every check does with a candidate: the marker, calling it safely, comparing with the oracle in ulps
against the budget, the seeds' properties, error series and reproduction records."""
