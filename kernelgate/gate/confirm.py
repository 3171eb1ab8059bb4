"""Re-measure suspected regressions before failing on them.

A suspect is a failed check on measured values (a bound, a slowdown, an
order). Its cases are run again on the commits it depends on, appending
samples to the same result files (``asv run --append-samples`` keeps the
other cases), and only the suspects are evaluated again: a regression fails
the gate only if it persists.
"""

import dataclasses
import re
import shlex
import subprocess
import sys
from collections.abc import Callable

from kernelgate.gate import GateError
from kernelgate.gate.findings import Finding, Verdict

# Placeholders: {machine}, {commit}, {regex} (matches exactly the cases to re-run, as asv's --bench does).
DEFAULT_CONFIRM_CMD = "asv run --machine {machine} --append-samples --show-stderr --bench {regex} {commit}^!"


def remeasure(template: str, machine: str, commits: dict[str, str], suspects: list[Finding]) -> None:
    """Run ``template`` once per commit that a suspect depends on (base before head)."""
    by_role: dict[str, set[str]] = {}
    for finding in suspects:
        for role, case_id in finding.remeasure:
            by_role.setdefault(role, set()).add(case_id)
    for role in ("base", "head"):
        if role in by_role:
            regex = "^(?:" + "|".join(re.escape(case_id) for case_id in sorted(by_role[role])) + ")$"
            fields = {"machine": machine, "commit": commits[role], "regex": regex}
            argv = [token.format(**fields) for token in shlex.split(template)]
            # Its output goes to stderr: stdout carries the report.
            if subprocess.run(argv, stdout=sys.stderr, check=False).returncode != 0:
                raise GateError(f"re-measurement of the {role} commit failed: {shlex.join(argv)}")


def resolve(before: list[Finding], after: list[Finding]) -> list[Finding]:
    """``before`` with each suspect replaced by its re-evaluation, plus failures the re-run introduced."""
    again = {f.key: f for f in after}
    resolved = [_resolved(f, again.get(f.key)) if f.suspect else f for f in before]
    seen = {f.key for f in before}
    return resolved + [f for f in after if f.verdict is Verdict.FAIL and not f.suspect and f.key not in seen]


def _resolved(suspect: Finding, again: Finding | None) -> Finding:
    if again is None:
        return _with(suspect, Verdict.FAIL, "re-measurement produced no value")
    if again.verdict is Verdict.FAIL:
        return _with(again, Verdict.FAIL, "persisted after re-measurement")
    return _with(again, Verdict.CLEARED, f"cleared by re-measurement (first measured: {suspect.reason})")


def _with(finding: Finding, verdict: Verdict, note: str) -> Finding:
    return dataclasses.replace(finding, verdict=verdict, reason=f"{finding.reason}; {note}")


def confirmed(findings: list[Finding], rerun: Callable[[list[Finding]], list[Finding]]) -> list[Finding]:
    """The findings once suspects are re-measured; nothing is re-run when a failure that is not noise exists."""
    suspects = [f for f in findings if f.suspect]
    if not suspects:
        return findings
    if any(f.verdict is Verdict.FAIL and not f.suspect for f in findings):
        note = "not re-measured: the gate fails anyway"
        return [_with(f, Verdict.FAIL, note) if f.suspect else f for f in findings]
    return resolve(findings, rerun(suspects))
