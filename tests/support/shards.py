"""Shard folders as a GPU job of the PR check leaves them, without a GPU: a plan, both commits'
suites, the base's thresholds and the first readings of one timed benchmark (two cases)."""

import json
from pathlib import Path

from kernelgate.prcheck import check, results

JUNIT = '<testsuite tests="1"><testcase classname="t" name="test_kernel"/></testsuite>'
THRESHOLDS = """
[defaults]
max_slowdown = 0.05
gpu_classes = ["H100"]
"""
S1, S2 = "bench_a.A.time_x('s1')", "bench_a.A.time_x('s2')"


def fake_shard(root: Path, k: int, n: int, cases: dict, records: dict) -> Path:
    out = root / f"shard-{k}"
    (out / "suites").mkdir(parents=True)
    (out / "trusted").mkdir()
    suite = {
        "bench_a.A.time_x": {"name": "bench_a.A.time_x", "type": "time", "params": [["'s1'", "'s2'"]],
                             "param_names": ["s"], "version": "1", "unit": "seconds"},
    }  # fmt: skip
    for role in ("base", "head"):
        results.write_suite(out / "suites" / f"{role}.json", suite)
    (out / "trusted" / "perf-thresholds.toml").write_text(THRESHOLDS)
    machine = {"machine": f"h100-host{k}", "gpu": "NVIDIA H100", "gpu_class": "H100", "cuda": "13.0", "python": "3.11"}
    plan = check.Plan("b" * 40, "c" * 40, machine, ["g"], {"g": ["x"]}, (k, n), [], [r"^bench_a\."], cases=cases)
    plan.dates = {"base": 0, "head": 1000}
    plan.steps = [["benchmarks", 4.0, "ok"]]
    plan.save(out)
    (out / "measurements.json").write_text(json.dumps(records))
    return out


def timing_record(index: int, value: float) -> dict:
    return {"benchmark": "bench_a.A.time_x", "index": index, "kind": "time", "status": "ok",
            "samples": [value] * 4, "number": [1] * 4}  # fmt: skip


def two_fake_shards(root: Path) -> tuple[Path, Path]:
    one = fake_shard(
        root,
        1,
        2,
        {"base": [S1], "head": [S1]},
        {"base": {S1: timing_record(0, 1.0)}, "head": {S1: timing_record(0, 1.0)}},
    )
    two = fake_shard(
        root,
        2,
        2,
        {"base": [S2], "head": [S2]},
        {"base": {S2: timing_record(1, 2.0)}, "head": {S2: timing_record(1, 2.0)}},
    )
    return one, two
