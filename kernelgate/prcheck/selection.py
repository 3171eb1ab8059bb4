"""Which groups of tests and benchmarks a change can affect (pr-check.toml).

A changed path selects the groups whose ``paths`` match it; ``everything`` selects every group;
``ignore`` selects none. A path that nothing names selects every group, so an unforeseen file
never narrows the check. Globs follow ``fnmatch``: ``*`` and ``**`` both match across folders.

The map is the base commit's. What head's map adds to it (``with_additions``) can only add work: a
group head adds always runs, and a group both have runs head's further tests and benchmarks too;
head's paths, ``everything`` and ``ignore`` never decide what runs.
"""

import dataclasses
import fnmatch
import tomllib
from pathlib import Path


class SelectionError(Exception):
    """pr-check.toml is missing or malformed."""


@dataclasses.dataclass(frozen=True)
class Group:
    name: str
    paths: tuple[str, ...]
    tests: tuple[str, ...]
    benchmarks: tuple[str, ...]  # regexes on asv case ids


@dataclasses.dataclass(frozen=True)
class GroupMap:
    groups: dict[str, Group]
    everything: tuple[str, ...]
    ignore: tuple[str, ...]
    added: tuple[str, ...] = ()  # groups head's map adds: always selected, their paths claim nothing


@dataclasses.dataclass(frozen=True)
class Selection:
    groups: tuple[str, ...]
    reasons: dict[str, list[str]]  # group -> the changed paths (or the rule) that selected it

    def tests(self, groups: GroupMap) -> list[str]:
        return [t for name in self.groups for t in groups.groups[name].tests]

    def benchmarks(self, groups: GroupMap) -> list[str]:
        return [b for name in self.groups for b in groups.groups[name].benchmarks]


def _strings(table: dict, key: str, where: str) -> tuple[str, ...]:
    value = table.get(key, [])
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise SelectionError(f"{where}: {key} must be a list of strings")
    return tuple(value)


def load(path: Path) -> GroupMap:
    try:
        data = tomllib.loads(path.read_text(encoding="utf-8"))
    except (OSError, UnicodeDecodeError, tomllib.TOMLDecodeError) as exc:
        raise SelectionError(f"cannot read {path}: {exc}") from exc
    unknown = set(data) - {"everything", "ignore", "group"}
    if unknown:
        raise SelectionError(f"{path}: unknown keys {sorted(unknown)}")
    groups = {}
    for name, table in data.get("group", {}).items():
        where = f"{path}: group.{name}"
        extra = set(table) - {"paths", "tests", "benchmarks"}
        if extra:
            raise SelectionError(f"{where}: unknown keys {sorted(extra)}")
        groups[name] = Group(name, *(_strings(table, k, where) for k in ("paths", "tests", "benchmarks")))
    if not groups:
        raise SelectionError(f"{path} declares no group")
    return GroupMap(groups, _strings(data, "everything", str(path)), _strings(data, "ignore", str(path)))


def with_additions(base: GroupMap, head: GroupMap) -> GroupMap:
    """Base's map with what head's adds: its new groups, and its further tests and benchmarks of groups both have."""
    groups = dict(base.groups)
    for name, theirs in head.groups.items():
        if name in groups:
            ours = groups[name]
            union = lambda a, b: tuple(dict.fromkeys(a + b))
            groups[name] = dataclasses.replace(
                ours, tests=union(ours.tests, theirs.tests), benchmarks=union(ours.benchmarks, theirs.benchmarks)
            )
    added = tuple(name for name in head.groups if name not in base.groups)
    groups.update({name: head.groups[name] for name in added})
    return dataclasses.replace(base, groups=groups, added=added)


def matches(path: str, globs: tuple[str, ...]) -> bool:
    return any(fnmatch.fnmatchcase(path, g) for g in globs)


def select(groups: GroupMap, changed: list[str], full: str | None = None) -> Selection:
    """The groups ``changed`` paths select; ``full`` (a reason) selects every group."""
    reasons: dict[str, list[str]] = {name: [] for name in groups.groups}
    if full:
        return Selection(tuple(groups.groups), {name: [full] for name in groups.groups})
    for name in groups.added:
        reasons[name].append("the pull request adds this group")
    for path in changed:
        claimed = [
            name for name, group in groups.groups.items() if name not in groups.added and matches(path, group.paths)
        ]
        if matches(path, groups.everything):
            why = f"{path} (affects every group)"
        elif claimed:
            for name in claimed:
                reasons[name].append(path)
            continue
        elif matches(path, groups.ignore):
            continue
        else:
            why = f"{path} (no group claims it)"
        for name in groups.groups:
            reasons[name].append(why)
    chosen = tuple(name for name in groups.groups if reasons[name])
    return Selection(chosen, {name: reasons[name] for name in chosen})
