"""The GitHub workflows, checked offline: GitHub's schema (check-jsonschema), a security audit (zizmor),
actionlint, action pins, and the nox sessions they call. The tools are test dependencies: missing means
failed. And the repository's own CI runs the README's commands as written."""

import ast
import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
from ruamel.yaml import YAML

ROOT = Path(__file__).resolve().parents[1]
WORKFLOWS = sorted((ROOT / ".github" / "workflows").glob("*.yml"))
NOX_CALL = re.compile(r"\bnox\b(?:\s+--?[\w-]+)*\s+-s\s+([\w-]+)")
USES = re.compile(r"^\s*(?:-\s+)?uses:\s*(\S+)(.*)$", re.MULTILINE)
PINNED = re.compile(r"[\w.-]+/[\w./-]+@[0-9a-f]{40}")
VERSION_COMMENT = re.compile(r"^\s+#\s+v\d+(\.\d+)*\s*$")
CHECK_SCHEMA = ["check-jsonschema", "--builtin-schema", "vendor.github-workflows"]
# --strict-collection: a workflow zizmor cannot parse fails the audit instead of being skipped.
ZIZMOR = ["zizmor", "--offline", "--strict-collection", "--min-severity", "medium"]

# Known-bad: an unpinned action, a PR title pasted into a shell, no permissions block.
INSECURE_WORKFLOW = """\
on: pull_request_target
jobs:
  build:
    runs-on: ubuntu-latest
    steps:
      - uses: actions/checkout@main
      - run: echo "${{ github.event.pull_request.title }}"
"""


def tool(name: str) -> str:
    """The tool next to this interpreter (a venv need not be activated), else on PATH."""
    found = shutil.which(name, path=os.pathsep.join([str(Path(sys.executable).parent), os.environ.get("PATH", "")]))
    if found is None:
        pytest.fail(f"{name} is not installed: it is a test dependency (pip install -e '.[test]')")
    return found


def run(*argv: str) -> subprocess.CompletedProcess:
    return subprocess.run(argv, capture_output=True, text=True, check=False)


def load(path: Path) -> dict:
    return YAML(typ="safe").load(path.read_text())


def test_there_are_workflows():
    assert {p.name for p in WORKFLOWS} >= {"cpu.yml", "gpu-pr.yml", "main.yml"}


def test_github_workflow_schema():
    checked = run(tool(CHECK_SCHEMA[0]), *CHECK_SCHEMA[1:], *map(str, WORKFLOWS))
    assert checked.returncode == 0, checked.stdout + checked.stderr


def test_zizmor_finds_nothing_from_medium_up():
    audit = run(tool(ZIZMOR[0]), *ZIZMOR[1:], *map(str, WORKFLOWS))
    assert audit.returncode == 0, audit.stdout + audit.stderr


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_no_finding_is_silenced_inline(workflow):
    assert "zizmor: ignore" not in workflow.read_text(), "justify a finding in docs/security.md instead"


def test_actionlint_passes_with_the_runner_labels_declared():
    linted = subprocess.run([tool("actionlint")], cwd=ROOT, capture_output=True, text=True, check=False)
    assert linted.returncode == 0, linted.stdout + linted.stderr


@pytest.mark.parametrize(
    ("checker", "workflow"),
    [
        (CHECK_SCHEMA, INSECURE_WORKFLOW.replace("runs-on", "run-on")),  # not a job key
        (ZIZMOR, INSECURE_WORKFLOW),
    ],
    ids=["check-jsonschema", "zizmor"],
)
def test_checkers_reject_a_bad_workflow(tmp_path, checker, workflow):
    """The checks above can fail: each rejects a known-bad workflow."""
    bad = tmp_path / "bad.yml"
    bad.write_text(workflow)
    assert run(tool(checker[0]), *checker[1:], str(bad)).returncode != 0


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_actions_are_pinned_to_commits_with_their_version(workflow):
    uses = USES.findall(workflow.read_text())
    assert uses, f"{workflow.name} uses no action"
    for action, rest in uses:
        assert PINNED.fullmatch(action), f"{workflow.name}: {action} is not pinned to a full commit SHA"
        assert VERSION_COMMENT.match(rest), f"{workflow.name}: {action} lacks its '# vX.Y.Z' comment"


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_least_privilege_and_time_limits(workflow):
    spec = load(workflow)
    assert spec["permissions"] == {}, "top-level permissions must be {}: each job asks for what it needs"
    for name, job in spec["jobs"].items():
        assert "permissions" in job, f"{workflow.name}: job {name} has no permissions block"
        assert "timeout-minutes" in job, f"{workflow.name}: job {name} has no timeout-minutes"


def noxfile_sessions() -> set[str]:
    """Functions decorated with @nox.session (or @nox.session(name=...)) in noxfile.py."""
    sessions = set()
    for node in ast.walk(ast.parse((ROOT / "noxfile.py").read_text())):
        if not isinstance(node, ast.FunctionDef):
            continue
        for decorator in node.decorator_list:
            call = decorator if isinstance(decorator, ast.Call) else None
            target = call.func if call else decorator
            if ast.unparse(target) == "nox.session":
                names = [k.value.value for k in (call.keywords if call else []) if k.arg == "name"]
                sessions.add(names[0] if names else node.name)
    return sessions


def test_noxfile_sessions_are_found():
    assert {"lint", "tests", "gate"} <= noxfile_sessions()


@pytest.mark.parametrize("workflow", WORKFLOWS, ids=lambda p: p.name)
def test_every_nox_session_called_exists(workflow):
    called = set(NOX_CALL.findall(workflow.read_text()))
    missing = called - noxfile_sessions()
    assert not missing, f"{workflow.name} calls nox sessions that noxfile.py does not define: {sorted(missing)}"


def test_nox_sessions_are_called():
    called = {s for w in WORKFLOWS for s in NOX_CALL.findall(w.read_text())}
    assert called >= {"lint", "tests", "bench", "pr-check"}


def test_the_gpu_jobs_only_gpu_work_is_one_command():
    """What runs on a GPU runner is a nox session a developer can run by hand, nothing else."""
    for workflow, job, session in (("gpu-pr.yml", "gpu", "pr-check"), ("main.yml", "benchmark", "bench")):
        steps = load(ROOT / ".github" / "workflows" / workflow)["jobs"][job]["steps"]
        sessions = [name for step in steps for name in NOX_CALL.findall(step.get("run", ""))]
        assert sessions == [session], f"{workflow}: {sessions}"


def test_ci_runs_the_readme_commands_as_written():
    readme = (ROOT / "README.md").read_text()
    commands = re.findall(r"^(python3 -m pip install nox && nox -s bench|nox -s tests)\b", readme, re.MULTILINE)
    assert sorted(set(commands)) == ["nox -s tests", "python3 -m pip install nox && nox -s bench"], commands
    ci = (ROOT / ".ci" / "run").read_text().splitlines()
    for command in commands:
        assert command in ci, f".ci/run does not run the README's {command!r} as written"
