"""What a change does to the compiled kernels of the suites it selects, each commit compiled by its own code.

The suites are those whose groups the change selects (``pr-check.toml``, read from base as the PR check reads it).
Each commit gets a worktree and an environment of its own on top of this Python's packages
(``kernelgate.prcheck.environments``), and compiles every case of those suites with its own launchers for sm_90
(``python -m kernelgate.explain compiled``). So a CPU machine, such as the pull request's CPU workflow, shows what a
change does to the kernels before any GPU runs.
"""

import json
import subprocess
import sys
from pathlib import Path

from kernelgate.explain.report import summary
from kernelgate.prcheck import check
from kernelgate.prcheck.environments import overlay


def compiled_at(repo: Path, commit: str, suites: list[str], gpu: str, work: Path) -> dict | str:
    """Every case of ``suites`` compiled by ``commit``'s code (``explain compiled``), or why it could not be."""
    tree = check.checkout(repo, commit, work)
    python = overlay(sys.executable, tree, work / "envs" / commit[:12])
    argv = [str(python), "-m", "kernelgate.explain", "compiled", "--suites", *suites, "--gpu-class", gpu]
    done = subprocess.run(argv, cwd=tree, capture_output=True, text=True, check=False)
    if done.returncode:
        return (done.stderr.strip().splitlines() or [f"exit code {done.returncode}"])[-1]
    try:
        return json.loads(done.stdout)
    except ValueError:
        return "its output is not JSON"


def explain_change(base_ref: str, head_ref: str, gpu: str, work: Path) -> str:
    """Markdown: the groups the change selects, and what it does to their kernels' compiled code."""
    base, head = check.commits(base_ref, head_ref)
    work.mkdir(parents=True, exist_ok=True)
    plan = check.selected_plan(base, head, work / "selection", full=None)
    lines = ["## What the change does to the compiled kernels", "",
             f"base `{base[:12]}` → head `{head[:12]}`, sm_90, {gpu}'s launch configurations.", ""]  # fmt: skip
    if not plan.groups:
        return "\n".join([*lines, "It selects no kernel's group: there is no compiled code to compare.", ""])
    repo = Path(check.git("rev-parse", "--show-toplevel").strip())
    codes = {
        role: compiled_at(repo, commit, plan.groups, gpu, work) for role, commit in (("base", base), ("head", head))
    }
    failed = [f"- {role}: its kernels were not compiled ({why})" for role, why in codes.items() if isinstance(why, str)]
    if failed:
        return "\n".join([*lines, *failed, ""])
    only = {role: len(set(codes[role]) - set(codes[other])) for role, other in (("base", "head"), ("head", "base"))}
    lines.append(f"Groups: {', '.join(plan.groups)}.")
    lines += [f"Cases only {role} has: {count}." for role, count in only.items() if count]
    return "\n".join([*lines, "", summary(codes["base"], codes["head"])])
