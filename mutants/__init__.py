"""Defective implementations that the conformance suite must reject, and the runner that shows it does.

``mutants.catalogue`` holds the defects (each the torch adapter with one operation or one convention
wrong); ``mutants/run.py`` runs the suite against all of them; ``mutants/seeds.py`` runs the correct
built-in adapters under several Hypothesis seeds to show the checks raise no false alarm.
"""
