"""The pytest plugin behind ``nox -s conformance``: options, fixtures, verdicts and the report.

Options (after ``--`` in nox): ``--adapter NAME|package.module:attr`` (repeatable or comma-separated;
default: the built-in default adapters), ``--dtype`` (repeatable), ``--device``, ``--report-dir``,
``--expectations FILE`` (repeatable: known failures and skipped checks, conformance/runner/expectations.py).
Hypothesis's own ``--hypothesis-profile`` and ``--hypothesis-seed`` apply as usual.
"""

from __future__ import annotations

import functools
import json
import time
from collections.abc import Generator
from pathlib import Path
from typing import Any

import pytest
from hypothesis import settings
from hypothesis.errors import HypothesisException

from transformer_conformance.adapters.contract import AUTOCAST, Adapter, regime_dtype
from transformer_conformance.adapters.registry import (
    DEFAULT,
    AdapterLoadError,
    expand,
    import_path,
    load_adapter,
    resolve,
)
from transformer_conformance.adapters.triton.env import interpret_triton_without_cuda
from transformer_conformance.conformance.harness import autocast, compare, reach
from transformer_conformance.conformance.harness.compare import CheckFailure, Record
from transformer_conformance.conformance.harness.marks import BEHAVIOURS, UNSUPPORTED
from transformer_conformance.conformance.runner import counterexample, expectations, profiles
from transformer_conformance.conformance.runner.allocator import keep_freed_memory
from transformer_conformance.conformance.strategies import plan
from transformer_conformance.reference import SEEDS
from transformer_conformance.reference.formats import TESTED_DTYPES, Format, fmt

settings.load_profile(profiles.DEFAULT_PROFILE)

ADAPTERS_KEY = pytest.StashKey[list[Adapter]]()
SPECS_KEY = pytest.StashKey[dict[str, str]]()  # adapter name -> package.module:attr it was loaded from
RECORD_KEY = pytest.StashKey[Record]()
RESULTS_KEY = pytest.StashKey[dict[str, dict[str, Any]]]()
STARTED_KEY = pytest.StashKey[float]()
EXPECT_KEY = pytest.StashKey[list[expectations.Entry]]()
#: adapter name -> operation -> what its calls reached (conformance/harness/reach.py), merged in the controller
REACHED_KEY = pytest.StashKey[dict[str, dict[str, dict[str, Any]]]]()

EXPECTED_SKIP = "skipped by expectation: "
#: the skip message of a size regime an interpreted operation runs in another dtype (contract.regime_dtype)
INTERPRETED_REGIME = "run once: "
KNOWN = "known failure: "
SPEC = "spec"  # adapter column of checks that test the specification itself, not a candidate


def pytest_addoption(parser: pytest.Parser) -> None:
    group = parser.getgroup("conformance", "transformer building-block conformance")
    group.addoption(
        "--adapter",
        action="append",
        default=[],
        metavar="NAME",
        help="adapter to check: a built-in name, an installed plugin, or package.module:attr "
        f"(repeatable, comma-separated; default: {','.join(DEFAULT)})",
    )
    group.addoption(
        "--dtype",
        action="append",
        default=[],
        metavar="DTYPE",
        help=f"dtype or autocast mode to check (repeatable; default: all of {', '.join(DTYPES_AND_MODES)}); "
        "autocast-D runs the operations an adapter declares under autocast inside its autocast(D) context",
    )
    group.addoption(
        "--device", default="cpu", metavar="DEVICE", help="device for built-in adapters: cpu or cuda (default: cpu)"
    )
    group.addoption(
        "--example-timeout",
        type=float,
        default=60.0,
        metavar="SECONDS",
        help="a candidate call is stopped and fails as hung when it makes no progress for this long, or uses this "
        "much CPU time (ten times as much on an operation's first call); a busy machine does not count "
        "(default: 60; 0: never)",
    )
    group.addoption(
        "--behaviour",
        action="append",
        default=[],
        metavar="NAME",
        help="run only the checks of this behaviour (repeatable, comma-separated; e.g. rope, z_loss)",
    )
    group.addoption(
        "--perf-json",
        default=None,
        metavar="PATH",
        help="a performance run (perf.json of nox -s bench) to show in report.html (default: REPORT_DIR/bench/"
        "perf.json when it exists); never part of the verdict",
    )
    group.addoption(
        "--expectations",
        action="append",
        default=[],
        metavar="FILE",
        help="TOML file of the candidate's known failures and skipped checks (repeatable; docs/expectations.md): "
        "a known failure does not fail the run, a new one does",
    )
    group.addoption(
        "--report-dir",
        default="reports/out",
        metavar="DIR",
        help="where the report files (report.json, .md, .html, junit.xml, badge.svg) go (default: reports/out)",
    )


#: What ``--dtype`` takes: the dtypes under test and the autocast modes (conformance/harness/autocast.py).
DTYPES_AND_MODES = TESTED_DTYPES + autocast.MODES

#: The check modules (conformance/checks): the only tests a conformance run collects.
CHECKS_DIR = Path(__file__).resolve().parent.parent / "checks"


def _only_the_suites_checks(config: pytest.Config) -> None:
    """A path on the command line outside the suite's checks would have pytest collect it (and the conftest
    files around it): refuse it with one line rather than run something else."""
    for arg in config.args:
        path = Path(config.invocation_params.dir, arg.split("::", 1)[0]).resolve()
        if path != CHECKS_DIR and CHECKS_DIR not in path.parents:
            raise pytest.UsageError(
                f"{arg!r} is not one of the suite's check modules: choose checks with --behaviour, -k or a module "
                "name such as test_rmsnorm.py"
            )


def in_force() -> dict[str, Any]:
    """The Hypothesis settings every check runs under (the profile's, after the command line), for the report:
    a run is reproducible only with them, and a caller's configuration must not have changed them."""
    current = settings()  # the defaults in force: the loaded profile
    return {
        "max_examples": current.max_examples,
        "derandomize": current.derandomize,
        "phases": [phase.name for phase in current.phases],
        "deadline": None if current.deadline is None else current.deadline.total_seconds(),
    }


def _split(values: list[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "conformance(id, behaviour, prop, cites, op, grad): a conformance check")
    keep_freed_memory()  # in each process that runs checks (conformance/runner/allocator.py)
    for d in _split(config.getoption("dtype")):
        if d not in DTYPES_AND_MODES:
            raise pytest.UsageError(f"unknown dtype {d!r}; expected one of {', '.join(DTYPES_AND_MODES)}")
    if not hasattr(config, "workerinput"):
        _only_the_suites_checks(config)
    for b in _split(config.getoption("behaviour")):
        if b not in BEHAVIOURS:
            raise pytest.UsageError(f"unknown behaviour {b!r}; expected one of {', '.join(BEHAVIOURS)}")
    specs = expand(config.getoption("adapter")) or list(DEFAULT)
    for spec in specs:  # a mistyped name refused before anything is imported for the run
        try:
            resolve(spec)
        except AdapterLoadError as exc:
            raise pytest.UsageError(str(exc)) from None
    interpret_triton_without_cuda()  # before any adapter's library imports triton (adapters/triton/env.py)
    adapters: list[Adapter] = []
    for spec in specs:
        try:
            adapters.append(load_adapter(spec, device=config.getoption("device")))
        except AdapterLoadError as exc:
            raise pytest.UsageError(str(exc)) from None
    names = [a.name for a in adapters]
    dupes = sorted({n for n in names if names.count(n) > 1})
    if dupes:
        raise pytest.UsageError(f"two adapters share the name {dupes[0]!r}; each adapter needs its own name")
    compare.CALL_TIMEOUT = float(config.getoption("example_timeout"))
    entries: list[expectations.Entry] = []
    for name in config.getoption("expectations"):
        try:
            for path, shown in expectations.resolve(name, config.invocation_params.dir, [a.name for a in adapters]):
                entries += expectations.load(path, shown)
        except expectations.ExpectationError as exc:
            raise pytest.UsageError(str(exc)) from None
    config.stash[EXPECT_KEY] = entries
    config.stash[ADAPTERS_KEY] = adapters
    config.stash[SPECS_KEY] = {a.name: import_path(spec) for a, spec in zip(adapters, specs, strict=True)}
    config.stash[RESULTS_KEY] = {}
    config.stash[REACHED_KEY] = {}
    config.stash[STARTED_KEY] = time.time()
    report_dir = Path(config.getoption("report_dir"))
    if not hasattr(config, "workerinput"):
        try:
            report_dir.mkdir(parents=True, exist_ok=True)
            probe = report_dir / ".write-test"
            probe.write_text("")
            probe.unlink()
        except OSError as exc:
            raise pytest.UsageError(f"cannot write the report to {str(report_dir)!r}: {exc.strerror or exc}") from None
        config.stash[PERF_KEY] = _perf_run(config.getoption("perf_json"), report_dir)


PERF_KEY = pytest.StashKey[tuple[dict[str, Any] | None, str]]()  # (performance run, a note on it)


def _perf_run(option: str | None, report_dir: Path) -> tuple[dict[str, Any] | None, str]:
    """The performance run report.html shows: ``--perf-json`` (a usage error if unreadable), else the
    ``bench/perf.json`` of the report directory if there is one (passed over, with a note, if unreadable)."""
    from transformer_conformance.reports import perf_run

    path = Path(option) if option else report_dir / "bench" / "perf.json"
    if not option and not path.is_file():
        return None, ""
    try:
        return perf_run.load(path), f"performance run shown: {path}"
    except perf_run.PerfRunError as exc:
        if option:
            raise pytest.UsageError(f"--perf-json: {exc}") from None
        return None, f"performance run not shown: {exc}"


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "adapter" in metafunc.fixturenames:
        adapters = metafunc.config.stash[ADAPTERS_KEY]
        metafunc.parametrize("adapter", adapters, ids=[a.name for a in adapters], scope="session")
    if "dtype" in metafunc.fixturenames:
        names = _split(metafunc.config.getoption("dtype")) or list(DTYPES_AND_MODES)
        marker = metafunc.definition.get_closest_marker("conformance")
        op = marker.kwargs.get("op") if marker else None
        # an autocast mode is a column of the checks of the operations it is defined for (adapters.AUTOCAST),
        # but for those marked autocast=False (the size regimes)
        in_modes = op in AUTOCAST and (marker is None or marker.kwargs.get("autocast", True))
        formats: list[Format] = [
            autocast.mode_format(n, str(op)) if n in autocast.MODES else fmt(n)
            for n in names
            if n not in autocast.MODES or in_modes
        ]
        metafunc.parametrize("dtype", formats, ids=[autocast.label(f) for f in formats], scope="session")


@pytest.hookimpl(optionalhook=True)
def pytest_xdist_make_scheduler(config: pytest.Config, log: Any) -> Any:
    """``--dist loadgroup`` (the runner's default): the checks of one program in one worker (scheduling.py)."""
    if config.getvalue("dist") != "loadgroup":
        return None
    from transformer_conformance.conformance.runner.scheduling import ProgramScheduling

    return ProgramScheduling(config, log)


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    """With ``--behaviour``, deselect the checks of every other behaviour."""
    wanted = set(_split(config.getoption("behaviour")))
    if not wanted:
        return
    keep = [i for i in items if _marker(i).get("behaviour") in wanted]
    dropped = [i for i in items if _marker(i).get("behaviour") not in wanted]
    if dropped:
        config.hook.pytest_deselected(items=dropped)
        items[:] = keep


def _marker(item: pytest.Item) -> dict[str, Any]:
    m = item.get_closest_marker("conformance")
    return dict(m.kwargs) if m else {}


@pytest.fixture
def record(request: pytest.FixtureRequest) -> Record:
    meta = _marker(request.node)
    rec = Record(
        meta.get("id", request.node.name), meta.get("behaviour", ""), meta.get("prop", ""), meta.get("cites", "")
    )
    request.node.stash[RECORD_KEY] = rec
    return rec


@pytest.fixture(autouse=True)
def declared_support(request: pytest.FixtureRequest) -> None:
    """Skip, as *unsupported*, a check whose operation, dtype or gradient the adapter does not declare."""
    meta = _marker(request.node)
    op = meta.get("op")
    if op is None or "adapter" not in request.fixturenames:
        return
    adapter: Adapter = request.getfixturevalue("adapter")
    cap = adapter.capabilities.get(op)
    if cap is None:
        pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare {op}")
    if "dtype" in request.fixturenames:
        dtype: Format = request.getfixturevalue("dtype")
        low = autocast.autocast_dtype(dtype)
        if low is not None and low not in getattr(cap, "autocast", frozenset()):
            pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare {op} under autocast in {low}")
        if low is None and dtype.name not in cap.dtypes:
            pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare {op} in {dtype.name}")
        once = regime_dtype(cap) if meta.get("regime") else None
        if once is not None and dtype.name != once:
            pytest.skip(f"{INTERPRETED_REGIME}{adapter.name} runs {op} in an interpreter: its size regimes in {once}")
    if meta.get("grad") and not cap.grad:
        pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare gradients of {op}")
    for key, values in meta.get("choices", {}).items():
        kept = cap.declared(key, tuple(values))
        if not kept:
            pytest.skip(f"{UNSUPPORTED}{adapter.name} does not declare {op} with {key} {' or '.join(values)}")
        left = [v for v in values if v not in kept]
        if left and "record" in request.fixturenames:
            record: Record = request.getfixturevalue("record")
            record.extra.setdefault("not_declared", {})[key] = left


@pytest.fixture(autouse=True)
def shape_plan(request: pytest.FixtureRequest, declared_support: None) -> Generator[None, None, None]:
    """A check of an operation the adapter declares ``compiles="per_shape"`` draws its shapes from the plan
    (conformance/strategies/plan.py), one declared ``"per_value"`` its shapes and the structural values they state:
    each program is built once and checked many times."""
    op = _marker(request.node).get("op")
    if op is None or "adapter" not in request.fixturenames:
        yield
        return
    cap = request.getfixturevalue("adapter").capabilities.get(op)
    with plan.planned(getattr(cap, "compiles", "no")):
        yield


@pytest.fixture(autouse=True)
def autocast_mode(request: pytest.FixtureRequest, declared_support: None) -> Generator[None, None, None]:
    """A check of an autocast mode calls its candidate inside the adapter's autocast context."""
    if "adapter" not in request.fixturenames or "dtype" not in request.fixturenames:
        yield
        return
    with autocast.active(request.getfixturevalue("adapter"), request.getfixturevalue("dtype")):
        yield


def _expectation(item: pytest.Item, meta: dict[str, Any]) -> expectations.Entry | None:
    """The expectation entry that decides this check's verdict, if any (checks of the specification itself,
    which take no adapter, have none)."""
    params = getattr(item, "callspec", None)
    adapter = params.params.get("adapter") if params else None
    if adapter is None or not meta:
        return None
    dtype = params.params.get("dtype") if params else None
    entries: list[expectations.Entry] = item.config.stash[EXPECT_KEY]
    label = autocast.label(dtype) if dtype else None
    return expectations.decide(entries, meta["id"], meta["behaviour"], adapter.name, label)


@pytest.fixture(autouse=True)
def expected_skip(request: pytest.FixtureRequest, declared_support: None) -> None:
    """Skip, without running it, a check an expectation entry says to skip (after the support check: what
    the adapter does not declare is reported unsupported)."""
    entry = _expectation(request.node, _marker(request.node))
    if entry is not None and entry.status == expectations.SKIP:
        pytest.skip(f"{EXPECTED_SKIP}{entry.reason}")


@pytest.hookimpl(tryfirst=True)
def pytest_runtest_call(item: pytest.Item) -> None:
    """Count the examples a Hypothesis check runs and note the index of the first that fails, through
    the wrapper hook Hypothesis offers plugins (``test.hypothesis.inner_test``)."""
    handle = getattr(getattr(item, "obj", None), "hypothesis", None)
    rec = item.stash.get(RECORD_KEY, None)
    if handle is None or rec is None or getattr(handle.inner_test, "_counts_examples", False):
        return
    inner = handle.inner_test

    @functools.wraps(inner)
    def counted(*args: Any, **kwargs: Any) -> Any:
        r = kwargs.get("record")
        if not isinstance(r, Record):
            return inner(*args, **kwargs)
        r.calls += 1
        try:
            return inner(*args, **kwargs)
        except HypothesisException:
            raise  # Hypothesis's own control flow (an unsatisfied assumption), not a failure
        except Exception:
            if r.first_failure is None:
                r.first_failure = r.calls
            raise

    counted._counts_examples = True  # type: ignore[attr-defined]
    handle.inner_test = counted


def _failure(call: pytest.CallInfo[None]) -> dict[str, Any]:
    exc = call.excinfo.value if call.excinfo else None
    if exc is None:
        return {}
    leaves = _leaves(exc)
    verdict = all(isinstance(e, CheckFailure) for e in leaves)
    notes = [n for e in [exc, *leaves] for n in getattr(e, "__notes__", []) if n.strip()]
    first = leaves[0]
    message = str(first).strip() if isinstance(first, CheckFailure) else f"{type(first).__name__}: {str(first).strip()}"
    if len(leaves) > 1:
        message += (
            f"\n(and {len(leaves) - 1} more distinct failure{'s' if len(leaves) > 2 else ''}: "
            + "; ".join(str(e).strip().splitlines()[0] for e in leaves[1:4])
            + ")"
        )
    return {"message": message, "counterexample": counterexample.readable(notes), "verdict": verdict}


def _messages(call: pytest.CallInfo[None]) -> list[str]:
    """The message of each distinct failure a check found (an expectation's ``match`` is searched in each)."""
    return [str(e) for e in _leaves(call.excinfo.value)] if call.excinfo else []


def _leaves(exc: BaseException) -> list[BaseException]:
    """The individual failures inside Hypothesis's groups of distinct (or flaky) failures."""
    if isinstance(exc, BaseExceptionGroup):
        return [leaf for e in exc.exceptions for leaf in _leaves(e)]
    return [exc]


@pytest.hookimpl(wrapper=True)
def pytest_runtest_makereport(
    item: pytest.Item, call: pytest.CallInfo[None]
) -> Generator[None, pytest.TestReport, pytest.TestReport]:
    rep = yield
    meta = _marker(item)
    if not meta:
        return rep
    params = getattr(item, "callspec", None)
    adapter = params.params.get("adapter") if params else None
    dtype = params.params.get("dtype") if params else None
    payload: dict[str, Any] = {
        "check": meta["id"],
        "behaviour": meta["behaviour"],
        "property": meta["prop"],
        "cites": meta["cites"],
        "adapter": adapter.name if adapter is not None else SPEC,
        "dtype": autocast.label(dtype) if dtype is not None else None,
        "phase": rep.when,
    }
    rec = item.stash.get(RECORD_KEY, None)
    if rep.when == "call":
        noted = reach.drain()
        if noted and adapter is not None:
            payload["reached"] = noted
    if rec is not None and rep.when == "call":
        if adapter is not None:
            where = {
                "name": adapter.name,
                "spec": item.config.stash[SPECS_KEY].get(adapter.name, ""),
                "device": item.config.getoption("device"),
            }
            for stored in (rec.extra.get("repro"), rec.extra.get("worst", {}).get("repro")):
                if isinstance(stored, dict):
                    stored["adapter"] = where
        payload.update(
            examples=rec.examples,
            max_ulp=rec.max_ulp,
            budget_used=rec.budget_used,
            **({"margin": rec.margin} if rec.margin is not None else {}),
            worst=rec.worst,
            **({"first_failure": rec.first_failure} if rec.first_failure is not None else {}),
            **({"extra": rec.extra} if rec.extra else {}),
            **({"series": [s.to_json() for s in rec.series.values()]} if rec.series else {}),
        )
    if rep.failed:
        payload.update(_failure(call))
    if rep.skipped and isinstance(rep.longrepr, tuple):
        payload["message"] = str(rep.longrepr[2]).removeprefix("Skipped: ")
    entry = _expectation(item, meta) if rep.when == "call" else None
    if entry is not None and entry.status == expectations.FAIL:
        # pytest's own xfail outcome, so that the exit status, the terminal and junit read it as expected
        if rep.failed and payload.get("verdict") and entry.describes(_messages(call)):
            rep.outcome = "skipped"
            rep.wasxfail = f"{KNOWN}{entry.reason}"
            payload["known"] = True
        elif rep.failed and payload.get("verdict"):  # a failure, but not the one the entry lists: a new failure
            payload["message"] += "\n" + expectations.unlisted(entry.ref())
            payload["unlisted"] = True
        elif rep.passed and not entry.sometimes:  # "sometimes": a sample that misses the failure passes, as expected
            rep.wasxfail = f"expected to fail ({entry.reason}), but passed"
    rep.user_properties.append(("conformance", json.dumps(payload, default=str)))
    return rep


@pytest.hookimpl(wrapper=True)  # before pytest counts the report: a known crash must not count as a failure
def pytest_runtest_logreport(report: pytest.TestReport) -> Generator[None, None, None]:
    """Runs in the controller (also under xdist): fold each phase's payload into one result per check."""
    _fold(report)
    return (yield)


def _fold(report: pytest.TestReport) -> None:
    config = _CONFIG.get("config")
    if config is None:
        return
    results = config.stash[RESULTS_KEY]
    if report.failed and report.nodeid in results and not any(k == "conformance" for k, _ in report.user_properties):
        # pytest-xdist's report for a worker that died mid-check: the candidate ended its own process
        r = results[report.nodeid]
        r["status"] = "failed"
        r["duration_s"] += report.duration
        first = str(report.longrepr).strip().splitlines()[0] if report.longrepr else ""
        r.setdefault("message", f"the candidate ended the process running this check (crash, abort or exit): {first}")
        expected = r.get("expectation")
        if expected and expected["status"] == expectations.FAIL:
            if expectations.describes(expected.get("match"), [r["message"]]):
                r["status"] = "known_failure"
                report.outcome = "skipped"
                report.wasxfail = f"{KNOWN}{expected['reason']}"  # type: ignore[attr-defined]
            else:  # not the failure the entry lists
                r["message"] += "\n" + expectations.unlisted(expected)
                r.pop("expectation")
        return
    for key, value in report.user_properties:
        if key != "conformance":
            continue
        p = json.loads(str(value))
        if "reached" in p:
            reach.merge(config.stash[REACHED_KEY].setdefault(p["adapter"], {}), p["reached"])
        r = results.setdefault(
            report.nodeid,
            {
                "nodeid": report.nodeid,
                **{k: p[k] for k in ("check", "behaviour", "property", "cites", "adapter", "dtype")},
                "status": "passed",
                "duration_s": 0.0,
            },
        )
        if p["adapter"] != SPEC and "expectation" not in r and r["status"] != "failed":
            entries: list[expectations.Entry] = config.stash[EXPECT_KEY]
            entry = expectations.decide(entries, p["check"], p["behaviour"], p["adapter"], p["dtype"])
            if entry is not None:
                r["expectation"] = entry.ref()
        r["duration_s"] += report.duration
        for k in ("examples", "max_ulp", "budget_used", "margin", "worst", "extra", "first_failure", "series"):
            if k in p:
                r[k] = p[k]
        if p.get("known"):
            r["status"] = "known_failure"
            r["message"] = p.get("message", "")
            if p.get("counterexample"):
                r["counterexample"] = p["counterexample"]
        elif report.skipped:
            msg = p.get("message", "")
            r["status"] = "unsupported" if msg.startswith(UNSUPPORTED) else "skipped"
            r["message"] = msg.removeprefix(UNSUPPORTED).removeprefix(EXPECTED_SKIP).removeprefix(INTERPRETED_REGIME)
            if r["status"] == "unsupported":  # not the candidate's to expect anything of
                r.pop("expectation", None)
        elif report.passed and hasattr(report, "wasxfail") and r["status"] == "passed":
            r["status"] = "unexpectedly_passed"
        elif report.failed:
            verdict = p.get("verdict", False) and p["phase"] == "call"
            if p.get("unlisted"):  # the entry's match is not in this failure: it decides nothing here
                r.pop("expectation", None)
            if r["status"] != "failed":
                r["status"] = "failed" if verdict else "error"
            r.setdefault("message", p.get("message", ""))
            if p.get("counterexample"):
                r.setdefault("counterexample", p["counterexample"])


_CONFIG: dict[str, pytest.Config] = {}


@pytest.hookimpl(tryfirst=True)
def pytest_sessionstart(session: pytest.Session) -> None:
    _CONFIG["config"] = session.config


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    config = session.config
    if hasattr(config, "workerinput") or RESULTS_KEY not in config.stash:
        return
    from transformer_conformance.reports.writer import write_reports

    results = list(config.stash[RESULTS_KEY].values())
    entries = config.stash[EXPECT_KEY]
    counts = expectations.matched_counts(entries, [r for r in results if r["adapter"] != SPEC])
    by_ref = {(e.file, e.index): e for e in entries}
    for r in results:
        if r["status"] == "unexpectedly_passed":
            ref = r["expectation"]
            expectations.warn(
                by_ref[(ref["file"], ref["entry"])],
                f"{r['adapter']} {r['check']} [{r['dtype'] or '-'}] unexpectedly passed: {ref['file']} entry "
                f"{ref['entry']} expects it to fail ({ref['reason']}); remove the entry if the defect is fixed",
            )
    unmatched = [e for e, n in zip(entries, counts, strict=True) if n == 0]
    config.stash[UNMATCHED_KEY] = unmatched
    for entry in unmatched:
        expectations.warn(entry, f"{entry.label()} matches no check in this run")
    unchecked = [a.name for a in config.stash[ADAPTERS_KEY] if not any(_executed(r, a.name) for r in results)]
    if unchecked and int(exitstatus) == int(pytest.ExitCode.OK):
        # nothing of some candidate was checked: a gate must not pass on it (docs/report.md, "Verdicts")
        session.exitstatus = exitstatus = pytest.ExitCode.NO_TESTS_COLLECTED
    config.stash[UNCHECKED_KEY] = unchecked
    capabilities = {a.name: a.capabilities for a in config.stash[ADAPTERS_KEY]}
    paths = write_reports(
        Path(config.getoption("report_dir")),
        results=results,
        adapters=config.stash[ADAPTERS_KEY],
        specs=config.stash[SPECS_KEY],
        profile=settings._current_profile or profiles.DEFAULT_PROFILE,
        hypothesis_settings=in_force(),
        seeds=SEEDS,
        seed=config.getoption("hypothesis_seed", None),
        started=config.stash[STARTED_KEY],
        exitstatus=int(exitstatus),
        unchecked=unchecked,
        perf=config.stash.get(PERF_KEY, (None, ""))[0],
        reached={
            name: reach.summary(ops, capabilities.get(name)) for name, ops in sorted(config.stash[REACHED_KEY].items())
        },
        expectations={
            "files": list(config.getoption("expectations")),
            "entries": [e.to_json(n) for e, n in zip(entries, counts, strict=True)],
        },
    )
    config.stash[REPORT_PATHS_KEY] = paths


REPORT_PATHS_KEY = pytest.StashKey[list[Path]]()
UNCHECKED_KEY = pytest.StashKey[list[str]]()
#: statuses of a check that ran against the candidate (whatever its outcome)
EXECUTED = frozenset({"passed", "failed", "error", "known_failure", "unexpectedly_passed"})


def _executed(result: dict[str, Any], adapter: str) -> bool:
    return result["adapter"] == adapter and result["status"] in EXECUTED


UNMATCHED_KEY = pytest.StashKey[list[expectations.Entry]]()


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    results = config.stash.get(RESULTS_KEY, {}).values()
    known = sum(r["status"] == "known_failure" for r in results)
    surprises = [r for r in results if r["status"] == "unexpectedly_passed"]
    if config.getoption("expectations", None) and not hasattr(config, "workerinput"):
        terminalreporter.write_sep("-", "conformance expectations")
        terminalreporter.write_line(f"  {known} known failure(s): not counted against the run")
        for r in surprises:
            terminalreporter.write_line(
                f"  UNEXPECTEDLY PASSED: {r['adapter']} {r['check']} [{r['dtype'] or '-'}] "
                f"({r['expectation']['file']} entry {r['expectation']['entry']})",
                yellow=True,
                bold=True,
            )
        for e in config.stash.get(UNMATCHED_KEY, []):
            terminalreporter.write_line(f"  matches no check: {e.label()}", yellow=True)
    unchecked = config.stash.get(UNCHECKED_KEY, [])
    if unchecked and not hasattr(config, "workerinput"):
        terminalreporter.write_sep("-", "nothing checked", red=True)
        for name in unchecked:
            terminalreporter.write_line(
                f"  no check of {name} ran (every check unsupported, deselected or skipped): nothing was verified",
                red=True,
                bold=True,
            )
    paths = config.stash.get(REPORT_PATHS_KEY, None)
    if paths:
        terminalreporter.write_sep("-", "conformance report")
        for p in paths:
            terminalreporter.write_line(f"  {p}")
        note = config.stash.get(PERF_KEY, (None, ""))[1]
        if note:
            terminalreporter.write_line(f"  ({note})")
