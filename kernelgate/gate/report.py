"""The verdict for people and machines: a markdown table (worst first), a JSON file, a PNG of head/base ratios."""

import collections
import dataclasses
import json
import math
import os
import re
import statistics
from pathlib import Path

import matplotlib

matplotlib.use("Agg")  # CI runners have no display
import matplotlib.pyplot as plt

from kernelgate.gate.findings import Finding, Outcome, Verdict, human, worst_first

SHOWN_ROWS = 60  # keeps a PR comment readable and under GitHub's 65536 characters; verdict.json has every row
CHART_CASES = 12  # the slowest compared cases the comment's chart shows
COLORS = {Verdict.FAIL: "tab:red", Verdict.WARN: "tab:orange", Verdict.CLEARED: "tab:blue", Verdict.PASS: "tab:green"}


def publish(outcome: Outcome, out: Path) -> None:
    """report.md and verdict.json first, then the console, the GitHub step summary and the plot."""
    text = markdown(outcome)
    out.mkdir(parents=True, exist_ok=True)
    (out / "report.md").write_text(text, encoding="utf-8")
    write_json(outcome, out / "verdict.json")
    print(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(text)
    plot_ratios(outcome, out / "ratios.png")


def markdown(outcome: Outcome) -> str:
    status = "could not evaluate" if outcome.error else ("passed" if outcome.passed else "FAILED")
    gpu = f" ({outcome.gpu})" if outcome.gpu else ""
    lines = [
        f"## Perf gate {'✅' if outcome.passed else '❌'} {status}",
        "",
        f"Machine `{outcome.machine}`{gpu}, base `{outcome.base[:8]}` → head `{outcome.head[:8]}`.",
        "",
    ]
    if outcome.error:
        lines += [f"**{outcome.error}**", "", "The gate fails closed: the benchmarks were not judged.", ""]
        rows = outcome.failures  # what was judged before the error (the tests)
    else:
        counts = collections.Counter(f.verdict for f in outcome.findings)
        lines += [", ".join(f"{counts[v]} {v.value}" for v in Verdict) + " (cleared: re-measured as noise).", ""]
        lines += _resolution(outcome)
        rows = worst_first(list(outcome.findings))
    if not rows:
        return "\n".join(lines)
    cited: dict[str, str] = {}  # a rule's why -> its label in this report, in the order rows first cite it
    shown = _fold_warnings(rows, cited)
    lines += [
        "| verdict | kernel | case | check | base | head | ratio | limit | why |",
        "|---|---|---|---|---|---|---|---|---|",
        *shown[:SHOWN_ROWS],
    ]
    if len(shown) > SHOWN_ROWS:
        lines += ["", f"… and {len(shown) - SHOWN_ROWS} more rows, less severe than those shown, in verdict.json."]
    chart = _ratio_chart(rows)
    return "\n".join([*lines, *_rules_cited(cited, shown[:SHOWN_ROWS]), *chart, *_head_rules(outcome), ""])


def _resolution(outcome: Outcome) -> list[str]:
    """What a green rules out: the slowdowns the time cases' checks red nine times in ten, from their A/A spread."""
    slowdowns = [f for f in outcome.findings if f.check == "slowdown" and f.ratio is not None]
    if not slowdowns:
        return []
    seen = sorted((f.resolution, f) for f in slowdowns if f.resolution is not None)
    if not seen:
        return [f"What a green means: no A/A spread is recorded for {outcome.gpu_class or 'this GPU class'} "
                "(perf-noise.json), so the smallest slowdown each case would show is not known.", ""]  # fmt: skip
    worst, case = seen[-1]
    unknown = len(slowdowns) - len(seen)
    return [
        f"What a green means: from the spread of {outcome.noise_checks} identical-code checks on "
        f"{outcome.gpu_class}, the {len(seen)} time cases compared would read red, nine times in ten, a slowdown "
        f"of {statistics.median(r for r, _ in seen):.1%} (the median; each case's in its limit's \"sees\") to "
        f"{worst:.1%} ({case.benchmark.split('.', 1)[-1]}, {case.case})"
        + (f"; {unknown} more have no recorded spread." if unknown else "."),
        "",
    ]


def _ratio_chart(rows: list[Finding]) -> list[str]:
    """The slowest compared time cases' head/base ratios (bars) and their limits (line), as a Mermaid chart,
    which GitHub renders in the comment itself."""
    compared = sorted((f for f in rows if f.check == "slowdown" and f.base is not None and f.ratio is not None),
                      key=lambda f: f.ratio, reverse=True)[:CHART_CASES]  # fmt: skip
    if not compared:
        return []
    labels = [f"{f.benchmark.split('.')[1]} {f.case}".replace('"', "")[:48] for f in compared]
    limits = [f.ratio / f.badness for f in compared]
    values = [f.ratio for f in compared] + limits
    low, high = min(1.0, *values) - 0.01, max(values) + 0.01
    return [
        "",
        "```mermaid",
        "xychart-beta horizontal",
        f'    title "head / base, the {len(compared)} slowest cases compared (line: each limit)"',
        "    x-axis [" + ", ".join(f'"{label}"' for label in labels) + "]",
        f'    y-axis "head / base" {low:.2f} --> {high:.2f}',
        "    bar [" + ", ".join(f"{f.ratio:.3f}" for f in compared) + "]",
        "    line [" + ", ".join(f"{limit:.3f}" for limit in limits) + "]",
        "```",
    ]


def _rules_cited(cited: dict[str, str], shown: list[str]) -> list[str]:
    """Each rule the shown rows cite, its why said once."""
    used = [(why, label) for why, label in cited.items() if any(re.search(rf"\brule {label}\b", r) for r in shown)]
    if not used:
        return []
    return ["", "Rules cited:", "", *(f"- **{label}**: {why}" for why, label in used)]


def _cite(f: Finding, reason: str, cited: dict[str, str]) -> str:
    """``reason`` with its rule's why (``Finding.rule``) replaced by the rule's label (R1, R2, ... in the order
    rows first cite them), which ``_rules_cited`` lists once."""
    if not f.rule or f.rule == "default" or f.rule not in reason:
        return reason
    label = cited.setdefault(f.rule, f"R{len(cited) + 1}")
    return reason.replace(f.rule, f"rule {label}")


def _head_rules(outcome: Outcome) -> list[str]:
    """The section listing the rules head's thresholds file adds, where it adds any."""
    if not outcome.head_rules:
        return []
    return [
        "",
        "### Rules this pull request adds (judged now: they can only tighten)",
        "",
        "On cases base has, only their `min`, `max` and `not_slower_than` apply.",
        "",
        *(f"- {rule}" for rule in outcome.head_rules),
    ]


def _fold_warnings(rows: list[Finding], cited: dict[str, str]) -> list[str]:
    """Table rows, worst first. Warnings of one kind on several cases (an informational target not
    reached yet, cases new in head) fold into one row with their count and ratio range, so they
    cannot bury a failure."""
    groups: dict[tuple[str, ...], list[Finding]] = collections.defaultdict(list)
    for f in rows:
        if f.verdict is Verdict.WARN:
            groups[_fold_key(f)].append(f)
    shown = []
    for f in rows:
        group = groups[_fold_key(f)] if f.verdict is Verdict.WARN else []
        if len(group) < 2:
            shown.append(_row(f, cited))
        elif f is group[0]:  # the worst of its group, since rows are worst first
            shown.append(_folded_row(group, cited))
    return shown


def _fold_key(f: Finding) -> tuple[str, ...]:
    return f.check, f.benchmark, f.limit, f.rule or f.reason


def _row(f: Finding, cited: dict[str, str]) -> str:
    ratio = "" if f.ratio is None else f"{f.ratio:.3f}"
    return _table_row(f, f"**{f.verdict.value}**", f.case, ratio, _cite(f, f.reason, cited))


def _folded_row(group: list[Finding], cited: dict[str, str]) -> str:
    worst = group[0]
    ratios = [f.ratio for f in group if f.ratio is not None]
    ratio = f"{min(ratios):.3f}-{max(ratios):.3f}" if ratios else ""
    case = f"{len(group)} cases, worst: {worst.case}"
    return _table_row(worst, f"**{worst.verdict.value}**", case, ratio, _cite(worst, _fold_key(worst)[-1], cited))


def _table_row(f: Finding, verdict: str, case: str, ratio: str, why: str) -> str:
    kernel = f.benchmark.split(".", 1)[-1]  # the module name repeats the class's
    limit = f.limit if f.resolution is None else f"{f.limit}, sees {f.resolution:.1%}"
    cells = [verdict, kernel, case, f.check, human(f.base, f.unit), human(f.head, f.unit), ratio, limit, why]
    return "| " + " | ".join(c.replace("|", "\\|") for c in cells) + " |"


def write_json(outcome: Outcome, path: Path) -> None:
    findings = [
        {**_finite(dataclasses.asdict(f)), "verdict": f.verdict.value} for f in worst_first(list(outcome.findings))
    ]
    data = {
        "passed": outcome.passed,
        "exit_code": outcome.exit_code,
        "error": outcome.error,
        "machine": outcome.machine,
        "gpu": outcome.gpu,
        "base": outcome.base,
        "head": outcome.head,
        "head_rules": list(outcome.head_rules),
        "findings": findings,
    }
    path.write_text(json.dumps(data, indent=2, allow_nan=False) + "\n")


def _finite(row: dict) -> dict:
    """JSON has no infinity: an unbounded badness or ratio becomes null."""
    return {k: None if isinstance(v, float) and not math.isfinite(v) else v for k, v in row.items()}


def plot_ratios(outcome: Outcome, path: Path) -> bool:
    """Head/base ratio of every compared time_* case, sorted; False when there is none to plot."""
    compared = [f for f in outcome.findings if f.check == "slowdown" and f.ratio is not None]
    compared.sort(key=lambda f: f.ratio)
    if not compared:
        return False
    fig, ax = plt.subplots(figsize=(10, 4))
    for verdict in Verdict:
        index = [i for i, f in enumerate(compared) if f.verdict is verdict]
        if index:
            ax.scatter(index, [compared[i].ratio for i in index], s=12, color=COLORS[verdict], label=verdict.value)
    ax.axhline(1.0, color="gray", linewidth=0.8)
    ax.set(
        xlabel="time_* cases, sorted by ratio",
        ylabel="head / base (lower is faster)",
        title=f"{outcome.machine}: {outcome.head[:8]} vs {outcome.base[:8]}",
    )
    ax.legend(loc="upper left")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)
    return True
