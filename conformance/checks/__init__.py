"""The checks: one pytest module per behaviour, each test a Hypothesis property citing its seed statement."""
