"""Two commits' compiled kernels as Markdown: per case, a "why" line and a table (``report``), or for many cases
the distinct changes and how many cases each holds for (``summary``). A commit's JSON is its own code's output,
a pull request's head's included: what it holds is checked before it is printed."""

import re

from kernelgate.explain import profile
from kernelgate.explain.diff import changes, ranked, table, why


def _kernels(entry: list) -> list:
    """KernelCode from a commit's JSON, which the report prints: a name that is not an identifier, or a number
    that is not one, is refused (the JSON of a pull request's head is its own code's output)."""
    from kernelgate.explain.compiled import KernelCode

    kernels = []
    for kernel in entry:
        if not isinstance(kernel, dict) or not re.fullmatch(r"\w{1,100}", str(kernel.get("kernel"))):
            raise ValueError("a kernel without an identifier for a name")
        numbers = {k: int(v) for k, v in kernel.items() if k not in ("kernel", "mix")}
        mix = {str(k): int(v) for k, v in kernel.get("mix", {}).items()}
        kernels.append(KernelCode(kernel=kernel["kernel"], mix=mix, **numbers))
    return kernels


def _said(error) -> str:
    """An error a commit's process gave, as plain text for the report."""
    return re.sub(r"[`|<>\[\]\n]", " ", str(error))[:200]


def _cases(case_ids: list[str]) -> str:
    """Other benchmarks of one call, shortly: their class and benchmark names."""
    return ", ".join(f"`{_said(case_id.split('(')[0].split('.', 1)[-1])}`" for case_id in case_ids)


def summary(base: dict, head: dict, shown: int = 10) -> str:
    """Markdown: of the cases both commits compiled, how many launch other code, and for each distinct change (its
    "why" line) the cases it holds for, the first ``shown`` of them with their tables."""
    by_why: dict[str, list[str]] = {}
    compared = 0
    for case_id in sorted(set(base) & set(head)):
        b, h = base[case_id], head[case_id]
        if isinstance(b, dict) or isinstance(h, dict):
            continue
        compared += 1
        try:
            kernels = _kernels(b), _kernels(h)
        except (TypeError, ValueError):
            continue
        if changes(*kernels):
            by_why.setdefault(why(*kernels), []).append(case_id)
    changed = sum(map(len, by_why.values()))
    lines = [f"Compiled kernels of {compared} cases at both commits: {changed} launch other code.", ""]
    for line, cases in sorted(by_why.items(), key=lambda item: -len(item[1]))[:shown]:
        lines += [f"- {_said(line)}: {len(cases)} case(s), e.g. `{_said(cases[0])}`"]
    if len(by_why) > shown:
        lines += [f"- and {len(by_why) - shown} more distinct changes"]
    return "\n".join(lines) + "\n"


def report(
    base: dict, head: dict, case_ids: list[str] | None = None, profiles: dict | None = None, calls: dict | None = None
) -> str:
    """Markdown: per case, the "why" line and the table of base's and head's kernels, and where ``profiles`` holds
    the case ({"base": [KernelProfile] or why there is none, "head": ...}), the table of what Nsight Compute
    measured of each commit's call, whose changes join the "why" line. ``calls`` names, per case, the other
    failing cases that make the same call (``kernelgate.explain.cases.same_call``)."""
    lines = []
    for case_id in case_ids or sorted(set(base) & set(head)):
        b, h = base.get(case_id), head.get(case_id)
        others = (calls or {}).get(case_id, [])
        lines += [f"**`{_said(case_id)}`**" + (f", and the same call's {_cases(others)}" if others else ""), ""]
        profiled = (profiles or {}).get(case_id)
        measured, profile_lines = [], []
        if profiled is not None:
            unprofiled = [f"{role}: {_said(p)}" for role, p in profiled.items() if isinstance(p, str)]
            if unprofiled:
                profile_lines = ["- not profiled with Nsight Compute: " + "; ".join(unprofiled), ""]
            else:
                measured = profile.changes(profiled["base"], profiled["head"])
                profile_lines = [profile.table(profiled["base"], profiled["head"]), ""]
        failed = [f"{role}: {_said(e.get('error'))}" for role, e in (("base", b), ("head", h)) if isinstance(e, dict)]
        try:
            kernels = None if b is None or h is None or failed else (_kernels(b), _kernels(h))
        except (TypeError, ValueError) as exc:
            kernels, failed = None, [f"not a list of compiled kernels ({_said(exc)})"]
        if kernels is None:
            if measured:
                lines += [f"- why: {'; '.join(ranked(measured)[:3])}", ""]
            lines += ["- compiled code not compared: " + ("; ".join(failed) or "a commit did not compile it"), ""]
        else:
            lines += [f"- why: {why(*kernels, measured=measured)}", "", table(*kernels), ""]
        lines += profile_lines
    return "\n".join(lines)


def between_runs(before: dict[str, dict], after: dict[str, dict]) -> str:
    """Markdown for two pytest-benchmark runs' extra_info (``nox -s perf -- --explain``), by benchmark name: where a
    benchmark's compiled kernels or its call's profile changed from the saved run, its why line and tables; one
    line when none did."""
    names = sorted(name for name in set(before) & set(after) if "kernels" in before[name] and "kernels" in after[name])
    base, head = {name: before[name]["kernels"] for name in names}, {name: after[name]["kernels"] for name in names}
    profiles = {}
    for name in names:
        if "profile" in before[name] and "profile" in after[name]:
            profiles[name] = {"base": _profiled(before[name]["profile"]), "head": _profiled(after[name]["profile"])}
    changed = [name for name in names if _differs(base[name], head[name], profiles.get(name))]
    if not changed:
        measured = " and their profiles" if profiles else ""
        return f"The compiled kernels{measured} of {len(names)} benchmarks are the same as the saved run's.\n"
    return report(base, head, changed, profiles)


def _profiled(entry) -> list | str:
    """A run's saved profile of a call: its kernels (``KernelProfile``), or why there is none."""
    if isinstance(entry, str):
        return entry
    try:
        return [profile.KernelProfile(**kernel) for kernel in entry]
    except TypeError as exc:
        return f"not a saved profile ({_said(exc)})"


def _differs(base, head, profiled: dict | None) -> bool:
    """Whether a benchmark's compiled kernels or its call's profile changed between two runs."""
    if isinstance(base, dict) or isinstance(head, dict):  # one was not compiled: a change only if the reason is
        compiled_changed = base != head
    else:
        try:
            compiled_changed = bool(changes(_kernels(base), _kernels(head)))
        except (TypeError, ValueError):
            compiled_changed = True
    if profiled is None or compiled_changed:
        return compiled_changed
    if any(isinstance(p, str) for p in profiled.values()):
        return profiled["base"] != profiled["head"]
    return bool(profile.changes(profiled["base"], profiled["head"]))
