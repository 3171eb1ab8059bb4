"""Head against the thresholds and against base, case by case.

* config: every rule, and every glob or value of its lists, matches some case of head's suite;
* removals: every case of base's suite is in head's, unless declared removed (whole suites, whatever
  a selection measured);
* availability: every case of base is in head, and head measured each one (a case
  measured at base may not be skipped at head);
* head's rules: a rule head's thresholds file adds (``Rule.from_head``) only tightens a case base
  has: its ``max_slowdown`` and ``may_skip`` count on cases new in head only;
* validity: no time_* value or sample of base or head is at or below 0 s;
* bounds: ``min`` / ``max`` on head's values;
* slowdown: head vs base on every time_* case: head's median over base's beyond
  1 + max_slowdown fails, whether or not asv's statistics call the difference
  significant (the reason says which). Noise is the re-measurement's to clear: samples
  too spread to call would otherwise pass a slowdown of any size. One within ``near_miss``
  under its limit is re-measured too (kernelgate/gate/confirm.py);
* order: ``not_slower_than`` between cases of the same run, decided as ``asv compare``
  decides (Mann-Whitney U on the recorded samples, else 99% CI overlap), factor 1;
* coverage: something, and at least ``min_compared`` of what could be, was compared.
"""

import fnmatch

from asv.commands.compare import _is_result_better  # asv compare's own test of "a is better than b"

from kernelgate.asv_case import Case
from kernelgate.gate import GateError
from kernelgate.gate.asv_results import Measurement, Run
from kernelgate.gate.findings import Finding, Verdict, human
from kernelgate.gate.noise import resolution
from kernelgate.gate.thresholds import Rule, Thresholds


def evaluate(
    thresholds: Thresholds, base: Run, head: Run, selection: bool = False, spreads: dict | None = None
) -> list[Finding]:
    """All checks; with a ``selection`` (a --bench or --cases subset) a removed glob that matches no removed
    case is not reported. ``spreads`` ({(benchmark, case): A/A spread}) give each slowdown its resolution."""
    gpu_class = str(head.machine["gpu_class"])
    if gpu_class not in thresholds.gpu_classes:
        covered = list(thresholds.gpu_classes)
        raise GateError(
            f"perf thresholds cover the GPU classes {covered} (gpu_classes), not these results' {gpu_class!r}"
        )
    rules = thresholds.applicable(gpu_class)
    _check_timed(rules, head)
    findings = [
        *unmatched(thresholds, head),
        *removals(thresholds, base, head, selection),
        *availability(rules, base, head),
        *invalid_times(base, head),
        *bounds(rules, head, thresholds.near_bound),
        *slowdowns(thresholds, rules, base, head, spreads or {}),
        *orders(rules, head),
    ]
    return findings + coverage(thresholds, base, head, findings)


def unmatched(thresholds: Thresholds, head: Run) -> list[Finding]:
    """What in the rules guards nothing in head's suite (or, where it is not known, head's results)."""
    cases = head.suite if head.suite is not None else head.measurements
    return [
        Finding("config", "perf thresholds", rule.label, Verdict.FAIL, message)
        for rule, message in thresholds.unmatched(list(cases))
    ]


def removals(thresholds: Thresholds, base: Run, head: Run, selection: bool) -> list[Finding]:
    """Cases of base's suite (or base's results) that head's suite lacks: the pull request removed them."""
    removed = sorted(base.cases - head.suite, key=lambda c: c.asv_id)
    findings = [_removal(thresholds, case) for case in removed]
    for glob in [] if selection else thresholds.removed:
        if not any(fnmatch.fnmatchcase(case.asv_id, glob) for case in removed):
            reason = f"removed glob {glob!r} matches no case this PR removes (drop it: the removal has landed)"
            findings.append(Finding("config", "perf thresholds", "removed", Verdict.WARN, reason))
    if base.suite is None:
        reason = "cases removed by this PR cannot be seen: no --base-suite (base's benchmarks.json) given"
        findings.append(Finding("removed", "-", "-", Verdict.WARN, reason))
    return findings


def _removal(thresholds: Thresholds, case: Case) -> Finding:
    declared = next((glob for glob in thresholds.removed if fnmatch.fnmatchcase(case.asv_id, glob)), None)
    if declared is None:
        reason = "removed by this PR: in base's benchmark suite, not in head's (declare it in [defaults] removed)"
        return Finding("removed", case.benchmark, case.label, Verdict.FAIL, reason)
    reason = f"removed, declared in perf-thresholds.toml (removed glob {declared!r})"
    return Finding("removed", case.benchmark, case.label, Verdict.WARN, reason)


def _check_timed(rules: list[Rule], head: Run) -> None:
    for rule in rules:
        if rule.max_slowdown is None and not rule.not_slower_than:
            continue
        untimed = next((c for c in head.measurements if rule.matches(c) and c.kind != "time"), None)
        if untimed is not None:
            raise GateError(f"perf thresholds: {rule.label} compares times but matches {untimed.benchmark}")


def _loosening_rules(rules: list[Rule], case: Case, base: Run) -> list[Rule]:
    """The rules matching ``case`` whose max_slowdown and may_skip, limits that can loosen, count on it:
    a rule head adds counts only on a case base lacks."""
    return [rule for rule in rules if rule.matches(case) and not (rule.from_head and case in base.cases)]


def availability(rules: list[Rule], base: Run, head: Run) -> list[Finding]:
    """Cases head's suite still has that head did not record, or recorded without a value."""
    missing = [case for case in base.measurements if case in head.suite and case not in head.measurements]
    gone = {case.benchmark for case in missing} - head.benchmarks
    findings = [
        Finding("missing", name, "all cases", Verdict.FAIL, "present in base, missing in head") for name in sorted(gone)
    ]
    findings += [
        Finding("missing", case.benchmark, case.label, Verdict.FAIL, "present in base, missing in head")
        for case in missing
        if case.benchmark not in gone
    ]
    findings += [
        finding
        for case, m in head.measurements.items()
        if (finding := _unmeasured(rules, case, m, base, head.units.get(case.benchmark, "")))
    ]
    return findings


def _unmeasured(rules: list[Rule], case: Case, m: Measurement, base: Run, unit: str) -> Finding | None:
    """A head value that is no measurement: failed, NaN where no rule expects it, or NaN where base measured."""
    if m.value is None:
        reason = f"failed in head: {m.error}" if m.error else "failed or timed out in head (asv recorded no value)"
        return Finding("crashed", case.benchmark, case.label, Verdict.FAIL, reason)
    if m.finite:
        return None
    if not any(rule.may_skip for rule in _loosening_rules(rules, case, base)):
        reason = f"head returned {m.value} (NaN: skipped, or an invalid measurement)"
        return Finding("crashed", case.benchmark, case.label, Verdict.FAIL, reason)
    b = base.measurements.get(case)
    if b is not None and b.finite:
        reason = f"measured at base ({human(b.value, unit)}), skipped at head (NaN)"
        return Finding("skipped", case.benchmark, case.label, Verdict.FAIL, reason, base=b.value, unit=unit)
    return None


def invalid_times(base: Run, head: Run) -> list[Finding]:
    """A time at or below 0 s is a broken timer, not a measurement: it fails, and is compared with nothing."""
    findings = []
    for case in sorted(base.measurements.keys() | head.measurements.keys(), key=lambda c: c.asv_id):
        b, h = base.measurements.get(case), head.measurements.get(case)
        bad = [f"at {role}: {why}" for role, m in (("base", b), ("head", h)) if (why := _not_a_time(case, m))]
        if bad:
            reason = f"non-positive time {'; '.join(bad)}: a broken timer, not a measurement"
            findings.append(Finding(
                "invalid", case.benchmark, case.label, Verdict.FAIL, reason,
                base=b.value if b else None, head=h.value if h else None, unit="seconds",
            ))  # fmt: skip
    return findings


def _not_a_time(case: Case, m: Measurement | None) -> str:
    """What in a time_* measurement is at or below 0 s (its value, its samples), or "" when nothing is."""
    if m is None or case.kind != "time":
        return ""
    bad = [f"value {m.value:g} s"] if m.finite and m.value <= 0 else []
    samples = [s for s in m.samples or [] if s <= 0]
    if samples:
        shown = ", ".join(f"{s:g}" for s in samples[:3]) + (", ..." if len(samples) > 3 else "")
        bad.append(f"{len(samples)} of {len(m.samples)} samples <= 0 s ({shown})")
    return ", ".join(bad)


def _usable(case: Case, m: Measurement | None) -> bool:
    """A value to judge: finite, and a time where it must be one."""
    return m is not None and m.finite and not _not_a_time(case, m)


def bounds(rules: list[Rule], head: Run, near_bound: float = 0.0) -> list[Finding]:
    findings = []
    for rule in rules:
        for case, m in head.measurements.items():
            if not (_usable(case, m) and rule.matches(case)):
                continue
            unit = head.units.get(case.benchmark, "")
            if rule.min is not None:
                findings.append(_bound(rule, case, m, unit, "floor", rule.min, near_bound))
            if rule.max is not None:
                findings.append(_bound(rule, case, m, unit, "ceiling", rule.max, near_bound))
    return findings


def _bound(rule: Rule, case: Case, m: Measurement, unit: str, check: str, bound: float, near: float = 0.0) -> Finding:
    """A floor or ceiling on head's value. A bound passed by less than ``near`` (a fraction of it) is a near miss,
    re-measured: a PR check's first reading of a speedup or host ratio may rest on a reference's stored time."""
    floor = check == "floor"
    ok = m.value >= bound if floor else m.value <= bound
    badness = _ratio(bound, m.value) if floor else _ratio(m.value, bound)
    limit = f"{'≥' if floor else '≤'} {bound:g}"
    relation = ("≥" if ok else "<") if floor else ("≤" if ok else ">")
    narrowly = m.value < bound * (1 + near) if floor else m.value > bound * (1 - near)
    near_miss = ok and not rule.informational and narrowly
    reason = f"{human(m.value, unit)} {relation} {check} {bound:g}"
    reason += f" by less than {near:.0%} (a near miss): {rule.cited}" if near_miss else f": {rule.cited}"
    return Finding(
        check, case.benchmark, case.label, _verdict(ok, rule.informational), reason,
        head=m.value, ratio=_ratio(m.value, bound), limit=limit, unit=unit, badness=badness,
        remeasure=(("head", case.asv_id),), rule=rule.cited, near_miss=near_miss,
    )  # fmt: skip


def slowdowns(
    thresholds: Thresholds, rules: list[Rule], base: Run, head: Run, spreads: dict[tuple[str, str], float]
) -> list[Finding]:
    """Every time_* case head measured; one whose base time is not a time is reported by invalid_times."""
    judged = []
    for case, h in head.measurements.items():
        if case.kind == "time" and _usable(case, h) and not _not_a_time(case, base.measurements.get(case)):
            spread = spreads.get((case.benchmark, case.label))
            judged.append(_slowdown(thresholds, rules, case, base, h, head.units.get(case.benchmark, ""), spread))
    return judged


def _slowdown(
    thresholds: Thresholds, rules: list[Rule], case: Case, base: Run, h: Measurement, unit: str, spread: float | None
) -> Finding:
    b = base.measurements.get(case)
    if b is None or not b.finite:
        reason = "new in head: not compared" if b is None else f"base has no value ({b.value}): not compared"
        return Finding("slowdown", case.benchmark, case.label, Verdict.WARN, reason, head=h.value, unit=unit)
    limit, rule = _slowdown_limit(thresholds, rules, case, base)
    informational = rule is not None and rule.informational
    ratio = h.value / b.value
    slower = ratio > 1 + limit
    near_miss = not slower and not informational and ratio > 1 + limit - thresholds.near_miss > 1
    reason = f"{ratio:.3f}x base, {'beyond' if slower else 'within'} +{limit:.0%}"
    if near_miss:
        reason += f" by less than {thresholds.near_miss:.1%} (a near miss)"
    if slower and not _is_result_better(b.value, h.value, _stats(b, case, "base"), _stats(h, case, "head"), 1 + limit):
        reason += ", but not significant by asv's statistics (samples too spread to tell)"
    reason += f" ({rule.cited if rule else 'default'})"
    return Finding(
        "slowdown", case.benchmark, case.label, _verdict(not slower, informational), reason,
        base=b.value, head=h.value, ratio=ratio, limit=f"≤ +{limit:.0%}", unit=unit, badness=ratio / (1 + limit),
        remeasure=(("base", case.asv_id), ("head", case.asv_id)),
        rule=rule.cited if rule else "default", near_miss=near_miss,
        resolution=None if spread is None else resolution(spread, limit, thresholds.near_miss),
    )  # fmt: skip


def _slowdown_limit(thresholds: Thresholds, rules: list[Rule], case: Case, base: Run) -> tuple[float, Rule | None]:
    """The last matching rule with max_slowdown wins, of those that count on the case; else the default."""
    chosen = [rule for rule in _loosening_rules(rules, case, base) if rule.max_slowdown is not None]
    return (chosen[-1].max_slowdown, chosen[-1]) if chosen else (thresholds.max_slowdown, None)


def orders(rules: list[Rule], head: Run) -> list[Finding]:
    findings = []
    for rule in rules:
        for case, m in head.measurements.items():
            if not (rule.not_slower_than and rule.matches(case)):
                continue
            for other in rule.others(case):
                if other == case:
                    continue
                if other not in head.measurements:
                    raise GateError(f"perf thresholds: {rule.label}: no case ({other.label}) to compare with")
                o = head.measurements[other]
                if not (_usable(case, m) and _usable(other, o)):
                    continue  # reported by availability or invalid_times
                findings.append(_order(rule, case, m, other, o, head.units.get(case.benchmark, "")))
    return findings


def _order(rule: Rule, case: Case, m: Measurement, other: Case, o: Measurement, unit: str) -> Finding:
    slower = _is_result_better(o.value, m.value, _stats(o, other, "head"), _stats(m, case, "head"), 1.0)
    ratio = m.value / o.value
    reason = f"{human(m.value, unit)} vs {human(o.value, unit)} for ({other.label}): {rule.cited}"
    return Finding(
        "order", case.benchmark, case.label, _verdict(not slower, rule.informational), reason,
        head=m.value, ratio=ratio, limit=f"not slower than ({other.label})", unit=unit, badness=ratio,
        remeasure=(("head", case.asv_id), ("head", other.asv_id)),
        rule=rule.cited,
    )  # fmt: skip


def coverage(thresholds: Thresholds, base: Run, head: Run, findings: list[Finding]) -> list[Finding]:
    """Fail when nothing was compared, or less than min_compared of the time_* cases that head
    measured and base's results hold (those not new in head)."""
    compared = sum(1 for f in findings if f.check == "slowdown" and f.ratio is not None)
    comparable = sum(
        1 for case, m in head.measurements.items() if case.kind == "time" and m.finite and case in base.measurements
    )
    if compared == 0:
        reason = "nothing was compared: no time_* case has a value at both base and head"
    elif compared < thresholds.min_compared * comparable:
        reason = (
            f"only {compared} of the {comparable} time_* cases head measured and base's results hold were "
            f"compared ({compared / comparable:.1%} < min_compared {thresholds.min_compared:.0%}): "
            "the others have no valid time at base or head"
        )
    else:
        return []
    return [Finding("gate", "-", "-", Verdict.FAIL, reason)]


def _stats(m: Measurement, case: Case, role: str) -> tuple[dict | None, list[float]]:
    if not m.samples:
        raise GateError(f"{role} {case.asv_id}: no samples recorded (run asv with --record-samples)")
    return m.stats, m.samples


def _verdict(ok: bool, informational: bool) -> Verdict:
    if ok:
        return Verdict.PASS
    return Verdict.WARN if informational else Verdict.FAIL


def _ratio(a: float, b: float) -> float:
    return a / b if b else float("inf")
