"""The workflows rehearsed without GitHub and without a GPU: the PR check's (gpu-pr.yml) shell steps
and github-script, and main's step that keeps results on the history branch (main.yml), as written
in the files, against a local origin that carries pull requests' refs and the `asv-results` branch.
GitHub's parts are stood in for: a checkout is a clone, an artifact is a folder, `gh` and the REST
client are fakes that record their calls, and `python3` is a bare interpreter (no site-packages) as
on a GitHub-hosted runner. `nox` runs with --no-venv (the sessions then need no download). No GPU
work runs: the GPU step's command reaches a runner Python that records its arguments, and the
shards' folders that job would upload are fakes (tests/support/shards.py)."""

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML
from support.shards import JUNIT, two_fake_shards

# One xdist worker builds the rehearsal repository (a module fixture) once.
pytestmark = pytest.mark.xdist_group("workflow-rehearsal")

ROOT = Path(__file__).resolve().parents[1]
JOBS = {
    name: job
    for workflow in ("gpu-pr.yml", "main.yml")
    for name, job in YAML(typ="safe").load((ROOT / ".github" / "workflows" / workflow).read_text())["jobs"].items()
}
REPO = "octo/kernels"
DOCS_PR, KERNEL_PR = 7, 8
MARKER = "<!-- perf-gate-report -->"

FAKE_GH = """#!/usr/bin/env bash
# gh as the workflow calls it: answers from $FAKE_GITHUB, records every call.
echo "$*" >> "$FAKE_GITHUB/calls"
case "$*" in
  "api repos/$REPO/pulls/"*" --jq .head.sha") cat "$FAKE_GITHUB/head" ;;
  "api repos/$REPO/issues/"*"/labels --jq .[].name") cat "$FAKE_GITHUB/labels" ;;
  "api -X POST repos/$REPO/statuses/"*) ;;
  *) echo "fake gh: unexpected call: $*" >&2; exit 1 ;;
esac
"""

SHIMS = {
    "nox": f'#!/usr/bin/env bash\nexec "{sys.executable}" -m nox --no-venv "$@"\n',
    "python3": f'#!/usr/bin/env bash\nexec "{getattr(sys, "_base_executable", sys.executable)}" -S "$@"\n',
}

# actions/github-script runs its script as the body of an async function; this one is given the
# arguments the workflow's script uses, and a REST client that records its calls.
GITHUB_SCRIPT = """
const fs = require("fs");
const [scriptPath, commentsPath] = process.argv.slice(2);
const comments = JSON.parse(fs.readFileSync(commentsPath, "utf8"));
const calls = [];
const record = (name) => async (args) => { calls.push({ call: name, ...args }); return { data: {} }; };
const github = {
  rest: {
    repos: { createCommitStatus: record("createCommitStatus") },
    issues: {
      listComments: record("listComments"),
      createComment: record("createComment"),
      updateComment: record("updateComment"),
    },
  },
  paginate: async (method, args) => {
    if (method !== github.rest.issues.listComments) throw new Error("unexpected paginate");
    return comments;
  },
};
const [owner, repo] = process.env.GITHUB_REPOSITORY.split("/");
const context = { repo: { owner, repo }, serverUrl: "https://github.com", runId: 42 };
const AsyncFunction = Object.getPrototypeOf(async () => {}).constructor;
new AsyncFunction("require", "github", "context", fs.readFileSync(scriptPath, "utf8"))(require, github, context)
  .then(() => console.log(JSON.stringify(calls)), (err) => { console.error(err); process.exit(1); });
"""


def git(cwd: Path, *argv: str) -> str:
    ident = ["-c", "user.name=test", "-c", "user.email=test@example.com", "-c", "commit.gpgsign=false"]
    done = subprocess.run(["git", *ident, *argv], cwd=cwd, capture_output=True, text=True, check=True)
    return done.stdout.strip()


def step(job: str, key: str) -> dict:
    """A step of ``job`` (of either workflow: their job names differ) by its id or name."""
    found = [s for s in JOBS[job]["steps"] if key in (s.get("id"), s.get("name"))]
    assert len(found) == 1, f"the {job} job has no single step {key!r}"
    return found[0]


class Rehearsal:
    """A local origin with two pull requests against main (a documentation change and a kernel
    change), each with GitHub's refs/pull/N/head and refs/pull/N/merge, an empty `asv-results`
    branch, and the fakes."""

    def __init__(self, tmp: Path):
        self.tmp = tmp
        work = tmp / "author"
        work.mkdir()
        tracked = git(ROOT, "ls-files", "-z").split("\0")
        for name in filter(None, tracked):
            if (ROOT / name).is_file():
                (work / name).parent.mkdir(parents=True, exist_ok=True)
                shutil.copy2(ROOT / name, work / name)
        git(work, "init", "-q", "-b", "main")
        git(work, "add", "-A")
        git(work, "commit", "-qm", "main")
        self.heads = {
            DOCS_PR: self._pull_request(work, DOCS_PR, "docs/guide.md", "A new page.\n"),
            KERNEL_PR: self._pull_request(work, KERNEL_PR, "kernels/layer_norm/ops.py", "\n# a comment\n"),
        }
        git(work, "switch", "-q", "--orphan", "asv-results")  # as main.yml tells a maintainer to make it
        git(work, "commit", "-q", "--allow-empty", "-m", "asv results")
        git(work, "switch", "-q", "main")
        self.origin = tmp / "origin.git"
        git(tmp, "clone", "-q", "--bare", str(work), str(self.origin))
        for pr in self.heads:
            for kind in ("head", "merge"):
                git(self.origin, "update-ref", f"refs/pull/{pr}/{kind}", f"pr-{pr}-{kind}")
        self.fakes = tmp / "fakes"
        self.bin = tmp / "bin"
        self.bin.mkdir()
        for name, text in {"gh": FAKE_GH, **SHIMS}.items():
            (self.bin / name).write_text(text)
            (self.bin / name).chmod(0o755)
        self.harness = tmp / "github-script.js"
        self.harness.write_text(GITHUB_SCRIPT)
        self.approve_tree = self.checkout("approve")
        self.verdict_tree = self.checkout("verdict")

    def _pull_request(self, work: Path, pr: int, path: str, text: str) -> str:
        git(work, "checkout", "-q", "-b", f"pr-{pr}-head", "main")
        with (work / path).open("a") as fh:
            fh.write(text)
        git(work, "add", "-A")
        git(work, "commit", "-qm", f"pull request {pr}")
        head = git(work, "rev-parse", "HEAD")
        git(work, "checkout", "-q", "-b", f"pr-{pr}-merge", "main")  # GitHub's test merge: parents main, head
        git(work, "merge", "-q", "--no-ff", "-m", f"Merge {head} into main", f"pr-{pr}-head")
        git(work, "checkout", "-q", "main")
        return head

    def checkout(self, name: str, ref: str = "main") -> Path:
        """actions/checkout of ``ref``, with fetch-depth 0."""
        tree = self.tmp / name
        git(self.tmp, "clone", "-q", "-b", ref, str(self.origin), str(tree))
        return tree

    def github_api(self, head: str, labels: str = "") -> None:
        shutil.rmtree(self.fakes, ignore_errors=True)
        self.fakes.mkdir()
        (self.fakes / "head").write_text(head + "\n")
        (self.fakes / "labels").write_text(labels)

    def gh_calls(self) -> list[str]:
        calls = self.fakes / "calls"
        return calls.read_text().splitlines() if calls.is_file() else []

    def run(
        self, job: str, key: str, cwd: Path, env: dict[str, str], runner: dict[str, str] | None = None
    ) -> tuple[subprocess.CompletedProcess, dict]:
        """One `run:` step as GitHub runs it (bash -eo pipefail), with the values its `env:` expressions
        would take and the runner's own environment; returns the process and what the step wrote to
        $GITHUB_OUTPUT."""
        spec = step(job, key)
        assert set(env) == set(spec.get("env", {})), f"{key}: the step's env is {sorted(spec.get('env', {}))}"
        script = self.tmp / "step.sh"
        script.write_text(spec["run"])
        outputs = self.tmp / "github-output"
        outputs.write_text("")
        path = os.pathsep.join([str(self.bin), str(Path(sys.executable).parent), os.environ["PATH"]])
        github = {"PATH": path, "GITHUB_OUTPUT": str(outputs), "FAKE_GITHUB": str(self.fakes)}
        full_env = {**os.environ, **github, **(runner or {}), **env}
        full_env.pop("GITHUB_STEP_SUMMARY", None)
        done = subprocess.run(
            ["bash", "--noprofile", "--norc", "-eo", "pipefail", str(script)],
            cwd=cwd, env=full_env, capture_output=True, text=True, check=False,
        )  # fmt: skip
        written = dict(line.split("=", 1) for line in outputs.read_text().splitlines() if line)
        return done, written

    def approve(self, pr: int, labels: str = "", full: str = "false") -> dict:
        """The approve job, for the pull request's head: its outputs."""
        sha = self.heads[pr]
        self.github_api(sha, labels)
        env = {"GH_TOKEN": "token", "REPO": REPO, "PR": str(pr), "SHA": sha, "FULL": full, "SHARDS": "1"}
        done, check = self.run("approve", "check", self.approve_tree, env)
        assert done.returncode == 0, done.stdout + done.stderr
        env = {"PR": str(pr), "SHA": sha, "FULL": check["full"]}
        done, selected = self.run("approve", "select", self.approve_tree, env)
        assert done.returncode == 0, done.stdout + done.stderr
        return {**check, **selected}

    def github_script(
        self, job: str, key: str, env: dict[str, str], comments: list, tree: Path | None = None
    ) -> list[dict]:
        """A github-script step, run by node in the job's checkout (the verdict job's unless ``tree``):
        the REST calls it made."""
        spec = step(job, key)
        assert set(env) == set(spec.get("env", {})), f"{key}: the step's env is {sorted(spec.get('env', {}))}"
        script, listed = self.tmp / "script.js", self.tmp / "comments.json"
        script.write_text(spec["with"]["script"])
        listed.write_text(json.dumps(comments))
        done = subprocess.run(
            [node(), str(self.harness), str(script), str(listed)],
            cwd=tree or self.verdict_tree, env={**os.environ, "GITHUB_REPOSITORY": REPO, **env},
            capture_output=True, text=True, check=False,
        )  # fmt: skip
        assert done.returncode == 0, done.stdout + done.stderr
        return json.loads(done.stdout)


def node() -> str:
    found = shutil.which("node")
    if found is None:
        pytest.fail("node is not installed: the rehearsal runs the workflow's github-script with it")
    return found


@pytest.fixture(scope="module")
def rehearsal(tmp_path_factory):
    try:
        import nox  # noqa: F401
    except ImportError:
        pytest.fail("nox is not installed: it is a test dependency (pip install -e '.[test]')")
    return Rehearsal(tmp_path_factory.mktemp("gpu-pr"))


def status_and_comment(calls: list[dict]) -> tuple[dict, dict]:
    statuses = [c for c in calls if c["call"] == "createCommitStatus"]
    comments = [c for c in calls if c["call"] in ("createComment", "updateComment")]
    assert len(statuses) == 1 and len(comments) == 1, calls
    return statuses[0], comments[0]


def test_a_documentation_change_gets_its_verdict_without_a_gpu_runner(rehearsal):
    sha = rehearsal.heads[DOCS_PR]
    out = rehearsal.approve(DOCS_PR)
    assert out["full"] == "" and out["shards"] == "[1]"
    assert out["merge"] == git(rehearsal.origin, "rev-parse", f"refs/pull/{DOCS_PR}/merge")
    assert out["selected"] == "false", "the gpu job runs only where this is 'true'"

    env = {"GH_TOKEN": "token", "REPO": REPO, "SHA": sha, "RUN_URL": "https://github.com/run"}
    done, _ = rehearsal.run("approve", "perf-gate pending on the approved commit", rehearsal.approve_tree, env)
    assert done.returncode == 0, done.stderr
    assert rehearsal.gh_calls()[-1].startswith(f"api -X POST repos/{REPO}/statuses/{sha} -f state=pending")

    # The verdict job: the selection's artifact, downloaded into verdict/, is its verdict.
    shutil.rmtree(rehearsal.verdict_tree / "verdict", ignore_errors=True)
    shutil.copytree(rehearsal.approve_tree / "pr-check-selection", rehearsal.verdict_tree / "verdict")
    env = {"OUTCOME": "skipped", "NOTHING_SELECTED": "true", "PR": str(DOCS_PR), "SHA": sha}
    status, comment = status_and_comment(
        rehearsal.github_script("verdict", "Status and report on the pull request", env, comments=[])
    )
    assert (status["sha"], status["state"], status["context"]) == (sha, "success", "perf-gate")
    assert comment["call"] == "createComment" and comment["issue_number"] == DOCS_PR
    assert comment["body"].startswith(MARKER) and "PR check ✅ passed" in comment["body"]


def test_a_kernel_change_whose_gpu_job_left_no_report_is_red(rehearsal):
    sha = rehearsal.heads[KERNEL_PR]
    out = rehearsal.approve(KERNEL_PR)
    assert out["selected"] == "true"
    selection = json.loads((rehearsal.approve_tree / "pr-check-selection" / "selection.json").read_text())
    assert selection["groups"] == ["layer_norm"] and selection["head"] == out["merge"]

    # The gpu job's first step finds the merge the selection judged; a moved merge stops it.
    gpu_tree = rehearsal.checkout("gpu")
    key = "The test merge the selection judged"
    done, _ = rehearsal.run("gpu", key, gpu_tree, {"PR": str(KERNEL_PR), "MERGE": out["merge"]})
    assert done.returncode == 0, done.stdout + done.stderr
    done, _ = rehearsal.run("gpu", key, gpu_tree, {"PR": str(KERNEL_PR), "MERGE": sha})
    assert done.returncode != 0 and "moved since its selection" in done.stdout

    # Its GPU step, on a runner whose Python only records how it was called: base and head are the
    # test merge's parents and the merge itself, under the runner's GPU lock.
    called = rehearsal.tmp / "runner-argv.json"
    fake_python = rehearsal.bin / "runner-python"
    fake_python.write_text(f'#!/usr/bin/env bash\nprintf "%s\\n" "$@" > "{called}"\n')
    fake_python.chmod(0o755)
    runner = {"KERNELGATE_RUNNER_PYTHON": str(fake_python), "KERNELGATE_GPU_LOCK": str(rehearsal.tmp / "gpu.lock")}
    key = "PR check, one shard (the only GPU work; run the same command by hand)"
    for full in ("", "label full-gpu-suite"):
        env = {"SHARD": "2", "SHARDS": "3", "FULL": full}
        done, _ = rehearsal.run("gpu", key, gpu_tree, env, runner)
        assert done.returncode == 0, done.stdout + done.stderr
        base = git(rehearsal.origin, "rev-parse", "main")
        expected = ["-m", "nox", "--no-venv", "-s", "pr-check", "--", "--base", base, "--head", out["merge"]]
        expected += ["--shard", "2/3", "--out", "pr-check", *(["--full", full] if full else [])]
        assert called.read_text().splitlines() == expected

    # No shard's artifact came back (the GPU job failed or never ran): the merge fails closed.
    done, _ = rehearsal.run("verdict", "judge", rehearsal.verdict_tree, {})
    assert done.returncode != 0
    report = (rehearsal.verdict_tree / "verdict" / "report.md").read_text()
    assert "The check fails closed" in report
    earlier = [{"id": 11, "user": {"type": "Bot"}, "body": f"{MARKER}\nan earlier report"}]
    env = {"OUTCOME": "failure", "NOTHING_SELECTED": "false", "PR": str(KERNEL_PR), "SHA": sha}
    status, comment = status_and_comment(
        rehearsal.github_script("verdict", "Status and report on the pull request", env, comments=earlier)
    )
    assert (status["sha"], status["state"]) == (sha, "failure")
    assert comment["call"] == "updateComment" and comment["comment_id"] == 11, "one report comment, kept current"
    assert "The check fails closed" in comment["body"]
    done, _ = rehearsal.run("verdict", "Fail when the check did", rehearsal.verdict_tree, {})
    assert done.returncode != 0, "the job fails with the check"


def test_a_kernel_change_measured_by_two_shards_is_green(rehearsal):
    sha = rehearsal.heads[KERNEL_PR]
    tree = rehearsal.checkout("verdict-of-shards")
    # download-artifact with a pattern: one folder per shard's artifact, named after it.
    for k, shard in enumerate(two_fake_shards(rehearsal.tmp / "gpu-jobs"), start=1):
        (shard / "junit").mkdir()
        (shard / "junit" / "gpu-tests.xml").write_text(JUNIT)
        shutil.copytree(shard, tree / "shards" / f"pr-check-shard-{k}")
    done, _ = rehearsal.run("verdict", "judge", tree, {})
    assert done.returncode == 0, done.stdout + done.stderr
    report = (tree / "verdict" / "report.md").read_text()
    assert report.startswith("# PR check ✅ passed") and "The verdict on all 2 shards, merged." in report
    env = {"OUTCOME": "success", "NOTHING_SELECTED": "false", "PR": str(KERNEL_PR), "SHA": sha}
    status, comment = status_and_comment(
        rehearsal.github_script("verdict", "Status and report on the pull request", env, comments=[], tree=tree)
    )
    assert (status["sha"], status["state"]) == (sha, "success")
    assert comment["call"] == "createComment" and "The verdict on all 2 shards, merged." in comment["body"]


def test_the_full_suite_label_selects_every_group_for_any_change(rehearsal):
    out = rehearsal.approve(DOCS_PR, labels="full-gpu-suite\n")
    assert out["full"] == "label full-gpu-suite"
    assert out["selected"] == "true"
    selection = json.loads((rehearsal.approve_tree / "pr-check-selection" / "selection.json").read_text())
    assert selection["groups"] == ["layer_norm", "attention"]


def test_a_head_pushed_after_approval_is_not_checked(rehearsal):
    approved = rehearsal.heads[DOCS_PR]
    rehearsal.github_api(head="f" * 40)
    env = {"GH_TOKEN": "token", "REPO": REPO, "PR": str(DOCS_PR), "SHA": approved, "FULL": "false", "SHARDS": "1"}
    done, outputs = rehearsal.run("approve", "check", rehearsal.approve_tree, env)
    assert done.returncode != 0 and f"is at {'f' * 40}, not at the approved {approved}" in done.stdout
    assert outputs == {}
    for bad in ({"SHA": approved[:12]}, {"SHARDS": "0"}):
        done, _ = rehearsal.run("approve", "check", rehearsal.approve_tree, {**env, **bad})
        assert done.returncode != 0 and "::error::" in done.stdout


def test_main_keeps_checked_result_files_on_the_history_branch(rehearsal):
    """main.yml's persist job: the checker from main, the history branch with push rights, the
    benchmark job's artifact of result files."""
    workspace = rehearsal.tmp / "persist"
    workspace.mkdir()
    git(workspace, "clone", "-q", str(rehearsal.origin), "trusted")
    git(workspace, "clone", "-q", "-b", "asv-results", str(rehearsal.origin), "history")
    results = rehearsal.tmp / "runner-temp" / "results"
    (results / "h200-host").mkdir(parents=True)
    (results / "benchmarks.json").write_text(json.dumps({"version": 2}))
    (results / "h200-host" / "machine.json").write_text(json.dumps({"version": 1, "machine": "h200-host"}))
    result = {"version": 2, "commit_hash": "b" * 40, "params": {}, "results": {}}
    (results / "h200-host" / "bbbbbbbb-existing-py_python3.json").write_text(json.dumps(result))
    key = "Copy the checked result files, commit, push (fast-forward only)"
    env = {"RESULTS": str(results), "HISTORY": str(workspace / "history")}
    runner = {"GITHUB_SHA": "b" * 40}

    done, _ = rehearsal.run("persist", key, workspace, env, runner)
    assert done.returncode == 0, done.stdout + done.stderr
    kept = git(rehearsal.origin, "ls-tree", "-r", "--name-only", "asv-results").splitlines()
    assert kept == ["benchmarks.json", "h200-host/bbbbbbbb-existing-py_python3.json", "h200-host/machine.json"]
    assert git(rehearsal.origin, "log", "-1", "--format=%s", "asv-results") == f"asv results for {'b' * 40}"

    done, _ = rehearsal.run("persist", key, workspace, env, runner)
    assert done.returncode == 0 and "no new results" in done.stdout, "the same files again: nothing to push"

    (results / "h200-host" / "notes.txt").write_text("not a result")
    tip = git(rehearsal.origin, "rev-parse", "asv-results")
    done, _ = rehearsal.run("persist", key, workspace, env, runner)
    assert done.returncode != 0 and "notes.txt" in done.stdout + done.stderr
    assert git(rehearsal.origin, "rev-parse", "asv-results") == tip, "a rejected artifact pushes nothing"
