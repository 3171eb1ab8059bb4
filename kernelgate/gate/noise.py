"""How far apart identical code reads, per time case, against the limit that judges it.

    python -m kernelgate.gate.noise CHECK_DIR... [--tight 3] [--thresholds perf-thresholds.toml]

Each folder is the output of one PR check whose head is base plus a change that cannot alter the
kernels (an A/A check: a comment, an empty commit with ``--full``), all on one GPU class. Per time
case it prints how the checks' head/base ratios spread (the standard deviation of their logarithm)
and the limit in units of that spread. A limit under ``--tight`` spreads will see suspects, and
false reds where re-measurement lands the same way; one of many spreads gives away sensitivity: a
slowdown smaller than the limit goes unseen. Both are reasons to give a case its own
``max_slowdown`` (docs/gate.md, "Choosing a limit").

It then replays the gate on them: each check's first readings, re-measured by every other check's
(independent process pairs on the same GPU class), judged with the thresholds' ``near_miss`` and
each case's limit as the check of the newest base commit was judged (a check reads its thresholds
from its base). A red pair is a false red the gate could give.

``--record perf-noise.json`` keeps each case's spread for the GPU class, which the gate reads (``--noise``) to say
per case what a green means: the smallest slowdown its rule catches nine times in ten (``resolution``), and how
often identical code would read red (``red_rate`` of no slowdown).
"""

import argparse
import dataclasses
import json
import math
import re
import statistics
import sys
import tomllib
from pathlib import Path

LIMIT = re.compile(r"\+(\d+(?:\.\d+)?)%")
FIRST = re.compile(r"first measured: (\d+(?:\.\d+)?)x")  # a re-measured finding's reason names its first reading


class NoiseError(Exception):
    """The folders cannot be read as identical-code checks of one GPU class."""


@dataclasses.dataclass(frozen=True)
class CaseNoise:
    benchmark: str
    case: str
    ratios: tuple[float, ...]
    limit: float  # the allowed slowdown, 0.04 for +4%

    @property
    def spread(self) -> float:
        """Standard deviation of log(head/base) over the checks."""
        return statistics.stdev(math.log(r) for r in self.ratios)

    @property
    def limit_in_spreads(self) -> float:
        return math.log1p(self.limit) / self.spread if self.spread > 0 else math.inf


def read_check(folder: Path) -> tuple[str, dict[tuple[str, str], tuple[float, float]], int]:
    """The GPU class, {(benchmark, case): (head/base, limit)} of one check's slowdown findings, each
    as first read (a re-measured finding keeps its first reading in ``first``), and its base commit's
    date (0 where the manifest lacks it)."""
    try:
        manifest = json.loads((folder / "manifest.json").read_text())
        machine, base_date = manifest["machine"], int(manifest.get("dates", {}).get("base", 0))
        findings = json.loads((folder / "gate" / "verdict.json").read_text())["findings"]
    except (OSError, ValueError, KeyError, TypeError) as exc:
        raise NoiseError(f"{folder}: not a PR check's output folder ({exc})") from exc
    ratios = {}
    for f in findings:
        limit = LIMIT.search(f.get("limit") or "")
        if f.get("check") == "slowdown" and f.get("ratio") and limit:
            first = f.get("first") or (float(m[1]) if (m := FIRST.search(f.get("reason", ""))) else f["ratio"])
            ratios[f["benchmark"], f["case"]] = (first, float(limit[1]) / 100)
    if not ratios:
        raise NoiseError(f"{folder}: its verdict judged no slowdown (did the check measure anything?)")
    return machine.get("gpu_class", "?"), ratios, base_date


def read_checks(folders: list[Path]) -> tuple[str, list[dict[tuple[str, str], tuple[float, float]]]]:
    """The GPU class and each check's slowdown readings (``read_check``), the check of the newest base
    commit last: the limits it was judged by are the current ones, and the last check's limits judge."""
    if len(folders) < 2:
        raise NoiseError("a spread needs at least two checks")
    checks = sorted((read_check(folder) for folder in folders), key=lambda check: check[2])
    classes = {gpu for gpu, _, _ in checks}
    if len(classes) > 1:
        raise NoiseError(f"the checks ran on several GPU classes ({', '.join(sorted(classes))}): one at a time")
    return classes.pop(), [ratios for _, ratios, _ in checks]


def case_noise(folders: list[Path]) -> tuple[str, list[CaseNoise]]:
    """The GPU class and the noise of every case that at least two checks measured."""
    gpu, checks = read_checks(folders)
    seen: dict[tuple[str, str], list[tuple[float, float]]] = {}
    for ratios in checks:
        for key, value in ratios.items():
            seen.setdefault(key, []).append(value)
    cases = [
        CaseNoise(benchmark, case, tuple(r for r, _ in values), values[-1][1])
        for (benchmark, case), values in sorted(seen.items())
        if len(values) >= 2
    ]
    return gpu, cases


@dataclasses.dataclass(frozen=True)
class Replay:
    pairs: int  # ordered pairs of checks: the first readings of one, re-measured by the other's
    red: tuple[tuple[int, int, tuple[str, str]], ...]  # (first check, re-measuring check, case) judged red
    remeasured: int  # cases re-measured over all pairs (suspects and near misses)


def replay(folders: list[Path], near_miss: float) -> Replay:
    """The gate's slowdown rule on every ordered pair of checks (``kernelgate/gate/confirm.py``): a case
    first read past its limit less ``near_miss`` is re-measured, and red when the other check's reading
    is past that too and the geometric mean of both is past the limit."""
    _, checks = read_checks(folders)
    limits = {key: limit for ratios in checks for key, (_, limit) in ratios.items()}  # the last check's
    red, remeasured, pairs = [], 0, 0
    for i, first in enumerate(checks):
        for j, again in enumerate(checks):
            if i == j:
                continue
            pairs += 1
            for key, (a, _) in first.items():
                bar = 1 + limits[key] - near_miss
                if a <= bar or key not in again:
                    continue
                remeasured += 1
                b = again[key][0]
                if b > bar and math.sqrt(a * b) > 1 + limits[key]:
                    red.append((i, j, key))
    return Replay(pairs, tuple(red), remeasured)


def _normal_cdf(z: float) -> float:
    return 0.5 * (1 + math.erf(z / math.sqrt(2)))


def red_rate(slowdown: float, spread: float, limit: float, near_miss: float, steps: int = 400) -> float:
    """The chance that the gate's slowdown rule (``replay``) reds a case ``slowdown`` slower (0.03: 3%) whose
    readings spread by ``spread`` (the standard deviation of log head/base between process pairs): the first
    reading past ``limit`` less ``near_miss``, and a fresh one past that too with their geometric mean past
    ``limit``. Both readings are the slowdown plus independent normal noise in log space."""
    if spread <= 0:
        return float(slowdown > limit)
    s, bound, bar = math.log1p(slowdown), math.log1p(limit), math.log1p(limit - near_miss)
    lo, hi = max(bar, s - 8 * spread), s + 8 * spread
    if hi <= lo:
        return 0.0
    width = (hi - lo) / steps
    total = 0.0
    for i in range(steps):  # the first reading x over its density; the fresh one past max(bar, 2 * limit - x)
        x = lo + (i + 0.5) * width
        density = math.exp(-0.5 * ((x - s) / spread) ** 2) / (spread * math.sqrt(2 * math.pi))
        total += density * (1 - _normal_cdf((max(bar, 2 * bound - x) - s) / spread)) * width
    return total


def resolution(spread: float, limit: float, near_miss: float, caught: float = 0.9) -> float:
    """The smallest slowdown the gate reds ``caught`` of the time, for a case of this spread and limit."""
    lo, hi = 0.0, 1.0
    for _ in range(40):
        mid = (lo + hi) / 2
        lo, hi = (lo, mid) if red_rate(mid, spread, limit, near_miss) >= caught else (mid, hi)
    return hi


def record(gpu: str, checks: int, cases: list[CaseNoise], path: Path) -> None:
    """Write each case's spread over ``checks`` identical-code checks into ``path`` for their GPU class (the other
    classes' are kept): {class: {"checks": N, "cases": {benchmark: {case: spread}}}}."""
    table: dict[str, dict] = json.loads(path.read_text()) if path.exists() else {}
    spreads: dict[str, dict[str, float]] = {}
    for c in cases:
        spreads.setdefault(c.benchmark, {})[c.case] = round(c.spread, 6)
    table[gpu] = {"checks": checks, "cases": spreads}
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")


def load_spreads(path: Path, gpu_class: str) -> tuple[int, dict[tuple[str, str], float]]:
    """(checks, {(benchmark, case): spread}) recorded for ``gpu_class`` in ``path`` (``record``); none where the
    class has no entry. Raises NoiseError naming what is malformed."""
    try:
        table = json.loads(path.read_text())
    except (OSError, ValueError) as exc:
        raise NoiseError(f"{path}: unreadable ({exc})") from exc
    entry = table.get(gpu_class) if isinstance(table, dict) else None
    if entry is None:
        return 0, {}
    checks, cases = (entry.get("checks"), entry.get("cases")) if isinstance(entry, dict) else (None, None)
    if not isinstance(checks, int) or checks < 2 or not isinstance(cases, dict):
        raise NoiseError(f"{path}: {gpu_class}: needs checks (at least 2) and cases, as --record writes them")
    spreads = {}
    for benchmark, by_case in cases.items():
        for case, spread in by_case.items() if isinstance(by_case, dict) else [(None, None)]:
            if isinstance(spread, bool) or not isinstance(spread, (int, float)) or not 0 <= spread < 1:
                raise NoiseError(f"{path}: {gpu_class}: {benchmark} {case}: spread {spread!r} is not from 0 to 1")
            spreads[benchmark, case] = float(spread)
    return checks, spreads


def table(gpu: str, checks: int, cases: list[CaseNoise], tight: float, rows: int) -> str:
    ranked = sorted(cases, key=lambda c: c.limit_in_spreads)
    under = [c for c in ranked if c.limit_in_spreads < tight]
    lines = [
        f"{len(cases)} time cases of {checks} identical-code checks on {gpu}: spread of head/base "
        f"(median {statistics.median(c.spread for c in cases) * 100:.2f}%), limits under {tight:g} spreads: "
        f"{len(under)}",
        "",
        "| case | checks | spread | highest | limit | limit in spreads |",
        "|---|---|---|---|---|---|",
    ]
    for c in ranked[: max(rows, len(under))]:
        name = f"{c.benchmark.split('.', 1)[-1]}({c.case})"
        lines.append(
            f"| {name} | {len(c.ratios)} | {c.spread * 100:.2f}% | {max(c.ratios):.3f} | +{c.limit * 100:g}% "
            f"| {c.limit_in_spreads:.1f}{' (tight)' if c.limit_in_spreads < tight else ''} |"
        )
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelgate.gate.noise", description=__doc__,
                                     formatter_class=argparse.RawDescriptionHelpFormatter)  # fmt: skip
    parser.add_argument("checks", type=Path, nargs="+", help="output folders of identical-code PR checks")
    parser.add_argument("--tight", type=float, default=3.0, help="flag limits under this many spreads")
    parser.add_argument("--rows", type=int, default=15, help="rows of the table, the tightest first")
    parser.add_argument("--thresholds", type=Path, default=Path("perf-thresholds.toml"), help="where near_miss is read")
    parser.add_argument("--record", type=Path, metavar="JSON", help="keep each case's spread there (perf-noise.json)")
    args = parser.parse_args(argv)
    try:
        gpu, cases = case_noise(args.checks)
        near_miss = read_near_miss(args.thresholds)
        replayed = replay(args.checks, near_miss)
        if args.record:
            record(gpu, len(args.checks), cases, args.record)
    except NoiseError as exc:
        print(f"error: {exc}", file=sys.stderr)
        return 2
    print(table(gpu, len(args.checks), cases, args.tight, args.rows))
    print()
    red_pairs = len({(i, j) for i, j, _ in replayed.red})
    print(
        f"Judged as the gate judges (near_miss {near_miss:g}), each check's first readings re-measured by each "
        f"other check's: {red_pairs} of {replayed.pairs} pairs red; "
        f"{replayed.remeasured / replayed.pairs:.1f} cases re-measured a check."
    )
    for benchmark, case in sorted({key for _, _, key in replayed.red}):
        times = sum(key == (benchmark, case) for _, _, key in replayed.red)
        print(f"  red: {benchmark.split('.', 1)[-1]}({case}) in {times} pairs")
    return 0


def read_near_miss(path: Path) -> float:
    try:
        defaults = tomllib.loads(path.read_text())["defaults"]
    except (OSError, tomllib.TOMLDecodeError, KeyError) as exc:
        raise NoiseError(f"--thresholds {path}: no [defaults] to read near_miss from ({exc})") from exc
    return float(defaults.get("near_miss", 0.0))


if __name__ == "__main__":
    sys.exit(main())
