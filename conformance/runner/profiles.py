"""Hypothesis profiles of the suite: select one with pytest's ``--hypothesis-profile=NAME``.

* ``ci`` (the default) — derandomised: the same examples on every run and machine for the same code, so a
  gate's verdict depends only on the candidate. (Hypothesis also draws, now and then, constants found in the
  local modules loaded — the caller's repository, generated kernels: every profile here leaves those out,
  :func:`no_local_constants`.) Failures print the ``@reproduce_failure`` blob.
* ``dev`` — quick and random: a different sample each run, for local iteration.
* ``thorough`` — many more examples, random, for a release or a new kernel.
* ``ci-noshrink`` — ``ci`` without the shrink phase: the same examples and the same verdicts, the first
  failing example reported as found rather than minimised. For runs that only need verdicts, such as the
  mutant run (``mutants/run.py``), where shrinking costs most of the time.
* ``ci-random`` — ``ci``'s size (the same number of examples) but random: with ``--hypothesis-seed=K`` each K
  draws other examples. The no-false-alarm run (``mutants/seeds.py``) runs the correct adapters under many
  seeds with it: a correct candidate must pass whatever sample the default profile happens to draw.
* ``ci-random-noshrink`` — ``ci-random`` without the shrink phase: the mutant run under random seeds
  (``mutants/run.py --seeds N``), where a kill must not depend on the one sample ``ci`` draws.
"""

from __future__ import annotations

from hypothesis import HealthCheck, Phase, settings

COMMON = dict(
    deadline=None,
    print_blob=True,
    # one failure per check, shrunk: a candidate that fails several ways is reported by its first (the
    # others show once it is fixed), which keeps a failing run about as fast as a passing one
    report_multiple_bugs=False,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)

#: Hypothesis's phases less its explain phase (which reruns a failure many times to annotate it with lines of
#: the suite's own code, not the candidate's)
PHASES = [Phase.explicit, Phase.reuse, Phase.generate, Phase.target, Phase.shrink]
#: At most this many successful shrinks per failure: a deterministic bound, so that a failing check costs
#: about what a passing one does while its counterexample is still minimised (docs/report.md, "Shrinking")
MAX_SHRINKS = 20

settings.register_profile(
    "ci", derandomize=True, database=None, max_examples=40, phases=PHASES, **COMMON  # type: ignore[arg-type]
)
settings.register_profile(
    "ci-noshrink",
    derandomize=True,
    database=None,
    max_examples=40,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    **COMMON,  # type: ignore[arg-type]
)
settings.register_profile(
    "ci-random", database=None, max_examples=40, phases=PHASES, **COMMON  # type: ignore[arg-type]
)
settings.register_profile(
    "ci-random-noshrink",
    database=None,
    max_examples=40,
    phases=[Phase.explicit, Phase.reuse, Phase.generate, Phase.target],
    **COMMON,  # type: ignore[arg-type]
)
settings.register_profile("dev", max_examples=15, phases=PHASES, **COMMON)  # type: ignore[arg-type]
settings.register_profile("thorough", max_examples=400, phases=PHASES, **COMMON)  # type: ignore[arg-type]


def bound_shrinking() -> None:
    """Apply MAX_SHRINKS to Hypothesis's engine (a module constant of its own, 500 by default; left alone if a
    release renames it)."""
    from hypothesis.internal.conjecture import engine

    if isinstance(getattr(engine, "MAX_SHRINKS", None), int):
        engine.MAX_SHRINKS = MAX_SHRINKS


bound_shrinking()


def no_local_constants() -> None:
    """Draw without the constants of the caller's code. Hypothesis mixes into its draws the literals of every loaded
    module it takes for local (anything outside site-packages and the standard library): the caller's repository,
    the candidate's own modules, an editable install, the kernels a compiler generates under the temporary
    directory. Which of those are loaded depends on where the suite is run from and on what ran before in the
    process, so the sample, and the verdict, would too. The suite draws with Hypothesis's own constants only (left
    alone if a release renames what this replaces)."""
    from hypothesis.internal.conjecture import providers

    if callable(getattr(providers, "_get_local_constants", None)) and hasattr(providers, "Constants"):
        empty = providers.Constants()
        providers._get_local_constants = lambda: empty
        if hasattr(providers, "CONSTANTS_CACHE"):
            providers.CONSTANTS_CACHE.cache.clear()


no_local_constants()

DEFAULT_PROFILE = "ci"
PROFILES = ("ci", "dev", "thorough", "ci-noshrink", "ci-random", "ci-random-noshrink")
