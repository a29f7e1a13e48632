"""The checks of one program run in one pytest-xdist worker (conformance/runner/scheduling.py)."""

from __future__ import annotations

import re
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests.conformance_run import run_suite
from transformer_conformance.conformance.runner.cli import pytest_args
from transformer_conformance.conformance.runner.scheduling import CHECKS_DIR, ProgramScheduling, program_group


def test_an_operations_checks_in_a_dtype_share_a_group() -> None:
    """Forward, gradient, size regimes and integrity checks of MLA in float32 are one group; another dtype, adapter
    or operation is another."""
    group = program_group(CHECKS_DIR, "test_mla.py::test_forward[torch-compile-full-float32]")
    assert group == "mla_attention[torch-compile-full-float32]"
    for nodeid in (
        "test_mla.py::test_gradient[torch-compile-full-float32]",
        "test_mla.py::test_regime_forward[torch-compile-full-float32]",
        "test_integrity.py::test_mla_attention[torch-compile-full-float32]",
        "test_integrity.py::test_mla_attention_gradient[torch-compile-full-float32]",
    ):
        assert program_group(CHECKS_DIR, nodeid) == group, nodeid
    for nodeid in (
        "test_mla.py::test_forward[torch-compile-full-bfloat16]",
        "test_mla.py::test_forward[torch-float32]",
        "test_integrity.py::test_attention[torch-compile-full-float32]",
    ):
        assert program_group(CHECKS_DIR, nodeid) != group, nodeid


def test_a_test_that_is_not_a_check_has_no_group(tmp_path: Path) -> None:
    assert program_group(CHECKS_DIR, "test_mla.py::not_a_check[numpy-float32]") is None
    assert program_group(CHECKS_DIR, "test_mla.py::test_forward") is None  # no parameters: no adapter
    (tmp_path / "test_mla.py").write_text("")
    assert program_group(tmp_path, "test_mla.py::test_forward[numpy-float32]") is None  # not the suite's module


def test_the_scheduler_keeps_an_xdist_group_mark_and_groups_the_rest() -> None:
    sched = ProgramScheduling.__new__(ProgramScheduling)  # the grouping alone: no workers to schedule on
    sched.root = CHECKS_DIR
    assert sched._split_scope("test_x.py::test_y[a]@mine") == "mine"
    assert sched._split_scope("test_rmsnorm.py::test_forward[numpy-float32]") == "rms_norm[numpy-float32]"
    assert sched._split_scope("elsewhere.py::test_z") == "elsewhere.py::test_z"


class Worker:
    """A pytest-xdist worker as the scheduler sees it: sent checks (indices into the collection) run in order; the last
    one is held back until another is sent or the worker is told to stop, as pytest-xdist's workers do."""

    def __init__(self, name: str) -> None:
        self.gateway = SimpleNamespace(id=name)
        self.shutting_down = False
        self.queue: list[int] = []

    def send_runtest_some(self, indices: list[int]) -> None:
        self.queue += indices

    def shutdown(self) -> None:
        self.shutting_down = True

    def runnable(self) -> bool:
        return len(self.queue) > 1 or (self.shutting_down and bool(self.queue))


COLLECTION = [
    f"test_{module}.py::test_{name}[numpy-{dtype}]"
    for module, names in (("rmsnorm", ("forward", "gradient", "scale_invariance")), ("rope", ("forward", "relative")))
    for dtype in ("float32", "bfloat16")
    for name in names
]


def scheduler(workers: int) -> ProgramScheduling:
    option = SimpleNamespace(loadscopereorder=True)
    config = SimpleNamespace(getvalue=lambda name: ["popen"] * workers, option=option, rootpath=CHECKS_DIR)
    return ProgramScheduling(config, None)  # type: ignore[arg-type]


def start(sched: ProgramScheduling, *names: str) -> list[Worker]:
    workers = [Worker(n) for n in names]
    for w in workers:
        sched.add_node(w)
    for w in workers:
        sched.add_node_collection(w, COLLECTION)
    sched.schedule()
    return workers


def run_one(sched: ProgramScheduling, worker: Worker, ran: dict[str, str]) -> None:
    index = worker.queue.pop(0)
    ran[COLLECTION[index]] = worker.gateway.id
    sched.mark_test_complete(worker, index)


def test_each_group_runs_whole_in_one_worker() -> None:
    sched = scheduler(2)
    workers = start(sched, "gw0", "gw1")
    ran: dict[str, str] = {}
    while any(w.runnable() for w in workers):
        for w in workers:
            if w.runnable():
                run_one(sched, w, ran)
    assert sorted(ran) == sorted(COLLECTION) and sched.tests_finished
    by_group: dict[str | None, set[str]] = {}
    for nodeid, worker in ran.items():
        by_group.setdefault(program_group(CHECKS_DIR, nodeid), set()).add(worker)
    assert len(by_group) == 4 and all(len(w) == 1 for w in by_group.values()), by_group


@pytest.mark.parametrize("workers", [1, 2])
def test_a_worker_that_dies_is_replaced_and_its_groups_go_on(workers: int) -> None:
    """The check a worker died in is reported once, not queued again; the rest of its group runs in the worker that
    replaces it, which is sent two checks or more (a worker holds back its last one), also when another replacement
    is still collecting."""
    sched = scheduler(workers)
    live = start(sched, *(f"gw{i}" for i in range(workers)))
    dead = live.pop(0)
    crashed = sched.remove_node(dead)
    assert crashed == COLLECTION[dead.queue[0]]
    late, fresh = Worker("late"), Worker("fresh")
    for w in (late, fresh):
        sched.add_node(w)
    sched.add_node_collection(fresh, COLLECTION)
    sched.schedule()  # the late worker has not collected yet: it is not scheduled, nor does it fail the others
    assert not late.queue and fresh.runnable()
    sched.add_node_collection(late, COLLECTION)
    sched.schedule()
    live += [fresh, late]
    ran: dict[str, str] = {}
    while any(w.runnable() for w in live):
        for w in live:
            if w.runnable():
                run_one(sched, w, ran)
    assert crashed not in ran
    assert sorted([*ran, crashed]) == sorted(COLLECTION)


def test_a_worker_sent_a_lone_check_is_sent_more_while_any_are_queued() -> None:
    """A worker holds back its last check until it is sent the next: one whose next group has a single check left (a
    group whose worker died in it) is sent another group too, or it waits for ever."""
    sched = scheduler(1)
    (worker,) = start(sched, "gw0")
    while len(sched.workqueue) > 1:  # run until one group is left queued
        run_one(sched, worker, {})
    while worker.queue:  # the worker finishes what it was sent, and is left with nothing
        worker.shutting_down = True
        index = worker.queue.pop(0)
        sched.assigned_work[worker][sched._split_scope(COLLECTION[index])][COLLECTION[index]] = True
    worker.shutting_down = False
    scope, unit = sched.workqueue.popitem()
    lone = next(iter(unit))
    sched.workqueue["lone"] = {lone: False}
    sched.workqueue[scope] = {n: False for n in unit if n != lone}
    sched._reschedule(worker)
    assert worker.runnable() and not sched.workqueue


def test_the_runner_distributes_by_group_unless_told_otherwise() -> None:
    assert pytest_args([])[-2:] == ["--dist", "loadgroup"]
    for chosen in (["--dist", "load"], ["--dist=worksteal"], ["-d"]):
        assert "loadgroup" not in pytest_args(chosen)


@pytest.mark.slow
def test_two_workers_run_each_group_whole(tmp_path: Path) -> None:
    """A real two-worker run: every check of one (operation, dtype) ran in one worker."""
    run = run_suite(
        tmp_path,
        *("--adapter", "numpy", "--behaviour", "rms_norm,layer_norm,integrity", "--dtype", "float32,bfloat16"),
        *("-k", "not integrity or rms_norm or layer_norm", "-n", "2", "-vv"),
    )
    assert run.returncode == 0, run.stdout[-3000:]
    workers: dict[str, set[str]] = {}
    for worker, nodeid in re.findall(r"^\[(gw\d)\] .*? (\S+::\S+\])\s*$", run.stdout, re.M):
        group = program_group(CHECKS_DIR, Path(nodeid).name)
        assert group is not None, nodeid
        workers.setdefault(group, set()).add(worker)
    assert len(workers) == 4, workers  # two operations in two dtypes
    assert all(len(w) == 1 for w in workers.values()), workers
