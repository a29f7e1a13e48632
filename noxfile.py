"""Sessions: ``conformance`` (check adapters, write the report), ``tests`` (the project's own tests, less the
slow ones), ``tests-slow`` (those), ``lint`` (ruff and mypy), ``bench`` (the performance report:
docs/performance.md), ``bench-conformance`` (how long the CI-profile conformance run takes), ``scoreboard-bench``
(how long each scoreboard shard takes, and what it checked), ``release-matrix`` (the adapters on each measured
library release: adapters/releases.py), ``report`` (merge
report.json files into the static site under reports/site/), ``mutants`` (the suite against the catalogue of
defective implementations: every one must be caught), ``wheel`` (the wheel built from the tree, installed beside
AdapterHub's ``adapters``).

Arguments after ``--`` go to pytest, so every conformance option works there:
``nox -s conformance -- --adapter torch --report-dir out/``.

A candidate of your own is installed into the conformance session with ``--install``, taken out of the
arguments before pytest sees them and given to pip (repeatable; a path is relative to where nox was run):
``nox -s conformance -- --install ../tiny-kernels --adapter tiny-kernels``. It also takes a requirement
(``--install "tiny-kernels==0.1.0"``, ``--install "tiny-kernels @ git+https://..."``) or an editable install
(``--install="-e ../mypkg"``).
"""

from __future__ import annotations

import runpy
from pathlib import Path

import nox

nox.options.sessions = ["tests"]
nox.options.reuse_existing_virtualenvs = True

PYTHON = "3.11"


def install(session: nox.Session, *extras: str) -> None:
    """Install the project with the given extras, as a wheel (what users get: its folders under the one
    import package transformer_conformance), rebuilt from the tree on every run (pip reinstalls a local
    directory whatever its version). Set PIP_CONSTRAINT to pin versions, as the project's CI does with
    constraints/ci.txt."""
    spec = f".[{','.join(extras)}]" if extras else "."
    session.install(spec)
    if no_deps := no_deps_requirements(extras):
        session.install("--no-deps", *no_deps)


#: Worker processes run tiny tensors: one intra-op thread each, so pytest-xdist's workers do not oversubscribe
#: the cores (torch's default of one thread per core makes each small op wait on the others).
ONE_THREAD = {"OMP_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}


def _threads() -> dict[str, str]:
    import os

    return {k: v for k, v in ONE_THREAD.items() if k not in os.environ}


def _has_n(args: list[str]) -> bool:
    return any(
        a == "-n" or a.startswith(("-n=", "--numprocesses")) or (a.startswith("-n") and a[2:].isdigit()) for a in args
    )


_EXTRAS_PY = runpy.run_path(str(Path(__file__).parent / "adapters" / "extras.py"))
#: built-in adapter name -> the extra it needs (adapters/extras.py, read without importing the project)
ADAPTER_EXTRAS: dict[str, str] = _EXTRAS_PY["EXTRAS"]
#: extra -> the libraries installed with ``--no-deps`` after it (their own requirements pin another torch)
NO_DEPS: dict[str, tuple[str, ...]] = _EXTRAS_PY["NO_DEPS"]


def no_deps_requirements(extras: tuple[str, ...] | list[str]) -> list[str]:
    """The requirements the ``extras`` install without their dependencies (adapters/extras.py, NO_DEPS)."""
    return [r for e in extras for r in NO_DEPS.get(e, ())]


DEFAULT_ADAPTERS = ("numpy", "torch")


def adapter_extras(args: list[str]) -> list[str]:
    """The extras the built-in adapters named by ``--adapter`` need (default adapters: numpy, torch).
    Other adapters (plugins, ``package.module:attr``) bring their own dependencies."""
    names: list[str] = []
    for i, a in enumerate(args):
        if a == "--adapter" and i + 1 < len(args):
            names += args[i + 1].split(",")
        elif a.startswith("--adapter="):
            names += a.removeprefix("--adapter=").split(",")
    extras = {ADAPTER_EXTRAS.get(n.strip(), "") for n in (names or DEFAULT_ADAPTERS)}
    return sorted(e for e in extras if e)


def take_install(args: list[str], invoked_from: str) -> tuple[list[list[str]], list[str]]:
    """Split ``--install SPEC`` / ``--install=SPEC`` out of the arguments: (pip arguments of each, the rest).

    SPEC is one thing ``pip install`` takes: a path, a requirement, or an option and its value (``-e PATH``).
    A path (it starts with ``.`` or holds a ``/`` and is no URL, as pip tells paths from names) is made
    absolute from ``invoked_from``, the directory nox was run in."""
    specs: list[str] = []
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == "--install":
            spec = next(it, None)
            if spec is None:
                raise ValueError("--install needs a path or requirement: --install PATH_OR_REQUIREMENT")
            specs.append(spec)
        elif a.startswith("--install="):
            specs.append(a.removeprefix("--install="))
        else:
            rest.append(a)

    def pip_args(spec: str) -> list[str]:
        words = spec.split(maxsplit=1) if spec.startswith("-") else [spec]
        return [str(Path(invoked_from, w).resolve()) if _is_path(w) else w for w in words]

    return [pip_args(s) for s in specs], rest


def _is_path(word: str) -> bool:
    return word.startswith(".") or ("/" in word and "://" not in word and "@" not in word)


@nox.session(python=PYTHON)
def conformance(session: nox.Session) -> None:
    """Run the conformance checks (default adapters: numpy, torch) and write report.json / report.md.

    Installs the extras the requested built-in adapters need: ``-- --adapter jax,flax`` installs
    ``.[jax]``, ``-- --adapter hf-llama`` installs ``.[hf]``; ``-- --install PATH_OR_REQUIREMENT`` installs
    a candidate of your own (module docstring)."""
    try:
        candidates, args = take_install(list(session.posargs), session.invoked_from)
    except ValueError as exc:
        session.error(str(exc))
    install(session, *adapter_extras(args))
    for pip_args in candidates:
        session.install(*pip_args)
    session.run("transformer-conformance", *args, env=_threads())


#: The extras the project's tests need
TEST_EXTRAS = ("torch", "liger", "onnxruntime-export", "mlx", "bench", "dev")
#: The tests that take seconds to minutes each (tests marked ``slow``: whole conformance runs of the planted
#: defects, a copy of the example repository, the CLI's subprocess runs, FlexAttention compiled): ``tests``
#: leaves them out, ``tests-slow`` runs only them, and CI runs both.
SLOW = "slow"


def _has_m(args: list[str]) -> bool:
    return any(a in ("-m", "--markexpr") or a.startswith(("-m", "--markexpr=")) for a in args)


def _run_tests(session: nox.Session, marks: str) -> None:
    install(session, *TEST_EXTRAS)
    args = list(session.posargs)
    if not _has_m(args):
        args = ["-m", marks, *args]
    if not _has_n(args):
        # loadfile: a module's tests stay on one worker, so its module-scoped conformance runs run once
        args = ["-n", "auto", "--dist", "loadfile", *args]
    session.run("pytest", "tests", *args, env=_threads())


@nox.session(python=PYTHON)
def tests(session: nox.Session) -> None:
    """The project's own tests, less the slow ones (``tests-slow``): oracle vs finite differences, budgets,
    strategies, the harness's rules, report and CLI, the layout; the liger adapters and the Triton interpreter
    bridges, the onnxruntime adapters and the converter path, the mlx adapter (mlx[cpu]: about 40 MB installed);
    the performance report's verification of what its timed calls delivered (pytest-benchmark). ``-- -m ""``
    runs every test."""
    _run_tests(session, f"not {SLOW}")


@nox.session(name="tests-slow", python=PYTHON)
def tests_slow(session: nox.Session) -> None:
    """The project's slow tests (marked ``slow``): each planted defect caught by a whole conformance run, the
    example repository copied and run by its README, the CLI's runs of misbehaving and crashing candidates,
    FlexAttention compiled for each operation and dtype."""
    _run_tests(session, SLOW)


#: AdapterHub's library, whose import name is ``adapters``: the same as this repository's adapters/ folder
ADAPTERHUB = "adapters==1.3.0"
BOTH_IMPORT = """
import adapters, transformer_conformance.adapters as tca
assert 'transformer_conformance' not in adapters.__file__, adapters.__file__
assert hasattr(adapters, 'AutoAdapterModel'), 'not AdapterHub'
assert tca.Capability and tca.Conventions
print('adapters from', adapters.__file__)
print('transformer_conformance.adapters from', tca.__file__)
"""


@nox.session(python=PYTHON)
def wheel(session: nox.Session) -> None:
    """The wheel built from the tree, installed beside AdapterHub's ``adapters`` package in one environment:
    both import, and the installed suite runs (its folders install under transformer_conformance)."""
    session.install(ADAPTERHUB, "torch")  # AdapterHub imports torch without declaring it
    tmp = Path(session.create_tmp())
    for old in tmp.glob("*.whl"):
        old.unlink()
    session.run("pip", "wheel", "--quiet", "--no-deps", "--wheel-dir", str(tmp), ".")
    (built,) = tmp.glob("transformer_conformance-*.whl")
    session.install(str(built))
    session.run("pip", "install", "--quiet", "--no-deps", "--force-reinstall", str(built))
    # outside this repository, whose adapters/ folder would shadow any installed package of that name
    session.chdir(tmp)
    session.run("python", "-c", BOTH_IMPORT)
    out = tmp / "run"
    session.run(
        "transformer-conformance", "--adapter", "numpy", "--behaviour", "rms_norm", "-n", "0", "-q",
        "--report-dir", str(out),
    )  # fmt: skip


@nox.session(python=PYTHON)
def lint(session: nox.Session) -> None:
    install(session, "torch", "dev")
    session.run("ruff", "check", ".")
    # mypy reads the package as installed (its folders under transformer_conformance): a copy of the
    # wheel's files in .lint/ (errors name .lint/transformer_conformance/<folder>/...), with the
    # repository's benchmarks and mutants beside it
    session.run("rm", "-rf", ".lint", external=True)
    session.run("pip", "install", "--quiet", "--no-deps", "--target", ".lint", ".", silent=True)
    session.run(
        "mypy",
        "--explicit-package-bases",
        ".lint/transformer_conformance",
        "benchmarks",
        "mutants",
        env={"MYPYPATH": ".lint"},
    )


def _option_value(args: list[str], name: str) -> str | None:
    for i, a in enumerate(args):
        if a.startswith(name + "="):
            return a.split("=", 1)[1]
        if a == name and i + 1 < len(args):
            return args[i + 1]
    return None


@nox.session(python=PYTHON)
def bench(session: nox.Session) -> None:
    """Performance report (docs/performance.md): each behaviour × adapter × dtype, forward and
    forward+backward, timed on the adapter's own tensors against the machine's measured copy bandwidth and
    matmul rate; writes perf.md, perf.json, perf.csv and plots to reports/out/bench/. ``-- --quick`` for the
    reduced set, ``-- --compare BASELINE.json`` to flag regressions. A benchmark, never part of a verdict."""
    install(session, "torch", "bench")
    args = list(session.posargs)
    out = _option_value(args, "--perf-out") or "reports/out/bench"
    if _option_value(args, "--benchmark-json") is None:
        args.append(f"--benchmark-json={out}/pytest-benchmark.json")
    session.run("pytest", "benchmarks", "-p", "no:cacheprovider", *args)


@nox.session(name="bench-conformance", python=PYTHON)
def bench_conformance(session: nox.Session) -> None:
    """Time the CI-profile conformance run of the torch adapter (a benchmark, never a test)."""
    install(session, "torch")
    session.run("python", "benchmarks/bench_conformance.py", *session.posargs)


@nox.session(python=PYTHON)
def report(session: nox.Session) -> None:
    """Merge report.json files into a static site: ``nox -s report -- out1/report.json out2/report.json``
    (``-o DIR`` for another directory than reports/site/); perf.json files of ``nox -s bench`` given too get
    a performance page each."""
    if not session.posargs:
        session.error("give the report.json files to merge: nox -s report -- REPORT.json ...")
    install(session)
    session.run("python", "-m", "transformer_conformance.reports.dashboard", *session.posargs)


@nox.session(python=PYTHON)
def mutants(session: nox.Session) -> None:
    """Run the conformance checks against every mutant of mutants/catalogue.py; fails if one survives.
    Writes mutants.json and mutants.md to reports/out/mutants/ (``-- --out DIR`` elsewhere)."""
    install(session, "torch")
    session.run("python", "mutants/run.py", *session.posargs, env=_threads())


#: where the scoreboard's shards write their reports, and its site
SCOREBOARD = Path("reports/scoreboard")


def builtin_adapters() -> list[str]:
    """The built-in adapters in the registry's order (``BUILTIN`` of adapters/registry.py, read without
    importing the project)."""
    import ast

    tree = ast.parse((Path(__file__).parent / "adapters" / "registry.py").read_text(encoding="utf-8"))
    for node in tree.body:
        if isinstance(node, ast.AnnAssign) and isinstance(node.target, ast.Name) and node.target.id == "BUILTIN":
            assert isinstance(node.value, ast.Dict)
            return [ast.literal_eval(k) for k in node.value.keys if k is not None]
    raise RuntimeError("adapters/registry.py has no BUILTIN")


def _shard_env(session: nox.Session, name: str) -> Path:
    """The environment holding the project with the adapter's extra (one environment per extra, under .nox/)."""
    if name not in builtin_adapters():
        session.error(f"{name!r} is not a built-in adapter; the scoreboard has {', '.join(builtin_adapters())}")
    extra = ADAPTER_EXTRAS[name]
    env = Path(".nox") / f"scoreboard-env-{extra or 'plain'}"
    if not (env / "bin" / "python").exists():
        session.run("python", "-m", "venv", str(env))
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    session.run(*pip, f".[{extra}]" if extra else ".", external=True)
    if no_deps := no_deps_requirements([extra]):
        session.run(*pip, "--no-deps", *no_deps, external=True)
    return env


def _shard(session: nox.Session, name: str, args: list[str], env: Path | None = None, **extra_env: str) -> None:
    """One adapter's conformance run, in its extra's environment, with the built-in expectation files that name
    it. A failing library is a result, not an error of the scoreboard: exit 1 is accepted."""
    env = env or _shard_env(session, name)
    session.run(
        str(env / "bin" / "transformer-conformance"),
        *("--adapter", name, "--report-dir", str(SCOREBOARD / name), "--expectations", "builtin"),
        *args,
        env={**_threads(), **extra_env},
        external=True,
        success_codes=[0, 1],
    )


def _merge(session: nox.Session, names: list[str]) -> None:
    """Merge the shards' reports into the site and rewrite the README's matrix (reports/scoreboard.py)."""
    found = [SCOREBOARD / n / "report.json" for n in names if (SCOREBOARD / n / "report.json").exists()]
    missing = [n for n in names if not (SCOREBOARD / n / "report.json").exists()]
    if missing:
        session.warn(f"no shard report for {', '.join(missing)}: left out of the scoreboard")
    if not found:
        session.error(f"no shard report under {SCOREBOARD}/: run nox -s scoreboard-shard -- NAME first")
    install(session)
    session.run(
        "python",
        *("-m", "transformer_conformance.reports.scoreboard", *map(str, found)),
        *("--site", str(SCOREBOARD / "site"), "--readme", "README.md"),
    )


def _scoreboard_names(args: list[str]) -> tuple[list[str], list[str]]:
    """The adapters ``--adapter a,b`` names (default: every built-in adapter), and the other arguments."""
    names: list[str] = []
    rest: list[str] = []
    it = iter(args)
    for a in it:
        if a == "--adapter":
            names += next(it, "").split(",")
        elif a.startswith("--adapter="):
            names += a.removeprefix("--adapter=").split(",")
        else:
            rest.append(a)
    return [n.strip() for n in names if n.strip()] or builtin_adapters(), rest


@nox.session(python=PYTHON)
def scoreboard(session: nox.Session) -> None:
    """Every built-in adapter, one shard each in the environment its extra needs, then the merge: the site in
    reports/scoreboard/site/ and the README's matrix. ``-- --adapter a,b`` runs some of them again (the merge
    takes every shard under reports/scoreboard/, each dated); other arguments go to each run
    (``-- --hypothesis-profile=dev``). CI runs the shards on separate machines (.github/workflows/scoreboard.yml):
    ``nox -s scoreboard-shard -- NAME``, then ``nox -s scoreboard-merge``."""
    names, args = _scoreboard_names(list(session.posargs))
    for name in names:
        _shard(session, name, args)
    _merge(session, builtin_adapters())  # with the shards of earlier runs still under reports/scoreboard/


@nox.session(name="scoreboard-shard", python=PYTHON)
def scoreboard_shard(session: nox.Session) -> None:
    """One shard of the scoreboard: ``-- NAME [run options]`` writes reports/scoreboard/NAME/."""
    if not session.posargs:
        session.error(f"name the adapter: nox -s scoreboard-shard -- NAME ({', '.join(builtin_adapters())})")
    _shard(session, session.posargs[0], list(session.posargs[1:]))


#: the compilation caches a shard can warm: JAX's persistent cache, inductor's and Triton's
CACHE_VARIABLES = ("JAX_COMPILATION_CACHE_DIR", "TORCHINDUCTOR_CACHE_DIR", "TRITON_CACHE_DIR")


@nox.session(name="scoreboard-bench", python=PYTHON)
def scoreboard_bench(session: nox.Session) -> None:
    """Time the scoreboard's shards, one after another: each run's wall time (its environment built first, off
    the clock), cold — JAX's, inductor's and Triton's compilation caches in a fresh folder — unless ``-- --warm``.
    Then writes reports/scoreboard/bench.md: per shard the time, checks run, examples drawn, candidate calls,
    calls a shape plan chose and programs built (benchmarks/bench_scoreboard.py; bench.json keeps the times).
    ``-- --adapter a,b`` times some of them (default: every built-in adapter); ``--baseline DIR`` compares with
    the shards under another scoreboard folder. A benchmark: nothing asserts a time."""
    import json
    import tempfile
    import time

    names, rest = _scoreboard_names(list(session.posargs))
    warm = False
    compare: list[str] = []
    args: list[str] = []
    it = iter(rest)
    for a in it:
        if a == "--warm":
            warm = True
        elif a == "--baseline" or a.startswith("--baseline="):
            compare = ["--baseline", a.partition("=")[2] or next(it, "")]
        else:
            args.append(a)
    bench_file = SCOREBOARD / "bench.json"
    timed = json.loads(bench_file.read_text()) if bench_file.exists() else {}
    for name in names:
        env = _shard_env(session, name)
        with tempfile.TemporaryDirectory(prefix="scoreboard-bench-") as cold:
            caches = {} if warm else {v: str(Path(cold) / v.lower()) for v in CACHE_VARIABLES}
            start = time.perf_counter()
            _shard(session, name, args, env, **caches)
            timed[name] = {"wall_s": round(time.perf_counter() - start, 1), "cold": not warm}
        bench_file.parent.mkdir(parents=True, exist_ok=True)
        bench_file.write_text(json.dumps(timed, indent=1, sort_keys=True) + "\n")
    out = str(SCOREBOARD / "bench.md")
    session.run("python", "benchmarks/bench_scoreboard.py", str(SCOREBOARD), *compare, "--out", out)


#: the release matrix: name -> (requirements pinning a release, the adapters run on it) (adapters/releases.py)
RELEASES: dict[str, tuple[tuple[str, ...], tuple[str, ...]]] = runpy.run_path(
    str(Path(__file__).parent / "adapters" / "releases.py")
)["RELEASES"]
#: where the release matrix's runs write their reports (RELEASE/ADAPTER/), runs.json and releases.md
RELEASE_REPORTS = Path("reports/releases")


def _distribution(requirement: str) -> str:
    """The distribution a requirement or constraint line names, as pip compares them: "Liger_Kernel==0.4" ->
    "liger-kernel"."""
    import re

    return re.split(r"[\s=<>!~;\[@]", requirement.strip(), maxsplit=1)[0].lower().replace("_", "-")


def _release_env(session: nox.Session, name: str) -> Path:
    """The environment of one release of the matrix: the project with its adapters' extras and the release's
    pins. A constraint file in PIP_CONSTRAINT (the CI's) still applies to everything the pins do not name."""
    import os

    pins, adapters = RELEASES[name]
    env = Path(".nox") / f"release-{name}"
    if not (env / "bin" / "python").exists():
        session.run("python", "-m", "venv", str(env))
    pip_env: dict[str, str] = {}
    constraint = os.environ.get("PIP_CONSTRAINT")
    if constraint:
        pinned = {_distribution(p) for p in pins}
        kept = [
            line
            for file in constraint.split()
            for line in Path(file).read_text(encoding="utf-8").splitlines()
            if line.strip().startswith("#") or _distribution(line) not in pinned
        ]
        filtered = env / "constraints.txt"
        filtered.write_text("\n".join(kept) + "\n", encoding="utf-8")
        pip_env["PIP_CONSTRAINT"] = str(filtered.resolve())
    extras = sorted({ADAPTER_EXTRAS[a] for a in adapters} - {""})
    spec = f".[{','.join(extras)}]" if extras else "."
    pip = [str(env / "bin" / "python"), "-m", "pip", "install", "--quiet", "--disable-pip-version-check"]
    session.run(*pip, spec, *pins, env=pip_env, external=True)
    if no_deps := no_deps_requirements(extras):
        session.run(*pip, "--no-deps", *no_deps, env=pip_env, external=True)
    return env


def _release_selection(names: list[str]) -> dict[str, tuple[str, ...]]:
    """The entries (and, after a colon, some of an entry's adapters) named on the command line:
    ``["jax-0.4.30", "liger-kernel-0.4.0:liger-gemma,liger-none"]`` → {"jax-0.4.30": (), "liger-kernel-0.4.0":
    ("liger-gemma", "liger-none")}, () meaning all of the entry's; none named: every entry."""
    chosen: dict[str, tuple[str, ...]] = {}
    for arg in names:
        name, _, picked = arg.partition(":")
        chosen[name] = tuple(a for a in picked.split(",") if a)
    return chosen or {name: () for name in RELEASES}


def _run_release(env: Path, name: str, adapter: str, args: list[str]) -> dict[str, object]:
    """One adapter's conformance run on one release, its output passed through: exit status, wall time, and
    the one-line reason when the adapter refused (exit 4, no report)."""
    import os
    import shutil
    import subprocess
    import time

    out = RELEASE_REPORTS / name / adapter
    shutil.rmtree(out, ignore_errors=True)  # a run that writes no report must not leave an earlier run's verdict
    command = [
        str(env / "bin" / "transformer-conformance"),
        *("--adapter", adapter, "--report-dir", str(out), "--expectations", "builtin"),
        *args,
    ]
    start = time.perf_counter()
    reason = ""
    with subprocess.Popen(
        command, env={**os.environ, **_threads()}, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True
    ) as proc:
        assert proc.stdout is not None
        for line in proc.stdout:
            print(line, end="", flush=True)
            if line.startswith("ERROR: adapter"):
                reason = line.removeprefix("ERROR: ").strip()
    run: dict[str, object] = {"exit": proc.returncode, "wall_s": round(time.perf_counter() - start, 1)}
    if reason:
        run["reason"] = reason
    return run


@nox.session(name="release-matrix", python=PYTHON)
def release_matrix(session: nox.Session) -> None:
    """The release matrix (adapters/releases.py): each library release in an environment of its own, its
    adapters' conformance runs with their expectation files, then reports/releases/releases.md (per release and
    adapter: the verdict, its counts, the time, the releases installed). ``-- NAME ...`` runs some entries
    (default: all), ``-- NAME:ADAPTER,ADAPTER`` some of an entry's adapters; other arguments go to each run
    (``-- jax-0.4.30 --hypothesis-profile=dev``). A library release failing checks is a result, not an error of
    the session."""
    import json

    chosen = _release_selection([a for a in session.posargs if not a.startswith("-")])
    args = [a for a in session.posargs if a.startswith("-")]
    unknown = [n for n in chosen if n not in RELEASES]
    if unknown:
        session.error(f"not in the release matrix: {', '.join(unknown)}; it has {', '.join(RELEASES)}")
    strays = [f"{n}:{a}" for n, picked in chosen.items() for a in picked if a not in RELEASES[n][1]]
    if strays:
        session.error(f"not run on that release by the matrix: {', '.join(strays)}")
    runs_file = RELEASE_REPORTS / "runs.json"
    runs = json.loads(runs_file.read_text()) if runs_file.exists() else {}
    for name, picked in chosen.items():
        env = _release_env(session, name)
        for adapter in picked or RELEASES[name][1]:
            runs.setdefault(name, {})[adapter] = _run_release(env, name, adapter, args)
            runs_file.parent.mkdir(parents=True, exist_ok=True)
            runs_file.write_text(json.dumps(runs, indent=1, sort_keys=True) + "\n")
    install(session)
    out = str(RELEASE_REPORTS / "releases.md")
    session.run("python", "-m", "transformer_conformance.reports.releases", str(RELEASE_REPORTS), "--out", out)


@nox.session(name="scoreboard-merge", python=PYTHON)
def scoreboard_merge(session: nox.Session) -> None:
    """Merge the shards found under reports/scoreboard/ (every built-in adapter's, in the registry's order)."""
    _merge(session, builtin_adapters())
