"""Shard folders as the PR check's GPU jobs leave them, without a GPU: a repository whose base commit holds
the judging files (one group, ``g``, of one timed benchmark with two cases) and whose head changes a path
of that group; each shard's manifest is the selection the check makes from them, beside both commits'
suites, the thresholds and the first readings of its cases."""

import dataclasses
import json
import subprocess
from pathlib import Path

from kernelgate.measure import results
from kernelgate.prcheck import check

JUNIT = '<testsuite tests="1"><testcase classname="t" name="test_kernel"/></testsuite>'
THRESHOLDS = """
[defaults]
max_slowdown = 0.05
gpu_classes = ["H100"]
"""
S1, S2 = "bench_a.A.time_x('s1')", "bench_a.A.time_x('s2')"
SUITE = {
    "bench_a.A.time_x": {"name": "bench_a.A.time_x", "type": "time", "params": [["'s1'", "'s2'"]],
                         "param_names": ["s"], "version": "1", "unit": "seconds"},
}  # fmt: skip


def group_map(tests: tuple[str, ...] = ()) -> str:
    """pr-check.toml with one group, ``g``: ``src/**`` selects it, ``docs/**`` nothing."""
    tests_list, benchmarks = json.dumps(list(tests)), json.dumps(["^bench_a\\."])
    return f'ignore = ["docs/**"]\n[group.g]\npaths = ["src/**"]\ntests = {tests_list}\nbenchmarks = {benchmarks}\n'


def git(repo: Path, *argv: str) -> str:
    ident = ["-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    return subprocess.run(["git", *ident, *argv], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    git(repo, "add", "-A")
    git(repo, "commit", "-qm", message)
    return git(repo, "rev-parse", "HEAD")


def timing_record(index: int, value: float) -> dict:
    return {"benchmark": "bench_a.A.time_x", "index": index, "kind": "time", "status": "ok",
            "samples": [value] * 4, "number": [1] * 4}  # fmt: skip


@dataclasses.dataclass
class ShardRun:
    """A base and head commit in ``repo``, and the shards' folders of one check of them in ``folder``."""

    repo: Path
    base: str
    head: str
    folder: Path

    @classmethod
    def make(
        cls, root: Path, thresholds: str = THRESHOLDS, tests: tuple[str, ...] = (), files: dict[str, str] | None = None
    ) -> "ShardRun":
        repo = root / "repo"
        repo.mkdir()
        git(repo, "init", "-q", "-b", "main")
        judging = {"perf-thresholds.toml": thresholds, "pr-check.toml": group_map(tests)}
        base = commit(repo, {**judging, "src/kernel.py": "x = 1\n", **(files or {})}, "base")
        head = commit(repo, {"src/kernel.py": "x = 2\n"}, "a kernel change")
        return cls(repo, base, head, root / "shards")

    def change(self, files: dict[str, str], message: str) -> str:
        """A new head: ``files`` changed on top of base."""
        git(self.repo, "checkout", "-q", "--detach", self.base)
        self.head = commit(self.repo, files, message)
        return self.head

    def shard(self, k: int, n: int, cases: dict, records: dict, groups: bool = True) -> Path:
        """Shard K of N, as its GPU job writes it (run from ``repo``); ``groups=False``: a change that
        selected nothing, so its job measured nothing."""
        out = self.folder / f"shard-{k}"
        out.mkdir(parents=True)
        plan = check.selected_plan(self.base, self.head, out, None)
        machine = {"machine": f"h100-host{k}", "gpu": "NVIDIA H100", "gpu_class": "H100", "cuda": "13.0"}
        plan.machine, plan.shard, plan.steps = machine, (k, n), [["benchmarks", 4.0, "ok"]]
        if not groups:
            dataclasses.replace(plan, groups=[], reasons={}, tests=[], benchmarks=[]).save(out)
            return out
        plan.cases = cases
        plan.save(out)
        for role in ("base", "head"):
            results.write_suite(out / "suites" / f"{role}.json", SUITE)
        (out / "measurements.json").write_text(json.dumps(records))
        return out

    def two_shards(self, junit: str | None = JUNIT) -> tuple[Path, Path]:
        """Two shards, one case each, head as fast as base; each with its tests' report unless ``junit`` is None."""
        shards = (
            self.shard(1, 2, {"base": [S1], "head": [S1]}, {r: {S1: timing_record(0, 1.0)} for r in ("base", "head")}),
            self.shard(2, 2, {"base": [S2], "head": [S2]}, {r: {S2: timing_record(1, 2.0)} for r in ("base", "head")}),
        )
        for shard in shards:
            if junit is not None:
                (shard / "junit").mkdir()
                (shard / "junit" / "gpu-tests.xml").write_text(junit)
        return shards

    def merge_argv(self, out: Path, count: int = 2) -> list[str]:
        return ["merge", "--base", self.base, "--head", self.head, "--shards", str(count), "--out", str(out),
                str(self.folder)]  # fmt: skip

    def expected(self, out: Path) -> check.Plan:
        return check.selected_plan(self.base, self.head, out, None)
