"""Which pytest-xdist worker runs which check: the checks of one program in one worker.

A candidate that compiles (``torch.compile``, ``jax.jit``, an ONNX export, a Triton or Pallas kernel) builds its
programs in each worker process that calls it, and the checks of one operation in one dtype call the same
programs: its forward, gradient, integrity and decoding checks run the same graph at the shapes its plan states.
pytest-xdist's ``load`` distribution sends each check to whichever worker is free, so with two workers many
programs were built twice (a fifth of ``torch-compile-full``'s: 956 builds, 775 programs). Under ``--dist
loadgroup`` (the runner's default, cli.py) :class:`ProgramScheduling` sends the checks of one (operation, adapter,
dtype) to one worker, the largest groups first: each program is built once a run. A test of no operation (none of
the suite's checks) goes alone.

It stands in for pytest-xdist's own ``loadgroup`` scheduler, whose groups are ``xdist_group`` marks carried in
the node id, which pytest 9.2's structured node ids no longer carry (pytest-xdist issue 1386); a node id that
does carry one keeps its group. The grouping decides where a check runs, never what it draws or calls: a check's
examples depend on the check and the candidate alone (profiles.py).
"""

from __future__ import annotations

import functools
import importlib
from pathlib import Path
from typing import Any

import pytest
from xdist.scheduler import LoadScopeScheduling

#: the package of the check modules, and its folder (as cli.py's, which this module cannot import: cli -> plugin)
CHECKS_PACKAGE = "transformer_conformance.conformance.checks"
CHECKS_DIR = Path(__file__).resolve().parent.parent / "checks"


@functools.cache
def check_ops(module: str) -> dict[str, str]:
    """The operation each check of a check module (``test_rmsnorm``) calls, by test function name: its
    ``conformance`` marker's ``op`` (conformance/harness/marks.py). Checks of no operation are left out."""
    found = importlib.import_module(f"{CHECKS_PACKAGE}.{module}")
    ops: dict[str, str] = {}
    for name, value in vars(found).items():
        for mark in getattr(value, "pytestmark", ()):
            if mark.name == "conformance" and mark.kwargs.get("op"):
                ops[name] = str(mark.kwargs["op"])
    return ops


def program_group(root: Path, nodeid: str) -> str | None:
    """The group of a check's node id (``test_mla.py::test_forward[torch-compile-float32]``, relative to
    ``root``): its operation and parameters (``mla_attention[torch-compile-float32]``), or None for a test that is
    not one of this suite's checks or names no operation."""
    path, sep, rest = nodeid.partition("::")
    name, bracket, params = rest.partition("[")
    file = (root / path).resolve()
    if not sep or not bracket or file.parent != CHECKS_DIR or file.suffix != ".py":
        return None
    op = check_ops(file.stem).get(name)
    return None if op is None else f"{op}[{params}"


class ProgramScheduling(LoadScopeScheduling):  # type: ignore[misc]  # pytest-xdist has no type hints
    """pytest-xdist's scope scheduling, a scope being a check's :func:`program_group` (module docstring)."""

    def __init__(self, config: pytest.Config, log: Any = None) -> None:
        super().__init__(config, log)
        self.root = config.rootpath

    def _split_scope(self, nodeid: str) -> str:
        if nodeid.rfind("@") > nodeid.rfind("]"):  # an xdist_group mark, as pytest-xdist's loadgroup reads it
            return nodeid.rsplit("@", 1)[-1]
        return program_group(self.root, nodeid) or nodeid

    def _reschedule(self, node: Any) -> None:
        """As pytest-xdist's, and then at least two checks queued on the worker while any are left: a worker holds
        back its last check until it is sent the next one or told to stop. pytest-xdist's scope scheduling tops a
        worker up only as its checks complete, so the worker replacing one that died, sent a single check, waited
        for ever."""
        if node not in self.registered_collections:  # a replacing worker still collecting: scheduled once it has
            return
        super()._reschedule(node)
        while not node.shutting_down and self.workqueue and self._pending_of(self.assigned_work[node]) < 2:
            self._assign_work_unit(node)

    def remove_node(self, node: Any) -> str | None:
        """A worker finished, or died in a check: returns that check, and queues the rest of its groups again. Unlike
        pytest-xdist's scope scheduling, the check it died in is not queued again: a candidate that ends its process
        fails the check it was in (the report's "ended the process"), once, and its group's other checks still run
        in the worker that replaces it. Queued again, it would end each new worker in turn, until pytest-xdist stops
        replacing them and the checks still queued never run."""
        workload: dict[str, dict[str, bool]] = self.assigned_work.pop(node)
        pending = [(scope, nodeid) for scope, unit in workload.items() for nodeid, done in unit.items() if not done]
        if not pending:
            return None
        scope, crashed = pending[0]  # a worker runs its checks in the order they were sent
        workload[scope][crashed] = True
        self.workqueue.update({s: unit for s, unit in workload.items() if not all(unit.values())})
        for other in self.assigned_work:
            self._reschedule(other)
        return crashed
