"""Re-measure suspected regressions, and slowdowns read just under their limit, before the verdict.

A suspect is a failed check on measured values (a bound, a slowdown, an
order); a near miss is a slowdown read within ``near_miss`` under its limit,
or a floor or ceiling passed by less than ``near_bound``.
Their cases are run again on the commits they depend on (``asv run
--append-samples`` keeps the other cases), and only they are evaluated again.
A suspect bound or order fails the gate only if it persists, and a bound
read near it fails if the fresh reading breaks it. A slowdown fails
only if the fresh reading is past its limit or near it too, and the geometric
mean of both readings is past the limit: a slowdown just past the limit is
caught whichever side of it the first reading fell, while a one-off outlier
(a first reading far past the limit, then a fresh one well within) clears.
"""

import dataclasses
import math
import re
import shlex
import string
import subprocess
import sys
from collections.abc import Callable

from kernelgate.gate import GateError
from kernelgate.gate.findings import Finding, Verdict

# Placeholders: {machine}; {regex}, matching exactly the cases to re-run, as asv's --bench does; and either
# {commit}, the command then runs once per commit, or {base} and {head}, it then runs once for both.
DEFAULT_CONFIRM_CMD = "asv run --machine {machine} --append-samples --show-stderr --bench {regex} {commit}^!"
_PER_COMMIT = {"machine", "regex", "commit"}
_BOTH_COMMITS = {"machine", "regex", "base", "head"}


def runs_once(template: str) -> bool:
    """Whether ``template`` re-measures both commits in one run ({base} {head}) rather than one run per {commit}."""
    try:
        shlex.split(template)
        fields = {field for _, field, _, _ in string.Formatter().parse(template) if field is not None}
    except ValueError as exc:
        raise GateError(f"--confirm-cmd {template!r} is not a command template: {exc}") from exc
    once = bool(fields & {"base", "head"})
    if not fields <= (_BOTH_COMMITS if once else _PER_COMMIT) or not (once or "commit" in fields):
        raise GateError(
            f"--confirm-cmd {template!r}: placeholders {sorted(fields)}; expected {{machine}}, {{regex}} "
            "and either {commit} or {base} {head}"
        )
    return once


def remeasure(template: str, machine: str, commits: dict[str, str], suspects: list[Finding]) -> None:
    """Run ``template`` on the commits the suspects depend on: once for both, or once per commit (base first)."""
    by_role: dict[str, set[str]] = {}
    for finding in suspects:
        for role, case_id in finding.remeasure:
            by_role.setdefault(role, set()).add(case_id)
    if runs_once(template):
        fields = {"machine": machine, **commits, "regex": _regex(set().union(*by_role.values()))}
        _run(template, fields, "base and head")
        return
    for role in ("base", "head"):
        if role in by_role:
            fields = {"machine": machine, "commit": commits[role], "regex": _regex(by_role[role])}
            _run(template, fields, f"the {role} commit")


def _regex(case_ids: set[str]) -> str:
    return "^(?:" + "|".join(re.escape(case_id) for case_id in sorted(case_ids)) + ")$"


def _run(template: str, fields: dict[str, str], what: str) -> None:
    argv = [token.format(**fields) for token in shlex.split(template)]
    try:
        # Its output goes to stderr: stdout carries the report.
        returncode = subprocess.run(argv, stdout=sys.stderr, check=False).returncode
    except OSError as exc:
        raise GateError(f"re-measurement of {what} could not start: {shlex.join(argv)}: {exc}") from exc
    if returncode != 0:
        raise GateError(f"re-measurement of {what} failed: {shlex.join(argv)}")


def resolve(before: list[Finding], after: list[Finding]) -> list[Finding]:
    """``before`` with each suspect replaced by its re-evaluation, plus failures the re-run introduced."""
    again = {f.key: f for f in after}
    resolved = [_resolved(f, again.get(f.key)) if f.to_remeasure else f for f in before]
    seen = {f.key for f in before}
    return resolved + [f for f in after if f.verdict is Verdict.FAIL and not f.suspect and f.key not in seen]


def _resolved(first: Finding, again: Finding | None) -> Finding:
    if again is None:
        return _with(first, Verdict.FAIL, "re-measurement produced no value")
    seen = f"(first measured: {first.reason})"
    near = again.verdict is Verdict.FAIL or again.near_miss
    again = dataclasses.replace(again, near_miss=False, first=first.ratio)
    if first.check == "slowdown":
        if near and math.sqrt(first.badness * again.badness) > 1:  # the readings' geometric mean, over the limit
            return _with(again, Verdict.FAIL, f"persisted after re-measurement: the mean of both readings {seen}")
        if first.verdict is Verdict.FAIL or again.verdict is Verdict.FAIL:
            return _with(again, Verdict.CLEARED, f"cleared by re-measurement: the mean of both readings {seen}")
        return _with(again, again.verdict, f"re-measured near its limit {seen}")
    if again.verdict is Verdict.FAIL:
        return _with(again, Verdict.FAIL, "persisted after re-measurement")
    if first.verdict is Verdict.FAIL:
        return _with(again, Verdict.CLEARED, f"cleared by re-measurement {seen}")
    return _with(again, again.verdict, f"re-measured near its bound {seen}")


def _with(finding: Finding, verdict: Verdict, note: str) -> Finding:
    return dataclasses.replace(finding, verdict=verdict, reason=f"{finding.reason}; {note}")


def confirmed(findings: list[Finding], rerun: Callable[[list[Finding]], list[Finding]]) -> list[Finding]:
    """The findings once suspects and near misses are re-measured; nothing is re-run when a failure that is
    not noise exists."""
    again = [f for f in findings if f.to_remeasure]
    if not again:
        return findings
    if any(f.verdict is Verdict.FAIL and not f.suspect for f in findings):
        note = "not re-measured: the gate fails anyway"
        return [_with(f, Verdict.FAIL, note) if f.suspect else f for f in findings]
    return resolve(findings, rerun(again))
