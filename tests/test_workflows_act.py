"""The workflows as GitHub would run them, by a real Actions engine: nektos/act runs gpu-pr.yml and main.yml
as written, on this machine, offline (tests/actions/engine.py): the pinned actions, act's artifact server, a
local origin with GitHub's pull request refs and the `asv-results` branch, and a stand-in for GitHub's REST
API that records what reached it. Each test runs act once and judges what reached that API (commit statuses,
the report comment), the jobs' results, the artifacts and the origin.

The GPU job's runner Python is a stand-in (tests/actions/gpu_runner.py): the project's own nox session and
PR check run for real and write a real shard folder, with only the GPU parts stood in (the device's entry,
the GPU tests' JUnit report, the timing samples).

What act does not exercise here, so these tests do not either:
* ``permissions:`` (every job gets the one token, which act also shows to ``run:`` steps), ``concurrency:``
  (no run is cancelled or queued) and runner groups (any job may take the GPU labels): docs/security.md's
  settings are GitHub's to enforce.
* ``strategy.job-index`` / ``strategy.job-total``: act has neither; the workflows do not use them.
* actions/deploy-pages (not available offline): main.yml's run stops before its Pages deployment job.
* Head's processes as KERNELGATE_HEAD_USER: another user cannot run the test session's interpreter (it lives
  under /root), so the stood-in runner has head run as the check; the GPU step's own check that the runner
  names a head user is exercised.
* The runner's Python 3.12: this machine's Python stands in for it in the tool cache.

act, node 24 and gh are installed by .ci/run; without them these tests SKIP, saying so.
"""

import ast
import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from actions.engine import API_TOKEN, REPO, ROOT, TOKEN, Engine, Origin, git, missing_tools, serving
from actions.gpu_runner import STORED_CASE, Config, calls, reference_environment, slowed, write_runner

from kernelgate.measure import references
from kernelgate.prcheck import selection

# One xdist worker runs them all, one after another: they share the wheelhouse, the engine and the origin.
pytestmark = pytest.mark.xdist_group("actions-engine")

MARKER = "<!-- perf-gate-report -->"
DOCS_PR, KERNEL_PR, PUSHED_PR, MOVED_PR = 7, 8, 9, 10
KERNEL_FILE = "kernels/layer_norm/ops.py"
SLOWER = 1.5  # head's time on one case, as a multiple of base's: far past any limit
LABEL = "full-gpu-suite"
GROUP_MAP = selection.load(ROOT / "pr-check.toml")
HEAD_USER = "nobody"
STORE = ".asv/results/references"  # where the GPU job checks out the references' store kept on asv-results


def wheels_the_jobs_install() -> list[str]:
    """What pip installs inside the jobs: the hash-pinned tools that select and judge."""
    return ["--require-hashes", "-r", str(ROOT / "requirements" / "verdict.txt")]


class GitHub:
    """The engine, the origin with its pull requests, and the runs made so far (each is made once)."""

    def __init__(self, root: Path):
        self.root = root
        wheelhouse = root / "wheelhouse"
        download = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(wheelhouse)]
        subprocess.run([*download, *wheels_the_jobs_install()], check=True, capture_output=True)
        self.engine = Engine(root / "engine", wheelhouse)
        self.origin = Origin(root / "origin")
        # The references' store as an earlier run of main kept it on asv-results: LayerNorm's times on an H200.
        times = {"LayerNorm/8192x4096-bfloat16-fwd": {"torch": 0.052, "copy": 0.031}}
        env = reference_environment("layer_norm", ROOT)
        earlier = references.record(root / "earlier" / "references", env, times, self.origin.main)
        self.stored = earlier.relative_to(root / "earlier").as_posix()
        self.origin.keep_on_asv_results(root / "earlier", [self.stored])
        self.docs = self.origin.pull_request(DOCS_PR, [{"docs/guide.md": "A new page.\n"}])
        kernel = {KERNEL_FILE: "\n# a comment\n"}
        self.kernel = self.origin.pull_request(KERNEL_PR, [kernel])
        # Approved at its first commit; its author pushed a second one since.
        self.pushed = self.origin.pull_request(PUSHED_PR, [kernel, {KERNEL_FILE: "# pushed later\n"}])
        self.moved = self.origin.pull_request(MOVED_PR, [kernel])
        self.runs: dict[str, Outcome] = {}

    def dispatch(
        self,
        name: str,
        pr: int,
        sha: str | None = None,
        shards: str = "1",
        labels: tuple[str, ...] = (),
        runner: Config | None = None,
        comments: tuple[dict, ...] = (),
        head_user: str | None = HEAD_USER,
        on_pending=None,
    ) -> "Outcome":
        """gpu-pr.yml dispatched for pull request ``pr`` at its approved head (or ``sha``), once per ``name``."""
        if name in self.runs:
            return self.runs[name]
        folder = self.root / name
        config = runner or Config(str(folder / "gpu-runner"))
        runner_env = {
            "KERNELGATE_RUNNER_PYTHON": str(write_runner(folder / "runner", config)),
            "KERNELGATE_GPU_LOCK": str(folder / "gpu.lock"),
            **({"KERNELGATE_HEAD_USER": head_user} if head_user else {}),
        }
        with serving(self.origin, self.engine) as api:
            api.labels[pr] = list(labels)
            api.comments[pr] = [dict(c) for c in comments]
            api.on_pending = on_pending
            start = time.perf_counter()
            run = self.engine.run(
                self.origin.clone(folder / "repo"), "gpu-pr.yml", "workflow_dispatch",
                {"ref": "refs/heads/main", "inputs": {"pr": pr, "sha": sha or self.origin.pulls[pr].head}},
                api, self.origin, env=runner_env, variables={"GPU_SHARDS": shards},
            )  # fmt: skip
            seconds = time.perf_counter() - start
        self.runs[name] = Outcome(run, api, config, folder, seconds)
        return self.runs[name]


class Outcome:
    def __init__(self, run, api, config: Config, folder: Path, seconds: float):
        self.run, self.api, self.config, self.folder, self.seconds = run, api, config, folder, seconds
        self.gpu_calls = calls(config)

    def artifact(self, name: str) -> Path:
        dest = self.folder / "artifacts" / name
        return dest if dest.is_dir() else self.run.artifact(name, dest)

    def selection(self) -> dict:
        return json.loads((self.artifact("pr-check-selection") / "selection.json").read_text())

    def verdict(self) -> dict:
        return json.loads((self.artifact("pr-check-verdict") / "gate" / "verdict.json").read_text())

    def perf_gate(self, sha: str) -> list[str]:
        """The states the commit status perf-gate took, in order; on ``sha`` alone."""
        states = [s for s in self.api.statuses() if s.get("context") == "perf-gate"]
        assert all(s["sha"] == sha for s in states), f"perf-gate set on another commit: {states}"
        return [s["state"] for s in states]

    def report(self) -> str:
        """The report comment's body, written once."""
        writes = self.api.comment_writes()
        assert len(writes) == 1, f"one report comment, not {[w.path for w in writes]}"
        body = writes[0].body["body"]
        assert body.startswith(MARKER)
        return body

    def explain(self) -> str:
        log = self.run.folder / "act.log"
        return f"act exited {self.run.returncode}, jobs {self.run.jobs}, {log}:\n{self.run.log[-6000:]}"


@pytest.fixture(scope="module")
def github(tmp_path_factory):
    reason = missing_tools()
    if reason:
        pytest.skip(f"NOT RUN: the workflows run under nektos/act, and {reason} (.ci/run installs act, node 24, gh)")
    return GitHub(tmp_path_factory.mktemp("actions"))


def kernel_change(github: GitHub, shards: int, slower: float = 1.0, comments: tuple[dict, ...] = ()) -> "Outcome":
    name = f"kernel-{shards}-shards{'-slower' if slower != 1.0 else ''}"
    config = Config(str(github.root / name / "gpu-runner"), slower=slower)
    return github.dispatch(name, KERNEL_PR, shards=str(shards), runner=config, comments=comments)


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def test_a_documentation_change_gets_its_verdict_without_a_gpu_job(github):
    out = github.dispatch("docs", DOCS_PR)
    assert out.run.jobs == {"approve": ["success"], "verdict": ["success"]}, out.explain()
    assert out.gpu_calls == [], "no GPU runner starts for a change that selects nothing"
    merge = git(github.origin.bare, "rev-parse", f"refs/pull/{DOCS_PR}/merge")
    assert out.selection() == {"base": github.origin.main, "head": merge, "groups": []}
    assert out.perf_gate(github.docs.head) == ["pending", "success"]
    report = out.report()
    assert "PR check ✅ passed" in report and "nothing: no changed path selects a group" in report
    # gh reached the stand-in as an Enterprise host; github-script with the job's token.
    assert out.api.requests[0].authorization == f"token {API_TOKEN}"
    assert {r.authorization for r in out.api.requests if r.path.endswith("/comments")} == {f"token {TOKEN}"}


@pytest.mark.parametrize("shards", [1, 2])
def test_a_kernel_change_as_fast_as_base_is_green(github, shards):
    out = kernel_change(github, shards)
    merge = git(github.origin.bare, "rev-parse", f"refs/pull/{KERNEL_PR}/merge")
    groups = list(selection.select(GROUP_MAP, [KERNEL_FILE]).groups)
    assert out.selection() == {"base": github.origin.main, "head": merge, "groups": groups}
    # Each shard's GPU job ran the PR check on base and the test merge, holding the runner's GPU lock, with the
    # references' store that main's runs keep on asv-results.
    shares = sorted(option(c["argv"], "--shard") for c in out.gpu_calls)
    assert shares == [f"{k}/{shards}" for k in range(1, shards + 1)], out.explain()
    for call in out.gpu_calls:
        assert (option(call["argv"], "--base"), option(call["argv"], "--head")) == (github.origin.main, merge)
        assert option(call["argv"], "--full") is None
        assert option(call["argv"], "--references") == STORE
        assert github.stored in [f"references/{name}" for name in call["store"]]
        assert call["env"] == {"KERNELGATE_GPU_LOCK": str(out.folder / "gpu.lock"), "KERNELGATE_HEAD_USER": HEAD_USER}
    assert out.run.jobs == {"approve": ["success"], "gpu": ["success"] * shards, "verdict": ["success"]}, out.explain()
    assert out.perf_gate(github.kernel.head) == ["pending", "success"]
    report = out.report()
    assert "PR check ✅ passed" in report and f"The verdict on all {shards} shards, merged." in report
    verdict = out.verdict()
    assert verdict["passed"] is True and verdict["gpu"] == "NVIDIA H200"
    assert sum(f["check"] == "slowdown" for f in verdict["findings"]) > 0


@pytest.mark.parametrize("shards", [1, 2])
def test_a_kernel_change_slower_on_one_case_is_red_and_the_report_names_it(github, shards):
    # With two shards, an earlier report is there to be updated: one report comment, kept current.
    earlier = {"id": 11, "user": {"login": "github-actions[bot]", "type": "Bot"}, "body": f"{MARKER}\nearlier"}
    out = kernel_change(github, shards, slower=SLOWER, comments=(earlier,) if shards == 2 else ())
    assert out.perf_gate(github.kernel.head) == ["pending", "failure"], out.explain()
    assert out.run.jobs["verdict"] == ["failure"], "the job fails with the check"
    benchmark, params = re.fullmatch(r"(\w+\.\w+\.\w+)\((.*)\)", slowed(out.config)).groups()
    label = ", ".join(map(str, ast.literal_eval(f"({params},)")))
    failed = [(f["check"], f["benchmark"], f["case"]) for f in out.verdict()["findings"] if f["verdict"] == "fail"]
    assert failed == [("slowdown", benchmark, label)]
    assert f"| **fail** | {benchmark.split('.', 1)[1]} | {label} | slowdown |" in out.report()
    if shards == 2:
        assert [(r.method, r.path.rsplit("/", 1)[1]) for r in out.api.comment_writes()] == [("PATCH", "11")]


@pytest.mark.parametrize("slower", [1.0, SLOWER], ids=["as fast", "slower"])
def test_one_and_two_shards_give_the_same_verdict_for_the_same_measurements(github, slower):
    one, two = (kernel_change(github, shards, slower) for shards in (1, 2))
    judged = lambda out: sorted(
        (f["check"], f["benchmark"], f["case"], f["verdict"], f["ratio"])
        for f in out.verdict()["findings"]
        if f["check"] != "tests"  # one report of the GPU tests per shard
    )
    assert len(judged(one)) > 100 and judged(one) == judged(two)
    for out, shards in ((one, 1), (two, 2)):
        assert [f["verdict"] for f in out.verdict()["findings"] if f["check"] == "tests"] == ["pass"] * shards
    assert one.verdict()["passed"] == two.verdict()["passed"] == (slower == 1.0)


def test_the_full_suite_label_selects_every_group(github):
    out = github.dispatch("label", DOCS_PR, labels=(LABEL,))
    assert out.selection()["groups"] == list(GROUP_MAP.groups) != []
    assert [option(c["argv"], "--full") for c in out.gpu_calls] == [f"label {LABEL}"], out.explain()
    assert out.perf_gate(github.docs.head) == ["pending", "success"], out.explain()
    report = out.report()
    assert all(f"- **{group}**: label {LABEL}" in report for group in GROUP_MAP.groups)


@pytest.mark.parametrize(
    ("case", "sha", "shards", "error"),
    [
        ("pushed after approval", None, "1", "is at {head}, not at the approved {approved}"),
        ("a short sha", "short", "1", "sha must be a full commit hash"),
        ("no shards", None, "0", "the GPU_SHARDS variable must be 1 to 99"),
    ],
)
def test_a_dispatch_that_is_not_of_the_approved_head_stops_before_any_gpu_job(github, case, sha, shards, error):
    approved = github.pushed.head
    out = github.dispatch(
        f"refused-{case.replace(' ', '-')}", PUSHED_PR, sha=approved[:12] if sha == "short" else approved, shards=shards
    )
    assert out.run.jobs == {"approve": ["failure"]}, out.explain()
    assert error.format(head=github.origin.head_of(PUSHED_PR), approved=approved) in out.run.log
    assert out.gpu_calls == [] and out.api.statuses() == [] and out.api.comment_writes() == []


def test_a_test_merge_that_moves_after_the_selection_is_not_measured(github):
    """Main moves on while the check waits for a GPU runner: GitHub re-merges, and the merge the selection
    judged is no longer the pull request's."""
    out = github.dispatch("moved", MOVED_PR, on_pending=lambda: github.origin.base_moved(MOVED_PR))
    assert out.run.jobs["approve"] == ["success"] and out.run.jobs["gpu"] == ["failure"], out.explain()
    assert out.gpu_calls == [], "nothing measured"
    assert f"pull request {MOVED_PR}'s test merge moved since its selection" in out.run.log
    assert out.perf_gate(github.moved.head) == ["pending", "failure"]
    assert "PR check ✅ passed" not in out.report()


def test_a_gpu_runner_that_names_no_head_user_measures_nothing_and_the_check_is_red(github):
    out = github.dispatch("no-head-user", KERNEL_PR, head_user=None)
    assert out.run.jobs["gpu"] == ["failure"] and out.gpu_calls == [], out.explain()
    # The PR check's step stops at its first line (KERNELGATE_HEAD_USER unset) before calling the runner's
    # Python. act prints the step's outcome itself; the step's own message, 3 ms of output, it can drop.
    assert re.search(r"^\[gpu\]\s+❌\s+Failure - Main PR check, one shard", out.run.log, re.MULTILINE), out.explain()
    assert out.perf_gate(github.kernel.head) == ["pending", "failure"]
    assert "shard-1 of 1 left no results" in out.report()


@pytest.mark.parametrize("tamper", ["groups", "thresholds"])
def test_a_shard_rewritten_by_a_hostile_head_is_red(github, tamper):
    """Head's code runs in the GPU job that writes the shard: here its files are rewritten after the check
    (its manifest selects nothing, or its limits are loosened past the one slow case) and the job ends green."""
    name = f"hostile-{tamper}"
    out = github.dispatch(name, KERNEL_PR, runner=Config(str(github.root / name / "gpu-runner"), SLOWER, tamper))
    assert out.run.jobs["gpu"] == ["success"], out.explain()
    assert out.perf_gate(github.kernel.head) == ["pending", "failure"], out.explain()
    report = out.report()
    if tamper == "groups":
        assert "shard-1's manifest is not of this selection: its groups is []" in report
    else:  # judged by base's limits, from git
        failed = [f["case"] for f in out.verdict()["findings"] if f["verdict"] == "fail"]
        assert len(failed) == 1 and f"| {failed[0]} | slowdown |" in report


def test_main_keeps_the_benchmark_jobs_result_files_and_the_references_store_on_asv_results(github):
    folder = github.root / "main"
    config = Config(str(folder / "gpu-runner"))
    runner_env = {
        "KERNELGATE_RUNNER_PYTHON": str(write_runner(folder / "runner", config)),
        "KERNELGATE_GPU_LOCK": str(folder / "gpu.lock"),
    }
    before = git(github.origin.bare, "rev-parse", "asv-results")
    with serving(github.origin, github.engine) as api:
        # The persisting job and the benchmark job it needs; the Pages deployment after them is not run.
        run = github.engine.run(
            github.origin.clone(folder / "repo"), "main.yml", "push",
            {"ref": "refs/heads/main", "after": github.origin.main}, api, github.origin, env=runner_env, job="persist",
        )  # fmt: skip
    assert run.jobs == {"benchmark": ["success"], "persist": ["success"]}, run.log[-6000:]
    assert [c["argv"] for c in calls(config)] == [["-m", "nox", "--no-venv", "-s", "bench"]]
    assert [f"references/{name}" for name in calls(config)[0]["store"]] == [github.stored], "the store it read"
    uploaded = run.artifact("asv-results", folder / "uploaded")
    written = sorted(p.relative_to(uploaded).as_posix() for p in uploaded.rglob("*") if p.is_file())
    kept = git(github.origin.bare, "ls-tree", "-r", "--name-only", "asv-results").splitlines()
    assert kept == written and "benchmarks.json" in kept
    # The store it added to, beside the results: the earlier entry, and this run's.
    added = references.entry_path(Path("references"), reference_environment("rms_norm", ROOT)).as_posix()
    assert sorted(name for name in kept if name.startswith("references/")) == sorted([github.stored, added])
    entry = json.loads(git(github.origin.bare, "show", f"asv-results:{added}"))
    assert list(entry["times"]) == [STORED_CASE] and entry["commit"] == github.origin.main
    assert git(github.origin.bare, "rev-parse", "asv-results^") == before, "one commit, on top of the branch"
    assert git(github.origin.bare, "log", "-1", "--format=%s", "asv-results") == f"asv results for {github.origin.main}"
    assert {r.path for r in api.requests} <= {f"repos/{REPO}/hash-algorithm"}, "no status, no comment"
