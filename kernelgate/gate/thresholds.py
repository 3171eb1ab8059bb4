"""perf-thresholds.toml: which limits apply to which benchmark cases.

    [defaults]
    max_slowdown = 0.05             # every time_* case: head at most 5% slower than base
    gpu_classes = ["H100", "H200"]  # the GPU classes the rules cover: results from another fail
    removed = ["bench_x.Old.*"]     # optional: globs on asv case ids, ``name('value', ...)``, of the
                                    # cases the pull request may remove; any other removal fails
    min_compared = 0.9              # optional (default 0.9): the least fraction of the time_* cases
                                    # head measured and base's results hold that must be compared
    near_miss = 0.01                # optional (default 0): a slowdown read within this under its limit is
                                    # re-measured too (kernelgate/gate/confirm.py)
    near_bound = 0.05               # optional (default 0): a floor or ceiling that is not informational,
                                    # passed by less than this fraction of it, is re-measured too

    [[rule]]
    why = "where the figure comes from"                 # required
    benchmark = "bench_<op>.<Grid>*.track_*"            # glob on asv's benchmark name
    params = { direction = "fwd", shape = ["4096x*", "8192x8192"] }  # glob(s) per parameter; others match all
    gpu_class = ["H100", "H200"]                        # optional: the machines it applies on (default: all)
    # then at least one of:
    min = 1.16                  # floor on head's value
    max = 2.0                   # ceiling on head's value
    max_slowdown = 0.10         # relative limit vs base for time_* cases (the last matching rule wins)
    not_slower_than = { impl = ["region", "elem"] }  # in the same run, not slower than the case with
                                                     # these parameters substituted (one at a time)
    may_skip = true             # NaN (asv's mark of a skipped combination) is expected here
    # and optionally:
    informational = true        # report a breach, never fail on it

A rule that matches no case of head's suite is a configuration error, and so is
one glob of a rule's params list, or one name or value of its not_slower_than
table, that matches none; a rule's gpu_class must match one of gpu_classes, and
its numbers must be finite. A removed glob that matches no removed case is only
reported (the removal has landed).

The file is read from the pull request's base commit, so that a pull request cannot loosen its own
check. Head's file adds to it (``with_head_rules``): each rule of head's that base's lacks, compared
as parsed TOML tables (so an edited rule is added and base's original stays), is judged too. On a
case base has, such a rule only tightens: its ``min``, ``max`` and ``not_slower_than`` apply, its
``max_slowdown`` and ``may_skip`` do not; on a case new in head it applies in full. Head's file is
validated as base's is, each added rule's gpu_class against base's gpu_classes; its [defaults] are
not used.
"""

import dataclasses
import fnmatch
import itertools
import math
import tomllib
from pathlib import Path

from kernelgate.asv_case import Case
from kernelgate.gate import GateError

_NUMBER = (int, float)
_GLOBS = (str, list)
_RULE_FIELDS = {
    "why": str,
    "benchmark": str,
    "params": dict,
    "gpu_class": _GLOBS,
    "min": _NUMBER,
    "max": _NUMBER,
    "max_slowdown": _NUMBER,
    "not_slower_than": dict,
    "may_skip": bool,
    "informational": bool,
}
_CHECKS = ("min", "max", "max_slowdown", "not_slower_than", "may_skip")
_REQUIRED = ("why", "benchmark")


@dataclasses.dataclass(frozen=True, eq=False)
class Rule:
    number: int  # 1-based position in the file, for messages
    table: dict  # the [[rule]] table as parsed: what tells a rule of head's file from base's
    why: str
    benchmark: str
    params: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    gpu_class: tuple[str, ...] = ("*",)
    min: float | None = None
    max: float | None = None
    max_slowdown: float | None = None
    not_slower_than: dict[str, tuple[str, ...]] = dataclasses.field(default_factory=dict)
    may_skip: bool = False
    informational: bool = False
    from_head: bool = False  # added by head's file: on a case base has, it only tightens

    @property
    def label(self) -> str:
        params = ", ".join(f"{k}={'|'.join(v)}" for k, v in self.params.items())
        number = f"head's rule #{self.number}" if self.from_head else f"rule #{self.number}"
        return f"{number} ({self.benchmark}{f' [{params}]' if params else ''})"

    @property
    def cited(self) -> str:
        """The ``why`` as findings cite it: a rule head adds says so."""
        return f"{self.why} (head's rule #{self.number}, added by this pull request)" if self.from_head else self.why

    def matches(self, case: Case) -> bool:
        if not fnmatch.fnmatchcase(case.benchmark, self.benchmark):
            return False
        for name, globs in self.params.items():
            value = case.value(name)
            if value is None or not any(fnmatch.fnmatchcase(value, g) for g in globs):
                return False
        return True

    def applies_on(self, gpu_class: str) -> bool:
        return any(fnmatch.fnmatchcase(gpu_class, g) for g in self.gpu_class)

    def others(self, case: Case) -> list[Case]:
        """The cases ``case`` must not be slower than: one substitution per combination of listed values."""
        names, values = list(self.not_slower_than), self.not_slower_than.values()
        return [case.replaced(dict(zip(names, combo, strict=True))) for combo in itertools.product(*values)]


@dataclasses.dataclass(frozen=True)
class Thresholds:
    max_slowdown: float
    gpu_classes: tuple[str, ...]
    removed: tuple[str, ...]
    min_compared: float
    near_miss: float
    rules: tuple[Rule, ...]
    near_bound: float = 0.0

    def applicable(self, gpu_class: str) -> list[Rule]:
        return [rule for rule in self.rules if rule.applies_on(gpu_class)]

    def unmatched(self, cases: list[Case]) -> list[tuple[Rule, str]]:
        """What in the rules matches none of ``cases``, whatever the GPU class, as (rule, message): a whole
        rule, one glob of a params list, one value of a not_slower_than list. Each guards nothing."""
        known = set(cases)
        found = []
        for rule in self.rules:
            matched = [case for case in cases if rule.matches(case)]
            if not matched:
                found.append((rule, f"{rule.label} matches no benchmark case"))
                continue
            found += [
                (rule, f"{rule.label}: params {name} glob {glob!r} matches no benchmark case")
                for name, globs in rule.params.items()
                for glob in globs
                if not any(fnmatch.fnmatchcase(case.value(name), glob) for case in matched)
            ]
            names = {name for case in matched for name, _ in case.params}
            found += [
                (rule, f"{rule.label}: not_slower_than names {name!r}, no parameter of the cases it matches")
                for name in rule.not_slower_than
                if name not in names
            ]
            found += [
                (rule, f"{rule.label}: not_slower_than {name} = {value!r} names no benchmark case")
                for name, values in rule.not_slower_than.items()
                if name in names
                for value in values
                if not any(case.replaced({name: value}) in known for case in matched)
            ]
        return found


def load_thresholds(path: Path) -> Thresholds:
    try:
        data = tomllib.loads(path.read_text())
    except OSError as exc:
        raise GateError(f"perf thresholds: cannot read {path}: {exc}") from exc
    except (UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise GateError(f"perf thresholds: {path} is not valid TOML: {exc}") from exc
    unknown = set(data) - {"defaults", "rule"}
    if unknown:
        raise GateError(f"perf thresholds: unknown top-level keys {sorted(unknown)} in {path}")
    defaults = _defaults(data.get("defaults"), path)
    entries = data.get("rule", [])
    if not isinstance(entries, list):
        raise GateError(f"perf thresholds: rule in {path} is not an array of tables ([[rule]])")
    rules = tuple(_rule(number, entry) for number, entry in enumerate(entries, start=1))
    thresholds = Thresholds(rules=rules, **defaults)
    _check_gpu_classes(rules, thresholds.gpu_classes)
    return thresholds


def with_head_rules(thresholds: Thresholds, head: Path) -> Thresholds:
    """Base's ``thresholds`` plus each rule of head's file ``head`` that base's lacks, marked as head's.
    Any error in head's file names it."""
    known = [rule.table for rule in thresholds.rules]
    try:
        theirs = load_thresholds(head)
        added = tuple(dataclasses.replace(rule, from_head=True) for rule in theirs.rules if rule.table not in known)
        _check_gpu_classes(added, thresholds.gpu_classes)
    except GateError as exc:
        raise GateError(f"head's perf thresholds (--head-thresholds {head}): {exc}") from exc
    return dataclasses.replace(thresholds, rules=thresholds.rules + added)


def _check_gpu_classes(rules: tuple[Rule, ...], gpu_classes: tuple[str, ...]) -> None:
    for rule in rules:
        for glob in rule.gpu_class:
            if not any(fnmatch.fnmatchcase(name, glob) for name in gpu_classes):
                covered = list(gpu_classes)
                raise GateError(f"perf thresholds: {rule.label}: gpu_class {glob!r} matches none of {covered}")


def _defaults(table, path: Path) -> dict:
    where = f"perf thresholds: [defaults] in {path}"
    if not isinstance(table, dict) or not {"max_slowdown", "gpu_classes"} <= set(table):
        raise GateError(f"perf thresholds: {path} needs [defaults] with max_slowdown = <number> and gpu_classes")
    unknown = set(table) - {"max_slowdown", "gpu_classes", "removed", "min_compared", "near_miss", "near_bound"}
    if unknown:
        raise GateError(f"{where}: unknown keys {sorted(unknown)}")
    max_slowdown, min_compared = table["max_slowdown"], table.get("min_compared", 0.9)
    if not _is_number(max_slowdown) or not 0 <= max_slowdown < math.inf:
        raise GateError(f"{where}: max_slowdown = {max_slowdown!r} is not a number >= 0")
    if not _is_number(min_compared) or not 0 <= min_compared <= 1:
        raise GateError(f"{where}: min_compared = {min_compared!r} is not a fraction between 0 and 1")
    near_miss = table.get("near_miss", 0.0)
    if not _is_number(near_miss) or not 0 <= near_miss <= max_slowdown:
        raise GateError(f"{where}: near_miss = {near_miss!r} is not a number from 0 to max_slowdown")
    near_bound = table.get("near_bound", 0.0)
    if not _is_number(near_bound) or not 0 <= near_bound < 1:
        raise GateError(f"{where}: near_bound = {near_bound!r} is not a fraction from 0 to below 1")
    removed = table.get("removed", [])
    if not isinstance(removed, list) or not all(isinstance(glob, str) for glob in removed):
        raise GateError(f"{where}: removed = {removed!r} is not a list of strings")
    return {
        "max_slowdown": float(max_slowdown),
        "gpu_classes": _strings(table["gpu_classes"], f"{where}: gpu_classes"),
        "removed": tuple(removed),
        "min_compared": float(min_compared),
        "near_miss": float(near_miss),
        "near_bound": float(near_bound),
    }


def _rule(number: int, entry: dict) -> Rule:
    where = f"perf thresholds: rule #{number}"
    if not isinstance(entry, dict):
        raise GateError(f"{where} is not a table")
    unknown = set(entry) - set(_RULE_FIELDS)
    if unknown:
        raise GateError(f"{where}: unknown keys {sorted(unknown)} (known: {sorted(_RULE_FIELDS)})")
    missing = [key for key in _REQUIRED if key not in entry]
    if missing:
        raise GateError(f"{where}: missing {missing}")
    for key, value in entry.items():
        kind = _RULE_FIELDS[key]
        if not isinstance(value, kind) or (kind is _NUMBER and isinstance(value, bool)):
            raise GateError(f"{where}: {key} = {value!r} has the wrong type")
        if kind is _NUMBER and not math.isfinite(
            value
        ):  # TOML has nan and inf: no comparison passes or fails with them
            raise GateError(f"{where}: {key} = {value!r} is not a finite number")
    if entry.get("not_slower_than") == {}:
        raise GateError(f"{where}: not_slower_than is empty: name the parameter and the values to compare with")
    if not any(key in entry for key in _CHECKS):
        raise GateError(f"{where}: declares no check (one of {list(_CHECKS)})")
    if entry.get("max_slowdown", 0) < 0:
        raise GateError(f"{where}: max_slowdown must be >= 0")
    return Rule(
        number=number,
        table=entry,
        why=entry["why"],
        benchmark=entry["benchmark"],
        params=_strings_by_name(entry.get("params", {}), where),
        gpu_class=_strings(entry.get("gpu_class", "*"), f"{where}: gpu_class"),
        min=entry.get("min"),
        max=entry.get("max"),
        max_slowdown=entry.get("max_slowdown"),
        not_slower_than=_strings_by_name(entry.get("not_slower_than", {}), where),
        may_skip=entry.get("may_skip", False),
        informational=entry.get("informational", False),
    )


def _strings_by_name(table: dict, where: str) -> dict[str, tuple[str, ...]]:
    return {name: _strings(value, f"{where}: {name}") for name, value in table.items()}


def _strings(value, where: str) -> tuple[str, ...]:
    values = [value] if isinstance(value, str) else value
    if not isinstance(values, list) or not values or not all(isinstance(v, str) for v in values):
        raise GateError(f"{where} must be a string or a non-empty list of strings")
    return tuple(values)


def _is_number(value) -> bool:
    return isinstance(value, _NUMBER) and not isinstance(value, bool)
