"""The pytest plugin behind ``nox -s bench``: options, the benchmark cases, timing, and the report.

Each ``benchmarks/test_perf_<behaviour>.py`` test is marked ``perf_op(name)`` and is parametrised here
into one case per size × dtype × adapter × pass (forward, forward+backward). A case asks the adapter's
optional ``native`` hook (docs/adapter-contract.md) for a closure over its own framework tensors and times
that closure — never the NumPy conversion of the contract. Cases run ordered by dtype, then size (the
seeds' shape first), then operation, so a run cut short by ``--perf-budget`` has the most telling cases.

Options: ``--quick``, ``--perf-adapter NAME`` (repeatable or comma-separated; default: every known adapter
that loads and has ``native``), ``--perf-dtype``, ``--perf-device cpu|cuda``, ``--perf-out DIR``,
``--perf-max-time S``, ``--perf-min-rounds N``, ``--perf-budget S``, ``--compare BASELINE.json``,
``--min-relative F``, ``--fail-on-regression``. pytest-benchmark's own options (``--benchmark-json``,
``--benchmark-timer``, ...) apply as usual.
"""

from __future__ import annotations

import datetime as dt
import os
import platform
import statistics
import sys
import threading
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NoReturn

import numpy as np
import pytest

from benchmarks.perf import ceilings as ceil
from benchmarks.perf import verify
from benchmarks.perf.accounting import OPS, BenchOp, pass_name
from benchmarks.perf.compare import MIN_RELATIVE, compare
from benchmarks.perf.inputs import make_inputs
from benchmarks.perf.markdown import signed_pct
from benchmarks.perf.report import load, write
from benchmarks.perf.results import SCHEMA, SCHEMA_VERSION, add_ratios, make_result
from benchmarks.perf.sizes import sizes
from benchmarks.perf.timing import CudaSampler, Stats, cpu_sample, rounds_for, wait
from transformer_conformance.adapters.contract import DTYPES, Adapter
from transformer_conformance.adapters.registry import AdapterLoadError, known_names, load_adapter
from transformer_conformance.adapters.triton.env import interpret_triton_without_cuda

RUN_KEY = pytest.StashKey["PerfRun"]()
PATHS_KEY = pytest.StashKey[dict[str, Path]]()
REPORT_KEY = pytest.StashKey[dict[str, Any]]()
DTYPE_ORDER = ("bfloat16", "float16", "float32")
DEFAULT_OUT = "reports/out/bench"


@dataclass(frozen=True)
class Case:
    op: str
    size_index: int
    dims: dict[str, int]
    dtype: str
    adapter: str
    grad: bool

    @property
    def id(self) -> str:
        size = OPS[self.op].label(self.dims).replace("×", "x").replace("→", "-")
        return f"{self.adapter}-{self.dtype}-{size}-{'fwdbwd' if self.grad else 'fwd'}"


def _is_torch(result: Any) -> bool:
    """Whether a native closure returned torch tensors (its work then runs on torch's CUDA stream)."""
    items = result if isinstance(result, tuple | list) else (result,)
    return bool(items) and all(type(r).__module__.split(".")[0] == "torch" for r in items)


def _split(values: list[str]) -> list[str]:
    return [v.strip() for item in values for v in item.split(",") if v.strip()]


def pytest_addoption(parser: pytest.Parser) -> None:
    g = parser.getgroup("perf", "performance report (benchmarks/)")
    g.addoption("--quick", action="store_true", help="the reduced set: small sizes, a few minutes on a 2-core CPU")
    g.addoption(
        "--perf-adapter",
        action="append",
        default=[],
        metavar="NAME",
        help="adapter to benchmark: a built-in name, a plugin, or package.module:attr (repeatable, comma-separated; "
        "default: every known adapter that loads and has a native() hook)",
    )
    g.addoption(
        "--perf-dtype", action="append", default=[], metavar="DTYPE", help=f"dtype(s) (default: all of {DTYPES})"
    )
    g.addoption("--perf-device", default="cpu", help="device for built-in adapters: cpu or cuda (default: cpu)")
    g.addoption("--perf-out", default=DEFAULT_OUT, metavar="DIR", help=f"report directory (default: {DEFAULT_OUT})")
    g.addoption(
        "--perf-max-time",
        type=float,
        default=None,
        metavar="S",
        help="seconds of timed rounds per case, after warm-up (default: 0.2 quick, 1.0 full)",
    )
    g.addoption("--perf-min-rounds", type=int, default=5, metavar="N", help="fewest timed rounds per case (default: 5)")
    g.addoption(
        "--perf-budget", type=float, default=None, metavar="S", help="skip the cases that would start after S seconds"
    )
    g.addoption("--compare", default=None, metavar="BASELINE.json", help="flag regressions against a saved perf.json")
    g.addoption(
        "--min-relative",
        type=float,
        default=MIN_RELATIVE,
        metavar="F",
        help=f"smallest relative change of the median flagged by --compare (default: {MIN_RELATIVE})",
    )
    g.addoption("--fail-on-regression", action="store_true", help="exit status 1 when --compare finds a regression")


class PerfRun:
    """Everything one benchmark session shares: adapters, ceilings, inputs, results."""

    def __init__(self, config: pytest.Config) -> None:
        opt = config.getoption
        self.quick: bool = opt("quick")
        self.device: str = opt("perf_device")
        self.cuda = self.device.startswith("cuda")
        self.out = Path(opt("perf_out"))
        self.max_time: float = opt("perf_max_time") or (0.2 if self.quick else 1.0)
        self.min_rounds: int = max(2, opt("perf_min_rounds"))
        self.max_rounds = 1000 if self.cuda else 100
        self.warmup = 3
        self.budget: float | None = opt("perf_budget")
        self.min_relative: float = opt("min_relative")
        self.fail_on_regression: bool = opt("fail_on_regression")
        self.baseline_path = opt("compare")
        self.baseline = self._baseline()
        self.dtypes = self._dtypes(_split(opt("perf_dtype")))
        self.excluded: dict[str, str] = {}
        self.adapters = self._adapters(_split(opt("perf_adapter")))
        self.sizes = sizes(self.quick)
        self.started = time.time()
        self.ceilings: dict[str, ceil.Ceiling] = {}
        self.ceiling_errors: dict[str, str] = {}
        self.results: list[dict[str, Any]] = []
        self.not_run: list[dict[str, Any]] = []
        self._inputs: tuple[tuple[str, str, str], dict[str, np.ndarray]] | None = None
        self._cuda: CudaSampler | None = None
        try:
            self.out.mkdir(parents=True, exist_ok=True)
        except OSError as exc:
            raise pytest.UsageError(f"--perf-out {self.out}: cannot create it: {exc}") from None

    def _baseline(self) -> dict[str, Any] | None:
        if not self.baseline_path:
            return None
        try:
            return load(Path(self.baseline_path))
        except (OSError, ValueError) as exc:
            raise pytest.UsageError(f"--compare {self.baseline_path}: {exc}") from None

    def _dtypes(self, names: list[str]) -> list[str]:
        bad = sorted(set(names) - set(DTYPES))
        if bad:
            raise pytest.UsageError(f"unknown dtype(s) {', '.join(bad)}; choose from {', '.join(DTYPES)}")
        return sorted(set(names or DTYPES), key=DTYPE_ORDER.index)

    def _adapters(self, names: list[str]) -> dict[str, Adapter]:
        out: dict[str, Adapter] = {}
        interpret_triton_without_cuda()  # before any adapter's library imports triton (adapters/triton/env.py)
        for name in names or known_names():
            try:
                adapter = load_adapter(name, device=self.device)
            except AdapterLoadError as exc:
                if names:
                    raise pytest.UsageError(str(exc)) from None
                self.excluded[name] = str(exc)
                continue
            if adapter.environment().get("triton mode", "").startswith("interpreter"):
                # NumPy emulating each Triton program: its times say nothing of the kernel's
                self.excluded[name] = "its Triton kernels run under the interpreter here (no CUDA); time them on a GPU"
                continue
            if not callable(getattr(adapter, "native", None)):
                if names:
                    raise pytest.UsageError(
                        f"adapter {name!r} has no native() hook to benchmark (docs/adapter-contract.md)"
                    )
                self.excluded[name] = "no native() hook"
                continue
            out[adapter.name] = adapter
        # torch eager first: the others are shown relative to it
        return dict(sorted(out.items(), key=lambda kv: kv[0] != "torch"))

    def cases(self, op: str) -> list[Case]:
        return [
            Case(op, i, dims, dtype, adapter, grad)
            for dtype in self.dtypes
            for i, dims in enumerate(self.sizes[op])
            for adapter in self.adapters
            for grad in (False, True)
        ]

    def order(self, case: Case) -> tuple[int, int, int, int, bool]:
        return (
            self.dtypes.index(case.dtype),
            case.size_index,
            list(OPS).index(case.op),
            list(self.adapters).index(case.adapter),
            case.grad,
        )

    # -- measuring -----------------------------------------------------------------------------------

    def ceiling(self, kind: str, dtype: str | None) -> float | None:
        key = kind if dtype is None else f"{kind}:{dtype}"
        if key not in self.ceilings and key not in self.ceiling_errors:
            s = ceil.settings(self.device, self.quick)
            try:
                if kind == "copy":
                    self.ceilings[key] = ceil.copy_bandwidth(self.device, s)
                else:
                    self.ceilings[key] = ceil.matmul_rate(self.device, str(dtype), s)
            except Exception as exc:  # noqa: BLE001 - a ceiling that cannot be measured leaves its fraction empty
                self.ceiling_errors[key] = f"{type(exc).__name__}: {exc}"
        c = self.ceilings.get(key)
        return c.rate if c is not None else None

    def inputs(self, op: BenchOp, dims: dict[str, int], dtype: str) -> dict[str, np.ndarray]:
        key = (op.name, op.label(dims), dtype)
        if self._inputs is None or self._inputs[0] != key:
            self._inputs = None  # free the previous set first
            self._inputs = (key, make_inputs(op, dims, dtype))
        return self._inputs[1]

    def skip(self, case: Case, reason: str) -> NoReturn:
        self._not_run(case, reason)
        pytest.skip(reason)

    def _not_run(self, case: Case, reason: str) -> None:
        self.not_run.append(
            {
                "op": case.op,
                "adapter": case.adapter,
                "dtype": case.dtype,
                "size": OPS[case.op].label(case.dims),
                "pass": pass_name(case.grad),
                "reason": reason,
            }
        )

    def _time(self, fn: Callable[[], Any], benchmark: Any) -> tuple[list[float] | None, Any, set[threading.Thread]]:
        """Samples (seconds) of ``fn`` after warm-up, through pytest-benchmark's pedantic mode: CUDA events
        with the L2 cache flushed for torch on a GPU, the process clock (waiting for the result) otherwise. With
        them, the answer of the last timed round and the threads alive before the timed rounds began."""
        first = fn()
        wait(first)
        events = self.cuda and _is_torch(first)
        del first
        if self.cuda and self._cuda is None:
            self._cuda = CudaSampler(self.device, flush=True)
        if events:
            assert self._cuda is not None
            sampler = self._cuda
            warm = sampler.sample(fn, self.warmup - 1)
            rounds = rounds_for(statistics.median(warm), self.max_time, self.min_rounds, self.max_rounds)
            sampler.samples = []
            before = verify.threads()
            last = benchmark.pedantic(sampler.timed(fn), setup=sampler.flush, rounds=rounds, iterations=1)
            samples = list(sampler.samples)
        else:
            warm = cpu_sample(fn, self.warmup - 1)
            rounds = rounds_for(statistics.median(warm), self.max_time, self.min_rounds, self.max_rounds)
            setup = None
            if self._cuda is not None:  # another framework on the GPU: flush, then wait for the flush
                cuda = self._cuda

                def setup() -> None:
                    cuda.flush()
                    wait(None)

            before = verify.threads()
            last = benchmark.pedantic(lambda: wait(fn()), setup=setup, rounds=rounds, iterations=1)
            samples = list(benchmark.stats.stats.data) if benchmark.stats is not None else []
        return (None if benchmark.disabled or not samples else samples), last, before

    def measure(self, case: Case, benchmark: Any) -> None:
        if self.budget is not None and time.time() - self.started > self.budget:
            self.skip(case, f"time budget of {self.budget:g} s spent")
        adapter = self.adapters[case.adapter]
        op = OPS[case.op]
        cap = adapter.capabilities.get(op.contract_op)
        if cap is None or case.dtype not in cap.dtypes or (case.grad and not cap.grad):
            what = f"{op.contract_op} {case.dtype}{' gradient' if case.grad else ''}"
            self.skip(case, f"unsupported: {what} not declared in the adapter's capabilities")
        copy_rate = self.ceiling("copy", None)
        matmul_rate = self.ceiling("matmul", case.dtype)
        inputs = self.inputs(op, case.dims, case.dtype)
        native = getattr(adapter, "native")  # noqa: B009 - optional hook, checked when the adapter was loaded
        cotangent = (
            verify.cotangent_for(op, case.dims, case.dtype) if case.grad and verify.takes_cotangent(native) else None
        )
        try:
            if cotangent is None:
                fn = native(op.name, inputs, dict(op.params), case.grad)
            else:
                fn = native(op.name, inputs, dict(op.params), case.grad, cotangent=cotangent)
        except (KeyError, NotImplementedError) as exc:
            self.skip(case, f"unsupported: native() does not provide {op.name} ({type(exc).__name__}: {exc})")
        try:
            samples, last, before = self._time(fn, benchmark)
            verified = self._verify(adapter, case, inputs, cotangent, fn, last, before)
        except verify.Rejected as exc:
            self._not_run(case, f"rejected: {exc}")
            pytest.fail(f"rejected, not a measurement: {exc}", pytrace=False)
        except Exception as exc:
            self._not_run(case, f"failed: {type(exc).__name__}: {exc}")
            raise
        finally:
            del fn
        if samples is None:
            self.skip(case, "pytest-benchmark is disabled (--benchmark-disable)")
        result = make_result(
            op, case.dims, case.dtype, case.grad, case.adapter, self.device, Stats.of(samples), copy_rate, matmul_rate
        )
        result["verified"] = verified
        self.results.append(result)
        benchmark.extra_info.update(
            {k: result[k] for k in ("op", "size", "dtype", "pass", "bytes", "flops", "ceiling", "fraction")}
        )

    def _verify(
        self,
        adapter: Adapter,
        case: Case,
        inputs: dict[str, np.ndarray],
        cotangent: np.ndarray | None,
        fn: Callable[[], Any],
        last: Any,
        before: set[threading.Thread],
    ) -> str:
        """Hold the last timed round's answer to the rules of benchmarks/perf/verify.py; what was verified."""
        op = OPS[case.op]
        call = verify.describe(adapter, op, inputs, case.grad)
        got = verify.check_delivery(fn, last, before, call)
        note = verify.oracle_note(op, inputs, case.dims, case.grad)
        if not note and case.grad and cotangent is None:
            note = "its native() hook takes no cotangent, so its gradients cannot be compared"
        if note:
            return f"delivery only: {note}"
        names = verify.names(op, inputs, case.grad)
        verify.check_values(adapter, op, inputs, dict(op.params), case.dtype, cotangent, got, names, call)
        return "values and delivery"

    # -- the report ----------------------------------------------------------------------------------

    def environment(self) -> dict[str, Any]:
        env: dict[str, Any] = {
            "python": platform.python_version(),
            "platform": platform.platform(terse=True),
            "machine": platform.machine(),
            "cpus": os.cpu_count(),
            "numpy": np.__version__,
        }
        torch = sys.modules.get("torch")
        if torch is not None:
            env["torch"] = torch.__version__
            env["torch_threads"] = torch.get_num_threads()
            if self.cuda:
                env["gpu"] = torch.cuda.get_device_name(self.device)
                env["cuda"] = torch.version.cuda
        return env

    def assemble(self) -> dict[str, Any]:
        add_ratios(self.results)
        run: dict[str, Any] = {
            "schema": SCHEMA,
            "schema_version": SCHEMA_VERSION,
            "created": dt.datetime.now(dt.UTC).isoformat(timespec="seconds"),
            "duration_s": time.time() - self.started,
            "mode": "quick" if self.quick else "full",
            "device": self.device,
            "environment": self.environment(),
            "settings": {
                "max_time_s": self.max_time,
                "min_rounds": self.min_rounds,
                "warmup": self.warmup,
                "budget_s": self.budget,
                "dtypes": self.dtypes,
                "l2_flush_bytes": self._cuda.flush_bytes if self._cuda is not None else None,
            },
            "ceilings": [c.to_dict() for c in self.ceilings.values()],
            "ceiling_errors": self.ceiling_errors,
            "adapters": [{"name": n, "environment": a.environment()} for n, a in self.adapters.items()],
            "excluded": self.excluded,
            "results": self.results,
            "not_run": self.not_run,
        }
        if self.baseline is not None:
            run["comparison"] = compare(run, self.baseline, self.min_relative)
        return run


def pytest_configure(config: pytest.Config) -> None:
    config.addinivalue_line("markers", "perf_op(name): a performance benchmark of one operation (benchmarks/)")
    if hasattr(config, "workerinput") or RUN_KEY in config.stash:
        return
    if not config.pluginmanager.hasplugin("benchmark"):
        raise pytest.UsageError("the benchmarks need pytest-benchmark: pip install -e '.[bench]'")
    if (config.getoption("numprocesses", None) or 0) not in (0, "0"):
        raise pytest.UsageError("benchmarks run in one process: drop -n")
    config.stash[RUN_KEY] = PerfRun(config)


def pytest_generate_tests(metafunc: pytest.Metafunc) -> None:
    if "perf_case" not in metafunc.fixturenames:
        return
    marker = metafunc.definition.get_closest_marker("perf_op")
    if marker is None:
        raise pytest.UsageError(f"{metafunc.definition.nodeid}: a perf_case test needs @pytest.mark.perf_op(name)")
    cases = metafunc.config.stash[RUN_KEY].cases(marker.args[0])
    metafunc.parametrize("perf_case", cases, ids=[c.id for c in cases])


def pytest_collection_modifyitems(config: pytest.Config, items: list[pytest.Item]) -> None:
    run = config.stash.get(RUN_KEY, None)
    if run is None:
        return

    def key(item: pytest.Item) -> tuple[Any, ...]:
        callspec = getattr(item, "callspec", None)
        case = callspec.params.get("perf_case") if callspec is not None else None
        return (0, *run.order(case)) if isinstance(case, Case) else (1,)

    items.sort(key=key)


@pytest.fixture
def perf_run(request: pytest.FixtureRequest) -> PerfRun:
    return request.config.stash[RUN_KEY]


def pytest_sessionfinish(session: pytest.Session, exitstatus: int) -> None:
    run = session.config.stash.get(RUN_KEY, None)
    if run is None or not (run.results or run.not_run):
        return
    report = run.assemble()
    session.config.stash[PATHS_KEY] = write(report, run.out)
    cmp = report.get("comparison")
    if cmp and cmp["regressions"] and run.fail_on_regression and exitstatus == 0:
        session.exitstatus = pytest.ExitCode.TESTS_FAILED
    session.config.stash[REPORT_KEY] = report


def pytest_terminal_summary(terminalreporter: Any, exitstatus: int, config: pytest.Config) -> None:
    paths = config.stash.get(PATHS_KEY, None)
    run = config.stash.get(RUN_KEY, None)
    if paths is None or run is None:
        return
    tr = terminalreporter
    tr.section("performance report")
    tr.write_line(f"{len(run.results)} results, {len(run.not_run)} cases not run; {paths['md']}")
    plots = sum(k.startswith("svg:") for k in paths)
    tr.write_line(f"also {paths['json'].name}, {paths['csv'].name} and {plots} plots in {paths['md'].parent}")
    for key, c in run.ceilings.items():
        unit = "GB/s" if c.kind == "copy" else "GFLOP/s"
        tr.write_line(f"ceiling {key}: {c.rate / 1e9:.3g} {unit} (at the median {c.median_rate / 1e9:.3g})")
    cmp = config.stash[REPORT_KEY].get("comparison")
    if cmp is not None:
        line = f"against {run.baseline_path}: {cmp['regressions']} regression(s), {cmp['improvements']} improvement(s)"
        tr.write_line(line, red=bool(cmp["regressions"]), bold=bool(cmp["regressions"]))
        for r in cmp["rows"]:
            if r["verdict"] == "regression":
                tr.write_line(
                    f"  regression: {r['op']} {r['size']} {r['dtype']} {r['pass']} {r['adapter']}: "
                    f"{signed_pct(r['relative_change'])} "
                    f"(median {r['baseline_median_s']:.4g} s → {r['median_s']:.4g} s)"
                )
