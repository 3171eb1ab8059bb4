"""The benchmark workers' measurements as asv result files, which the gate, the reports and asv's own tools read.

Layout under a results folder, as ``asv run`` writes it: ``benchmarks.json`` (head's suite),
``<machine>/machine.json`` and one ``<machine>/<commit[:8]>-<env>.json`` per commit (``-pr-check`` for the PR
check, ``-main`` for the main job). Cases a
run did not select are absent from its measurements and stored as failed (None): the gate judges
only the case ids it is given (``--cases``).
"""

import datetime
import json
import math
import statistics
from pathlib import Path

from asv import util
from asv.benchmarks import Benchmarks
from asv.machine import Machine
from asv.results import Results
from asv.runner import BenchmarkResult

ENV_NAME = "pr-check"


def write_suite(path: Path, suite: dict[str, dict]) -> None:
    """An asv benchmarks.json describing ``suite`` (asv's discovery output, by name)."""
    path.parent.mkdir(parents=True, exist_ok=True)
    util.write_json(str(path), suite, api_version=Benchmarks.api_version)


def write_machine(results_dir: Path, machine: dict) -> None:
    path = results_dir / machine["machine"] / "machine.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    util.write_json(str(path), machine, api_version=Machine.api_version)


def write_commit(
    results_dir: Path,
    machine: dict,
    commit: str,
    date_ms: int,
    suite: dict[str, dict],
    records: dict[str, dict],
    env_name: str = ENV_NAME,
    update: bool = False,
) -> Path:
    """One commit's result file from its records ({case id: record}, see ``workers.measure``). With
    ``update``, the cases measured replace theirs in an existing file of the same machine settings and
    the others are kept, as a partial ``asv run`` does."""
    python = machine.get("python", "")
    results = Results({**machine, "python": python}, {}, commit, date_ms, python, env_name, {})
    existing = results_dir / results._filename
    if update and existing.exists():
        earlier = Results.load(str(existing), machine_name=machine["machine"])
        results = earlier if earlier.params == results.params else results
    started = datetime.datetime.now(datetime.UTC)
    by_benchmark: dict[str, list[dict]] = {}
    for record in records.values():
        by_benchmark.setdefault(record["benchmark"], []).append(record)
    for name, measured in sorted(by_benchmark.items()):
        bench = suite[name]
        size = math.prod(len(p) for p in bench["params"]) if bench["params"] else 1
        value, samples, number = [None] * size, [None] * size, [None] * size
        for record in measured:
            i = record["index"]
            if record["status"] == "skipped":
                value[i] = math.nan
            elif record["status"] == "ok" and record["kind"] == "time":
                value[i], samples[i], number[i] = (
                    statistics.median(record["samples"]),
                    record["samples"],
                    record["number"],
                )
            elif record["status"] == "ok":
                value[i] = math.nan if record["value"] is None else record["value"]
        outcome = BenchmarkResult(value, samples, number, errcode=0, stderr="", profile=None)
        results.add_result(
            bench,
            outcome,
            started_at=started,
            duration=0.0,
            record_samples=True,
            selected_idx={r["index"] for r in measured},
        )
    results.save(str(results_dir))
    return results_dir / results._filename


def load_records(path: Path) -> dict:
    return json.loads(path.read_text())
