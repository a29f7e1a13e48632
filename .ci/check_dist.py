"""Check the built distributions before they are published (the release workflow runs this; docs/releasing.md).

    python .ci/check_dist.py dist/ [--tag v0.1.0] [--venv DIR] [-- RUN OPTIONS]

* ``dist/`` holds exactly one sdist and one wheel of the version in pyproject.toml; ``--tag``, when given, is
  that version's tag (``v`` + version) and CHANGELOG.md has the version's section (``## [0.1.0] - 2027-01-31``);
* ``twine check --strict`` passes on both (their metadata and the README render on PyPI);
* the wheel holds what an installed suite needs: every ``docs/*.md`` (``--docs``), every built-in expectation
  file (``--expectations builtin``), the report schema, the run's pytest configuration and the checks; the
  sdist holds the sources, CHANGELOG.md and the license;
* the wheel installs into a new virtualenv, and from a directory outside the repository
  ``transformer-conformance --version`` names the version and no commit, and ``--adapter numpy`` (the built-in
  NumPy adapter, which needs no framework) is conformant with the built-in expectation files, its report
  naming the same version. Options after ``--`` go to that run (``-- --behaviour rms_norm`` for a quick one).

Exit status 0 when every check holds; otherwise 1, with what failed.
"""

from __future__ import annotations

import argparse
import json
import os
import re
import subprocess
import sys
import tarfile
import tempfile
import tomllib
import zipfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PACKAGE = "transformer_conformance"


def project_version() -> str:
    return str(tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))["project"]["version"])


def required_in_wheel() -> set[str]:
    """The wheel's members an installed suite reads at run time."""
    docs = {f"{PACKAGE}/docs/{p.name}" for p in (ROOT / "docs").glob("*.md")}
    expectations = {f"{PACKAGE}/expectations/{p.name}" for p in (ROOT / "expectations").glob("*.toml")}
    checks = {f"{PACKAGE}/conformance/checks/{p.name}" for p in (ROOT / "conformance" / "checks").glob("test_*.py")}
    runner = {f"{PACKAGE}/{name}" for name in ("reports/report.schema.json", "reports/provenance.py")}
    runner |= {f"{PACKAGE}/conformance/runner/{name}" for name in ("run.ini", "cli.py")}
    return docs | expectations | checks | runner


def required_in_sdist() -> set[str]:
    return {"pyproject.toml", "README.md", "LICENSE", "CHANGELOG.md", "reports/report.schema.json", "docs/gating.md"}


def run(cmd: list[str], cwd: Path | None = None, env: dict[str, str] | None = None) -> subprocess.CompletedProcess[str]:
    print("+", " ".join(cmd), flush=True)
    return subprocess.run(cmd, cwd=cwd, env=env, text=True, capture_output=True, check=False)


class Checks:
    def __init__(self) -> None:
        self.failures: list[str] = []

    def expect(self, ok: bool, what: str) -> bool:
        print(("ok    " if ok else "FAIL  ") + what, flush=True)
        if not ok:
            self.failures.append(what)
        return ok


def main(argv: list[str] | None = None) -> int:
    args_in = sys.argv[1:] if argv is None else list(argv)
    run_options: list[str] = []
    if "--" in args_in:
        at = args_in.index("--")
        args_in, run_options = args_in[:at], args_in[at + 1 :]
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("dist", type=Path, help="the directory holding the sdist and the wheel")
    parser.add_argument("--tag", help="the release's tag, which must be 'v' + the version (e.g. v0.1.0)")
    parser.add_argument("--venv", type=Path, help="where to make the clean virtualenv (default: a temporary one)")
    args = parser.parse_args(args_in)

    checks = Checks()
    version = project_version()
    if args.tag is not None:
        checks.expect(args.tag == f"v{version}", f"the tag {args.tag!r} is v{version}, pyproject.toml's version")
        changelog = (ROOT / "CHANGELOG.md").read_text(encoding="utf-8")
        checks.expect(
            re.search(rf"^## \[{re.escape(version)}\] - \d{{4}}-\d\d-\d\d$", changelog, flags=re.M) is not None,
            f"CHANGELOG.md has the release's section, '## [{version}] - YYYY-MM-DD'",
        )

    wheels = sorted(args.dist.glob(f"{PACKAGE}-*.whl"))
    sdists = sorted(args.dist.glob(f"{PACKAGE}-*.tar.gz"))
    if not checks.expect(len(wheels) == 1 and len(sdists) == 1, f"one wheel and one sdist in {args.dist}"):
        return 1
    (wheel,), (sdist,) = wheels, sdists
    checks.expect(wheel.name == f"{PACKAGE}-{version}-py3-none-any.whl", f"the wheel {wheel.name} is {version}'s")
    checks.expect(sdist.name == f"{PACKAGE}-{version}.tar.gz", f"the sdist {sdist.name} is {version}'s")

    twine = run([sys.executable, "-m", "twine", "check", "--strict", str(wheel), str(sdist)])
    print(twine.stdout + twine.stderr, end="")
    checks.expect(twine.returncode == 0, "twine check --strict passes")

    with zipfile.ZipFile(wheel) as z:
        members = set(z.namelist())
    missing = sorted(required_in_wheel() - members)
    checks.expect(not missing, f"the wheel holds the docs, expectation files, schema and checks (missing: {missing})")
    licensed = any(m.startswith(f"{PACKAGE}-{version}.dist-info/") and m.endswith("LICENSE") for m in members)
    checks.expect(licensed, "the wheel holds the license")
    with tarfile.open(sdist) as t:
        top = f"{PACKAGE}-{version}/"
        in_sdist = {m.name.removeprefix(top) for m in t.getmembers()}
    missing = sorted(required_in_sdist() - in_sdist)
    checks.expect(not missing, f"the sdist holds the sources, CHANGELOG.md and the license (missing: {missing})")

    with tempfile.TemporaryDirectory(prefix="tc-check-dist-") as tmp:
        venv = args.venv or Path(tmp) / "venv"
        made = run([sys.executable, "-m", "venv", "--clear", str(venv)])
        if not checks.expect(made.returncode == 0, f"a new virtualenv at {venv}"):
            print(made.stderr)
            return 1
        python = venv / "bin" / "python"
        env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PYTHONHOME", "VIRTUAL_ENV")}
        installed = run([str(python), "-m", "pip", "install", "--quiet", str(wheel.resolve())], env=env)
        print(installed.stdout[-3000:] + installed.stderr[-3000:], end="")
        if not checks.expect(installed.returncode == 0, f"the wheel installs into {venv}"):
            return 1

        outside = Path(tmp) / "elsewhere"  # no checkout of the suite here or above
        outside.mkdir()
        exe = str(venv / "bin" / "transformer-conformance")
        shown = run([exe, "--version"], cwd=outside, env=env)
        line = shown.stdout.strip()
        print(line)
        checks.expect(
            shown.returncode == 0 and line.startswith(f"transformer-conformance {version} (pytest "),
            "--version names the version, and no commit (a wheel is no checkout)",
        )
        imported = f"import {PACKAGE}.reports.writer as w; print(w.__file__)"
        where = run([str(python), "-c", imported], cwd=outside, env=env)
        checks.expect(str(venv) in where.stdout, f"the suite imports from the virtualenv ({where.stdout.strip()})")
        gating = run([exe, "--docs", "gating"], cwd=outside, env=env)
        checks.expect(gating.returncode == 0 and gating.stdout.startswith("# Gating"), "--docs gating prints it")

        report_dir = outside / "report"
        cmd = [exe, "--adapter", "numpy", "--expectations", "builtin", "--report-dir", str(report_dir), *run_options]
        conformance = run(cmd, cwd=outside, env=env)
        print(conformance.stdout[-3000:] + conformance.stderr[-3000:], end="")
        checks.expect(conformance.returncode == 0, f"--adapter numpy is conformant (exit {conformance.returncode})")
        try:
            report = json.loads((report_dir / "report.json").read_text(encoding="utf-8"))
        except (OSError, ValueError) as exc:
            checks.expect(False, f"the run wrote report.json ({exc})")
        else:
            checks.expect(report.get("suite_version") == version, f"the report's suite_version is {version}")
            checks.expect("suite_commit" not in report, "the report names no commit (a wheel is no checkout)")
            checks.expect(report.get("verdict") == "conformant", f"the verdict is conformant ({report.get('verdict')})")
            checks.expect(report["summary"].get("passed", 0) > 0, f"checks passed ({report['summary']})")

    if checks.failures:
        print(f"\n{len(checks.failures)} check(s) failed:", *checks.failures, sep="\n  ")
        return 1
    print(f"\nthe distributions of {version} are ready to publish")
    return 0


if __name__ == "__main__":
    sys.exit(main())
