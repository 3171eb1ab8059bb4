"""Head against the thresholds and against base, case by case.

* config: every rule matches some case of head;
* availability: every case of base is in head, and head measured each one;
* bounds: ``min`` / ``max`` on head's values;
* slowdown: head vs base on every time_* case, decided as ``asv compare``
  decides (Mann-Whitney U on the recorded samples, else 99% CI overlap)
  with the factor 1 + max_slowdown;
* order: ``not_slower_than`` between cases of the same run, same decision
  with the factor 1.
"""

from asv.commands.compare import _is_result_better  # asv compare's own test of "a is better than b"

from kernelgate.gate import GateError
from kernelgate.gate.asv_results import Case, Measurement, Run
from kernelgate.gate.findings import Finding, Verdict, human
from kernelgate.gate.thresholds import Rule, Thresholds


def evaluate(thresholds: Thresholds, base: Run, head: Run, selection: bool = False) -> list[Finding]:
    """All checks; with a ``selection`` (a --bench subset) rules outside it are not configuration errors."""
    rules = thresholds.applicable(str(head.machine["gpu_class"]))
    _check_timed(rules, head)
    findings = [
        *([] if selection else unmatched(thresholds, head)),
        *availability(rules, base, head),
        *bounds(rules, head),
        *slowdowns(thresholds, rules, base, head),
        *orders(rules, head),
    ]
    if not any(f.check == "slowdown" and f.ratio is not None for f in findings):
        reason = "nothing was compared: no time_* case has a value at both base and head"
        findings.append(Finding("gate", "-", "-", Verdict.FAIL, reason))
    return findings


def unmatched(thresholds: Thresholds, head: Run) -> list[Finding]:
    return [
        Finding("config", "perf thresholds", rule.label, Verdict.FAIL, f"{rule.label} matches no benchmark case")
        for rule in thresholds.unmatched(list(head.measurements))
    ]


def _check_timed(rules: list[Rule], head: Run) -> None:
    for rule in rules:
        if rule.max_slowdown is None and not rule.not_slower_than:
            continue
        untimed = next((c for c in head.measurements if rule.matches(c) and not c.timed), None)
        if untimed is not None:
            raise GateError(f"perf thresholds: {rule.label} compares times but matches {untimed.benchmark}")


def availability(rules: list[Rule], base: Run, head: Run) -> list[Finding]:
    findings = [
        Finding("missing", name, "all cases", Verdict.FAIL, "present in base, missing in head")
        for name in sorted(base.benchmarks - head.benchmarks)
    ]
    findings += [
        Finding("missing", case.benchmark, case.label, Verdict.FAIL, "present in base, missing in head")
        for case in base.measurements
        if case.benchmark in head.benchmarks and case not in head.measurements
    ]
    for case, m in head.measurements.items():
        if m.value is None:
            reason = "failed or timed out in head (asv recorded no value)"
        elif not m.finite and not any(rule.may_skip and rule.matches(case) for rule in rules):
            reason = f"head returned {m.value} (NaN: skipped, or an invalid measurement)"
        else:
            continue
        findings.append(Finding("crashed", case.benchmark, case.label, Verdict.FAIL, reason))
    return findings


def bounds(rules: list[Rule], head: Run) -> list[Finding]:
    findings = []
    for rule in rules:
        for case, m in head.measurements.items():
            if not (m.finite and rule.matches(case)):
                continue
            unit = head.units.get(case.benchmark, "")
            if rule.min is not None:
                findings.append(_bound(rule, case, m, unit, "floor", rule.min))
            if rule.max is not None:
                findings.append(_bound(rule, case, m, unit, "ceiling", rule.max))
    return findings


def _bound(rule: Rule, case: Case, m: Measurement, unit: str, check: str, bound: float) -> Finding:
    floor = check == "floor"
    ok = m.value >= bound if floor else m.value <= bound
    badness = _ratio(bound, m.value) if floor else _ratio(m.value, bound)
    limit = f"{'≥' if floor else '≤'} {bound:g}"
    relation = ("≥" if ok else "<") if floor else ("≤" if ok else ">")
    reason = f"{human(m.value, unit)} {relation} {check} {bound:g}: {rule.why}"
    return Finding(
        check, case.benchmark, case.label, _verdict(ok, rule.informational), reason,
        head=m.value, ratio=_ratio(m.value, bound), limit=limit, unit=unit, badness=badness,
        remeasure=(("head", case.asv_id),),
    )  # fmt: skip


def slowdowns(thresholds: Thresholds, rules: list[Rule], base: Run, head: Run) -> list[Finding]:
    return [
        _slowdown(thresholds, rules, case, base.measurements.get(case), h, head.units.get(case.benchmark, ""))
        for case, h in head.measurements.items()
        if case.timed and h.finite
    ]


def _slowdown(
    thresholds: Thresholds, rules: list[Rule], case: Case, b: Measurement | None, h: Measurement, unit: str
) -> Finding:
    if b is None or not b.finite:
        reason = "new in head: not compared" if b is None else f"base has no value ({b.value}): not compared"
        return Finding("slowdown", case.benchmark, case.label, Verdict.WARN, reason, head=h.value, unit=unit)
    limit, rule = _slowdown_limit(thresholds, rules, case)
    ratio = h.value / b.value
    slower = _is_result_better(b.value, h.value, _stats(b, case, "base"), _stats(h, case, "head"), 1 + limit)
    reason = f"{ratio:.3f}x base, {'beyond' if slower else 'within'} +{limit:.0%} ({rule.why if rule else 'default'})"
    return Finding(
        "slowdown", case.benchmark, case.label, _verdict(not slower, rule is not None and rule.informational), reason,
        base=b.value, head=h.value, ratio=ratio, limit=f"≤ +{limit:.0%}", unit=unit, badness=ratio / (1 + limit),
        remeasure=(("base", case.asv_id), ("head", case.asv_id)),
    )  # fmt: skip


def _slowdown_limit(thresholds: Thresholds, rules: list[Rule], case: Case) -> tuple[float, Rule | None]:
    """The last matching rule with max_slowdown wins; else the default."""
    chosen = [rule for rule in rules if rule.max_slowdown is not None and rule.matches(case)]
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
                if not (m.finite and o.finite):
                    continue  # reported by availability
                findings.append(_order(rule, case, m, other, o, head.units.get(case.benchmark, "")))
    return findings


def _order(rule: Rule, case: Case, m: Measurement, other: Case, o: Measurement, unit: str) -> Finding:
    slower = _is_result_better(o.value, m.value, _stats(o, other, "head"), _stats(m, case, "head"), 1.0)
    ratio = m.value / o.value
    reason = f"{human(m.value, unit)} vs {human(o.value, unit)} for ({other.label}): {rule.why}"
    return Finding(
        "order", case.benchmark, case.label, _verdict(not slower, rule.informational), reason,
        head=m.value, ratio=ratio, limit=f"not slower than ({other.label})", unit=unit, badness=ratio,
        remeasure=(("head", case.asv_id), ("head", other.asv_id)),
    )  # fmt: skip


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
