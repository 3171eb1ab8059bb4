"""One row of the verdict: what was checked on which case, and how it came out."""

import dataclasses
import enum
import math

from asv.util import human_time


class Verdict(enum.Enum):
    FAIL = "fail"
    WARN = "warn"  # an informational breach, or a case that could not be compared
    CLEARED = "cleared"  # a suspect that re-measurement did not confirm
    PASS = "pass"


SEVERITY = {Verdict.FAIL: 0, Verdict.WARN: 1, Verdict.CLEARED: 2, Verdict.PASS: 3}


@dataclasses.dataclass(frozen=True)
class Finding:
    check: str  # tests, config, missing, crashed, floor, ceiling, slowdown, order, gate
    benchmark: str  # asv's name, or what the check is about when no benchmark is
    case: str  # the parameter values
    verdict: Verdict
    reason: str
    base: float | None = None
    head: float | None = None
    ratio: float | None = None  # head / base (slowdown), head / other case (order), head / bound (floor, ceiling)
    limit: str = ""
    unit: str = ""
    # How far past its limit, > 1 for a breach: orders the report worst first.
    badness: float = math.inf
    # What a re-measurement must re-run, as (role, asv case id); empty: the failure is not noise.
    remeasure: tuple[tuple[str, str], ...] = ()
    # The `why` of the threshold rule that judged it ("default" for [defaults]); empty where no rule did.
    rule: str = ""
    # A slowdown read within the near_miss margin under its limit, or a floor or ceiling passed by less than near_bound:
    # re-measured as a suspect is.
    near_miss: bool = False
    # A slowdown's: the smallest slowdown its rule reds nine times in ten, from the case's A/A spread
    # (kernelgate/gate/noise.py); None where none is recorded for the GPU class.
    resolution: float | None = None
    # The ratio first measured, where a re-measurement decided the finding (``ratio`` is the fresh one).
    first: float | None = None

    @property
    def key(self) -> tuple[str, str, str, str]:
        return self.check, self.benchmark, self.case, self.limit

    @property
    def suspect(self) -> bool:
        return self.verdict is Verdict.FAIL and bool(self.remeasure)

    @property
    def to_remeasure(self) -> bool:
        """A suspect, or a near miss: what the gate measures again before its verdict."""
        return self.suspect or (self.near_miss and bool(self.remeasure))

    def sort_key(self) -> tuple[int, float]:
        return SEVERITY[self.verdict], -self.badness


def worst_first(findings: list[Finding]) -> list[Finding]:
    return sorted(findings, key=Finding.sort_key)


@dataclasses.dataclass(frozen=True)
class Outcome:
    """Everything the report needs; ``error`` is set when the gate could not evaluate."""

    machine: str
    base: str
    head: str
    findings: tuple[Finding, ...] = ()
    error: str | None = None
    gpu: str = ""
    head_rules: tuple[str, ...] = ()  # the rules head's thresholds file adds, as label and why
    gpu_class: str = ""
    noise_checks: int = 0  # the identical-code checks whose spread gave the slowdowns their resolution

    @property
    def failures(self) -> list[Finding]:
        return [f for f in self.findings if f.verdict is Verdict.FAIL]

    @property
    def passed(self) -> bool:
        return self.error is None and bool(self.findings) and not self.failures

    @property
    def exit_code(self) -> int:
        """0: passed; 1: something failed; 2: the gate could not evaluate."""
        if self.error is not None:
            return 2
        return 0 if self.passed else 1


def human(value: float | None, unit: str) -> str:
    """A value in its benchmark's unit, as asv prints it."""
    if value is None:
        return "-"
    if unit == "seconds":
        return human_time(value)
    return f"{value:.3g}{'' if unit in ('x', '%') else ' '}{unit}".rstrip()
