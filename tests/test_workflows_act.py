"""The workflows as GitHub would run them, by a real Actions engine: nektos/act runs gpu-pr.yml and main.yml
as written, on this machine, offline (tests/actions/engine.py): the pinned actions, act's artifact
server, a local origin with GitHub's pull request refs and the `asv-results` branch, and a stand-in for
GitHub's REST API that records what reached it. Each test runs act once and judges what reached that API
(commit statuses, the report comment), the jobs' results, the artifacts and the origin.

The GPU job's runner Python is a stand-in (tests/actions/gpu_runner.py): the project's own nox session and
PR check run for real and write a real shard folder, with only the GPU parts stood in (the device's
entry, the GPU tests' JUnit report, the timing samples).

What act does not exercise here, so these tests do not either:
* ``permissions:`` (every job gets the one token), ``concurrency:`` (no run is cancelled or queued), and
  runner groups (any job may take the GPU labels): docs/security.md's settings are GitHub's to enforce.
* ``strategy.job-index`` / ``strategy.job-total``: act has neither (the workflow does not rely on them).
* actions/deploy-pages (not available offline): main.yml's run stops before its Pages deployment job.
* Head's processes as KERNELGATE_HEAD_USER: the runner's Python here lives where another user cannot run
  it, so the stood-in runner has head run as the check (the variable still reaches the GPU job).
* The runner's real Python 3.12: this machine's Python stands in for it in the tool cache.

act is installed by .ci/run (with node 24 and gh); without them these tests SKIP, saying so.
"""

import json
import re
import subprocess
import sys
import time
from pathlib import Path

import pytest
from actions.engine import API_TOKEN, REPO, ROOT, TOKEN, Engine, Origin, git, missing_tools, serving
from actions.gpu_runner import Config, calls, write_runner

# One xdist worker runs them all, one after another: they share the engine's wheelhouse and origin.
pytestmark = pytest.mark.xdist_group("actions-engine")

MARKER = "<!-- perf-gate-report -->"
DOCS_PR, KERNEL_PR, PUSHED_PR = 7, 8, 9


def wheels_the_jobs_install() -> list[str]:
    """What pip installs inside the jobs: the workflows' nox, and what the merge's session installs (the
    lock's asv, asv-runner and matplotlib, and setuptools to build the checkout)."""
    pins = set(re.findall(r"pip install (nox==\S+)", (ROOT / ".github" / "workflows" / "gpu-pr.yml").read_text()))
    lock = (ROOT / "requirements" / "runner.txt").read_text()
    pins |= {re.search(rf"^({name}==\S+)", lock, re.MULTILINE).group(1) for name in ("asv", "asv-runner", "matplotlib")}
    return [*sorted(pins), "setuptools>=69"]


class GitHub:
    """The engine, the origin with its pull requests, and the runs made so far (a run is made once)."""

    def __init__(self, root: Path):
        self.root = root
        wheelhouse = root / "wheelhouse"
        download = [sys.executable, "-m", "pip", "download", "-q", "--dest", str(wheelhouse)]
        subprocess.run([*download, *wheels_the_jobs_install()], check=True, capture_output=True)
        self.engine = Engine(root / "engine", wheelhouse)
        self.origin = Origin(root / "origin")
        self.docs = self.origin.pull_request(DOCS_PR, [{"docs/guide.md": "A new page.\n"}])
        kernel = {"kernels/layer_norm/ops.py": "\n# a comment\n"}
        self.kernel = self.origin.pull_request(KERNEL_PR, [kernel])
        # Approved at its first commit; its author pushed a second one since.
        self.pushed = self.origin.pull_request(PUSHED_PR, [kernel, {"kernels/layer_norm/ops.py": "# pushed later\n"}])
        self.runs: dict[str, Outcome] = {}
        self.seconds: dict[str, float] = {}

    def dispatch(
        self,
        name: str,
        pr: int,
        sha: str | None = None,
        shards: str = "1",
        labels: tuple[str, ...] = (),
        runner: Config | None = None,
        comments: tuple[dict, ...] = (),
    ) -> "Outcome":
        """gpu-pr.yml dispatched for pull request ``pr`` at its approved head (or ``sha``), once per ``name``."""
        if name in self.runs:
            return self.runs[name]
        folder = self.root / name
        config = runner or Config(str(folder / "gpu-runner"))
        runner_python = write_runner(folder / "runner", config)
        with serving(self.origin, self.engine) as api:
            api.labels[pr] = list(labels)
            api.comments[pr] = [dict(c) for c in comments]
            start = time.perf_counter()
            run = self.engine.run(
                self.origin.clone(folder / "repo"), "gpu-pr.yml", "workflow_dispatch",
                {"ref": "refs/heads/main", "inputs": {"pr": pr, "sha": sha or self.origin.pulls[pr].head}},
                api, self.origin, variables={"GPU_SHARDS": shards},
                env={"KERNELGATE_RUNNER_PYTHON": str(runner_python), "KERNELGATE_GPU_LOCK": str(folder / "gpu.lock"),
                     "KERNELGATE_HEAD_USER": "nobody"},
            )  # fmt: skip
            self.seconds[name] = time.perf_counter() - start
        self.runs[name] = Outcome(run, api, config, folder)
        return self.runs[name]


class Outcome:
    def __init__(self, run, api, config: Config, folder: Path):
        self.run, self.api, self.config, self.folder = run, api, config, folder
        self.gpu_calls = calls(config)

    def artifact(self, name: str) -> Path:
        dest = self.folder / "artifacts" / name
        return dest if dest.is_dir() else self.run.artifact(name, dest)

    def verdict(self) -> dict:
        return json.loads((self.artifact("pr-check-verdict") / "gate" / "verdict.json").read_text())

    def perf_gate(self, sha: str) -> list[str]:
        """The states the commit status perf-gate took on ``sha``, in order."""
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
        return (
            f"act exited {self.run.returncode}, jobs {self.run.jobs}; log: {self.folder}-act/act.log\n"
            + self.run.log[-6000:]
        )


@pytest.fixture(scope="module")
def github(tmp_path_factory):
    reason = missing_tools()
    if reason:
        pytest.skip(f"NOT RUN: the workflows run under nektos/act, and {reason} (.ci/run installs act, node 24, gh)")
    return GitHub(tmp_path_factory.mktemp("actions"))


def test_a_documentation_change_gets_its_verdict_without_a_gpu_job(github):
    out = github.dispatch("docs", DOCS_PR)
    assert out.run.jobs == {"approve": "success", "verdict": "success"}, out.explain()
    assert out.gpu_calls == [], "no GPU runner starts for a change that selects nothing"
    selected = json.loads((out.artifact("pr-check-selection") / "selection.json").read_text())
    merge = git(github.origin.bare, "rev-parse", f"refs/pull/{DOCS_PR}/merge")
    assert selected == {"base": github.origin.main, "head": merge, "groups": []}
    assert out.perf_gate(github.docs.head) == ["pending", "success"]
    report = out.report()
    assert "PR check ✅ passed" in report and "nothing: no changed path selects a group" in report
    # gh reached the stand-in as an Enterprise host, github-script with the job's token.
    tokens = {r.method: r.authorization for r in out.api.requests if r.path.endswith("/comments")}
    assert tokens == {"GET": f"token {TOKEN}", "POST": f"token {TOKEN}"}
    assert out.api.requests[0].authorization == f"token {API_TOKEN}"


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
    assert out.run.jobs == {"approve": "failure"}, out.explain()
    assert error.format(head=github.origin.head_of(PUSHED_PR), approved=approved) in out.run.log
    assert out.gpu_calls == [] and out.api.statuses() == [] and out.api.comment_writes() == []


def test_main_keeps_the_benchmark_jobs_result_files_on_asv_results(github):
    folder = github.root / "main"
    config = Config(str(folder / "gpu-runner"))
    runner_python = write_runner(folder / "runner", config)
    before = git(github.origin.bare, "rev-parse", "asv-results")
    with serving(github.origin, github.engine) as api:
        start = time.perf_counter()
        # The persisting job and the benchmark job it needs; the Pages deployment after them is not run.
        run = github.engine.run(
            github.origin.clone(folder / "repo"), "main.yml", "push",
            {"ref": "refs/heads/main", "after": github.origin.main}, api, github.origin, job="persist",
            env={"KERNELGATE_RUNNER_PYTHON": str(runner_python), "KERNELGATE_GPU_LOCK": str(folder / "gpu.lock")},
        )  # fmt: skip
        github.seconds["main"] = time.perf_counter() - start
    assert run.jobs == {"benchmark": "success", "persist": "success"}, run.log[-6000:]
    assert [c["argv"] for c in calls(config)] == [["-m", "nox", "--no-venv", "-s", "bench"]]
    written = sorted(
        p.relative_to(folder / "written").as_posix()
        for p in run.artifact("asv-results", folder / "written").rglob("*")
        if p.is_file()
    )
    kept = git(github.origin.bare, "ls-tree", "-r", "--name-only", "asv-results").splitlines()
    assert kept == written and "benchmarks.json" in kept
    assert git(github.origin.bare, "rev-parse", "asv-results^") == before, "one commit, on top of the branch"
    assert git(github.origin.bare, "log", "-1", "--format=%s", "asv-results") == f"asv results for {github.origin.main}"
    assert {r.path for r in api.requests} <= {f"repos/{REPO}/hash-algorithm"}, "no status, no comment"


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None
