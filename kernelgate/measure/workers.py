"""Benchmark workers: the main job's one commit, or the PR check's base and head, benchmarked case by case,
interleaved, on one GPU.

One worker process per commit (``worker.py``, in that commit's environment and checkout) keeps
the asv suite of that commit loaded. For each selected time_* case both workers set the case up,
then take turns: a few samples of base, a few of head, then head, base, ... for ``rounds`` rounds,
so that clock and thermal drift fall on both commits alike and no case waits minutes between
its base and head samples. track_* cases (floors on head's values) are measured on head only. The main
job runs one side alone, a worker per GPU.

Each commit is measured with its own suite: a case that only base declares is one the change
removed, which the gate reports (``--base-suite``).
"""

import contextlib
import dataclasses
import json
import os
import re
import select
import signal
import subprocess
import time
from collections.abc import Iterable
from pathlib import Path

from kernelgate import asv_case
from kernelgate.asv_case import Case
from kernelgate.measure.progress import Progress, lines_since, log_size

ROUNDS = 4  # base/head turns per case; the order alternates each round
SAMPLES_PER_ROUND = 5  # asv samples per turn: ROUNDS * SAMPLES_PER_ROUND samples per commit and case
WORKER = Path(__file__).with_name("worker.py")


class WorkerError(RuntimeError):
    """A worker died or answered with an error the run cannot continue past."""


class CaseLost(WorkerError):
    """The worker stopped during a case: it exited, or it ran past the benchmark's timeout and was stopped.
    The case fails with the reason and a fresh worker takes the next one (as after an answer that says
    the worker's CUDA context is broken: ``worker.py``)."""


# A run stops when one commit's worker is lost on this many cases in a row: its environment, not a case, is broken.
LOST_IN_A_ROW = 3


@dataclasses.dataclass(frozen=True)
class Side:
    """One commit as its worker runs it."""

    role: str  # "base" or "head"
    commit: str
    tree: Path  # its checkout
    python: Path  # its environment's interpreter
    env: dict[str, str]  # the whole environment its processes start with
    log: Path  # the worker's stderr
    as_user: dict = dataclasses.field(default_factory=dict)  # Popen's arguments that start them as another user


class Worker:
    def __init__(self, side: Side):
        self.side = side
        side.log.parent.mkdir(parents=True, exist_ok=True)
        self.log = side.log.open("a")
        env = {**side.env, "PYTHONUNBUFFERED": "1"}
        argv = [str(side.python), "-P", str(WORKER), str(side.tree / "benchmarks")]
        self.proc = subprocess.Popen(
            argv, cwd=side.tree, env=env, stdin=subprocess.PIPE, stdout=subprocess.PIPE, stderr=self.log, text=True,
            start_new_session=True,  # its own process group: stopping it stops what it started
            **side.as_user,
        )  # fmt: skip

    def send(self, op: str, **request) -> None:
        try:
            self.proc.stdin.write(json.dumps({"op": op, **request}) + "\n")
            self.proc.stdin.flush()
        except BrokenPipeError as exc:
            raise self._died() from exc

    def receive(self, timeout: float | None = None) -> dict:
        """The answer to the last request; past ``timeout`` seconds the worker is stopped (``CaseLost``), and
        so is a worker whose answer says it can run no further case (``fatal``)."""
        # One answer per request, written and flushed whole: nothing is left buffered between answers.
        if timeout is not None and not select.select([self.proc.stdout], [], [], timeout)[0]:
            self.stop()
            raise CaseLost(
                f"no answer from the {self.side.role} worker within the benchmark's timeout, {timeout:.0f} s"
            )
        line = self.proc.stdout.readline()
        if not line:
            raise self._died()
        try:
            reply = json.loads(line)
        except ValueError as exc:
            raise WorkerError(f"the {self.side.role} worker answered what is not JSON: {line[:200]!r}") from exc
        if "fatal" in reply:
            self.stop()
        return reply

    def ask(self, op: str, timeout: float | None = None, **request) -> dict:
        self.send(op, **request)
        reply = self.receive(timeout)
        if "error" in reply:
            raise WorkerError(f"{self.side.role} worker, {op}: {reply['error']}")
        return reply

    def _died(self) -> CaseLost:
        self.proc.wait(timeout=30)
        tail = self.side.log.read_text(errors="replace")[-3000:]
        return CaseLost(f"the {self.side.role} worker exited ({self.proc.returncode}); its log ends:\n{tail}")

    @property
    def alive(self) -> bool:
        return self.proc.poll() is None

    def stop(self) -> None:
        """Kill the worker and every process it started."""
        with contextlib.suppress(ProcessLookupError):
            os.killpg(self.proc.pid, signal.SIGKILL)
        self.proc.wait(timeout=60)

    def close(self) -> None:
        if self.proc.poll() is None:
            self.proc.stdin.close()
            try:
                self.proc.wait(timeout=60)
            except subprocess.TimeoutExpired:
                self.proc.kill()
        self.log.close()


def measured_cases(suite: dict[str, dict]) -> list[Case]:
    """Every time_* and track_* case of a suite (asv's discovery output, by benchmark name)."""
    return [c for c in asv_case.suite_cases(suite) if suite[c.benchmark]["type"] in ("time", "track")]


def selected(cases: Iterable[Case], patterns: list[str]) -> list[Case]:
    return [c for c in cases if any(re.search(p, c.asv_id) for p in patterns)]


def discover(sides: list[Side]) -> dict[str, dict[str, dict]]:
    """Each commit's own suite, by benchmark name (its workers load it side by side)."""
    workers = {side.role: Worker(side) for side in sides}
    try:
        for worker in workers.values():
            worker.send("discover")
        suites = {}
        for role, worker in workers.items():
            reply = worker.receive()
            if "error" in reply:
                raise WorkerError(f"{role}: the asv suite did not load:\n{reply['error']}")
            suites[role] = {b["name"]: b for b in reply["benchmarks"]}
        return suites
    finally:
        for worker in workers.values():
            worker.close()


def failure(message: str, stage: str = "", lost: bool = False) -> dict:
    """A failed case's record: the ``message`` (its last 2000 characters) and a one-line ``reason``, the
    message's first line for a lost worker (what became of it), else its last (the exception raised)."""
    lines = [line.strip() for line in message.splitlines() if line.strip()] or ["(no message)"]
    prefix = f"{stage}: " if stage else ""
    reason = lines[0] if lost else lines[-1]
    return {"status": "failed", "message": f"{prefix}{message}"[-2000:], "reason": f"{prefix}{reason}"[:300]}


def _time_case(case: Case, workers: dict[str, Worker], rounds: int, samples: int) -> dict[str, dict]:
    records = {}
    for role, worker in workers.items():
        try:
            worker.send("setup", name=case.benchmark, index=case.index)
        except CaseLost as exc:
            records[role] = failure(str(exc), "setup", lost=True)
    for role, worker in workers.items():
        if role in records:
            continue
        try:
            reply = worker.receive(case.timeout)
        except CaseLost as exc:
            records[role] = failure(str(exc), "setup", lost=True)
            continue
        if "error" in reply:
            raise WorkerError(f"{role} worker, setup: {reply['error']}")
        if reply["status"] == "failed":
            records[role] = failure(reply["message"], "setup")
        elif reply["status"] != "ok":
            records[role] = {"status": reply["status"], "message": reply["message"][-2000:]}
    active = [role for role in workers if role not in records]
    taken = {role: {"status": "ok", "samples": [], "number": []} for role in active}
    for turn in range(rounds):
        for role in active if turn % 2 == 0 else active[::-1]:
            if taken[role]["status"] != "ok":
                continue
            try:
                reply = workers[role].ask("sample", timeout=case.timeout, count=samples)
            except CaseLost as exc:
                taken[role] = failure(str(exc), "samples", lost=True)
                continue
            if "samples" not in reply:
                taken[role] = failure(str(reply.get("failed", reply)), "samples")
                continue
            taken[role]["samples"] += reply["samples"]
            taken[role]["number"] += reply["number"] if isinstance(reply["number"], list) else [reply["number"]]
    for role in active:
        if workers[role].alive:
            with contextlib.suppress(CaseLost):  # the samples stand; the lost worker is replaced
                workers[role].ask("teardown")
    return {**records, **taken}


def _track_cases(cases: list[Case], workers: dict[str, Worker], role: str, progress: Progress) -> dict[str, dict]:
    records = {}
    by_benchmark: dict[str, list[Case]] = {}
    for case in cases:
        by_benchmark.setdefault(case.benchmark, []).append(case)
    by_class: dict[str, list[list]] = {}  # each value's parameters, and the metric it is for
    tracked: dict[str, list[str]] = {}
    for case in cases:
        owner, method = case.benchmark.rsplit(".", 1)
        by_class.setdefault(owner, []).append(case.values)
        tracked.setdefault(owner, []).append(method.removeprefix("track_"))
    lost_classes: dict[str, str] = {}  # a class's values share its setup_cache: one lost, the rest are not asked
    asked: set[str] = set()
    for name, group in by_benchmark.items():
        owner = name.rsplit(".", 1)[0]
        worker = workers[role]
        timeout = group[0].setup_cache_timeout + sum(c.timeout for c in group)
        if owner not in asked:  # its setup_cache measures every case now, printing a line for each
            asked.add(owner)
            units = len({tuple(values[:-1]) for values in by_class[owner]})
            log, offset = worker.side.log, log_size(worker.side.log)
            done_share = lambda log=log, offset=offset, units=units: lines_since(log, offset, "measured ") / units
            progress.pending = (len(by_class[owner]), done_share)
        try:
            if owner in lost_classes:
                raise CaseLost(f"not measured: a value of {owner} was lost before it ({lost_classes[owner]})")
            indices = [c.index for c in group]
            reply = worker.ask(
                "track", timeout=timeout, name=name, indices=indices, selected=by_class[owner], tracked=tracked[owner]
            )
        except CaseLost as exc:
            lost_classes.setdefault(owner, str(exc).splitlines()[0])
            for case in group:
                records[case.asv_id] = {"benchmark": case.benchmark, "index": case.index, "kind": "track",
                                    **failure(str(exc), lost=True)}  # fmt: skip
            _replace_lost(workers, {role: [str(exc)]})
            progress.counted(progress.done + len(group), progress.total)
            continue
        errors = reply.get("errors") or [None] * len(group)
        for case, value, error in zip(group, reply["values"], errors, strict=True):
            found = failure(error or f"see {worker.side.log}") if value is None else {"status": "ok", "value": value}
            records[case.asv_id] = {"benchmark": case.benchmark, "index": case.index, "kind": "track", **found}
        if "fatal" in reply:
            lost_classes.setdefault(owner, reply["fatal"])
            _replace_lost(workers, {role: [reply["fatal"]]})
        progress.counted(progress.done + len(group), progress.total)
    return records


def _replace_lost(workers: dict[str, Worker], lost: dict[str, list[str]]) -> None:
    """A fresh worker for each one lost on a case, for the cases after it. ``lost`` holds each role's
    reasons since its last case measured; at ``LOST_IN_A_ROW`` of them the run stops."""
    for role, worker in workers.items():
        if worker.alive:
            continue
        if len(lost.get(role, [])) >= LOST_IN_A_ROW:
            raise WorkerError(
                f"the {role} worker was lost on {LOST_IN_A_ROW} cases in a row; the last:\n{lost[role][-1]}"
            )
        worker.close()
        workers[role] = Worker(worker.side)


def measure(
    sides: list[Side],
    cases: dict[str, list[Case]],
    rounds: int = ROUNDS,
    samples: int = SAMPLES_PER_ROUND,
    progress: Progress | None = None,
) -> dict[str, dict[str, dict]]:
    """{role: {case id: record}}: every case of ``cases[role]`` measured on its commit.

    A record holds ``status`` ("ok", "failed", "skipped"), and ``samples`` and ``number`` (time) or
    ``value`` (track), or a ``message`` (and, failed, its one-line ``reason``). Time cases both commits
    declare are interleaved. ``progress`` is told the cases done and the workers' logs.
    """
    workers = {side.role: Worker(side) for side in sides}
    records: dict[str, dict[str, dict]] = {side.role: {} for side in sides}
    progress = progress or Progress()
    progress.logs.update({f"{side.role} worker": side.log for side in sides})
    try:
        timed = sorted({c for role_cases in cases.values() for c in role_cases if c.kind == "time"})
        tracked = {role: [c for c in role_cases if c.kind == "track"] for role, role_cases in cases.items()}
        total = len(timed) + sum(map(len, tracked.values()))
        start = time.perf_counter()
        lost: dict[str, list[str]] = {role: [] for role in workers}
        for done, case in enumerate(timed, 1):
            present = {role: w for role, w in workers.items() if case in cases[role]}
            for role, record in _time_case(case, present, rounds, samples).items():
                records[role][case.asv_id] = {
                    "benchmark": case.benchmark,
                    "index": case.index,
                    "kind": "time",
                    **record,
                }
                gone = record["status"] != "ok" and not workers[role].alive
                lost[role] = [*lost[role], record["message"]] if gone else []
            _replace_lost(workers, lost)
            progress.counted(done, total)
            print(_progress(done, len(timed), start, case, records), flush=True)
        for role in list(workers):
            if tracked[role]:
                print(f"  {role}: {len(tracked[role])} track_* cases", flush=True)
                records[role].update(_track_cases(tracked[role], workers, role, progress))
    finally:
        for worker in workers.values():
            worker.close()
    return records


def _median(values: list[float]) -> float:
    ordered = sorted(values)
    mid = len(ordered) // 2
    return ordered[mid] if len(ordered) % 2 else (ordered[mid - 1] + ordered[mid]) / 2


def _progress(done: int, total: int, start: float, case: Case, records: dict) -> str:
    cells = []
    for role in ("base", "head"):
        record = records.get(role, {}).get(case.asv_id)
        if record is None:
            continue
        if record["status"] == "ok":
            cells.append(f"{role} {_median(record['samples']) * 1e6:.1f} us")
        else:
            cells.append(f"{role} {record['status']}")
    elapsed = time.perf_counter() - start
    return f"  [{done}/{total} {elapsed:.0f} s] {case.asv_id}: {', '.join(cells)}"
