"""``python -m kernelgate.gate``: the pull request's performance verdict (see kernelgate/gate/__init__.py)."""

import argparse
import dataclasses
import json
import re
import sys
import traceback
from pathlib import Path

from kernelgate.gate import GateError, junit
from kernelgate.gate.asv_results import Run, load_runs
from kernelgate.gate.checks import evaluate
from kernelgate.gate.confirm import DEFAULT_CONFIRM_CMD, confirmed, remeasure, runs_once
from kernelgate.gate.findings import Finding, Outcome
from kernelgate.gate.noise import NoiseError, load_spreads
from kernelgate.gate.report import publish
from kernelgate.gate.thresholds import Thresholds, load_thresholds, with_head_rules


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kernelgate.gate", description=__doc__)
    parser.add_argument("--base", required=True, help="base commit hash (8 to 40 hex digits)")
    parser.add_argument("--head", required=True, help="head commit hash (8 to 40 hex digits)")
    parser.add_argument("--machine", required=True, help="the asv machine both commits were measured on")
    parser.add_argument(
        "--junit", action="append", type=Path, default=[], help="pytest JUnit XML of this machine's tests (repeatable)"
    )
    parser.add_argument(
        "--bench",
        action="append",
        default=[],
        metavar="REGEX",
        help="judge only the cases asv's --bench would select (repeatable), e.g. after a subset run",
    )
    parser.add_argument(
        "--cases",
        type=Path,
        metavar="JSON",
        help="judge only these asv case ids (a JSON list), e.g. what one PR check measured; adds to --bench",
    )
    parser.add_argument("--results-dir", type=Path, default=Path(".asv/results"), help="asv's results_dir")
    parser.add_argument(
        "--failures",
        type=Path,
        metavar="JSON",
        help='why cases failed, {"base": {case id: reason}, "head": {...}} (the PR check writes it): the report '
        "names each failed case's reason (asv's result files keep no error)",
    )
    parser.add_argument(
        "--base-suite",
        type=Path,
        help="benchmarks.json written from base's own checkout (the results dir's describes head's suite): "
        "its cases that head's suite lacks were removed by the pull request",
    )
    parser.add_argument(
        "--thresholds", type=Path, default=Path("perf-thresholds.toml"), help="base's perf-thresholds.toml"
    )
    parser.add_argument(
        "--head-thresholds",
        type=Path,
        help="head's perf-thresholds.toml: its rules that base's lacks are judged too, and on cases base has "
        "only their min, max and not_slower_than (they can only tighten); its [defaults] are not used",
    )
    parser.add_argument(
        "--noise",
        type=Path,
        help="base's perf-noise.json: each time case's spread over identical-code checks per GPU class "
        "(python -m kernelgate.gate.noise --record), from which the report says what each slowdown check can see",
    )
    parser.add_argument(
        "--out", type=Path, default=Path("gate-report"), help="folder for report.md, verdict.json, ratios.png"
    )
    confirm = parser.add_mutually_exclusive_group()
    confirm.add_argument(
        "--confirm-cmd",
        default=DEFAULT_CONFIRM_CMD,
        help="command re-measuring suspects; placeholders {machine} {regex} and either {commit} (run once per "
        f"commit) or {{base}} {{head}} (run once for both) (default: {DEFAULT_CONFIRM_CMD!r})",
    )
    confirm.add_argument("--no-confirm", action="store_true", help="fail on suspects without re-measuring them")
    return parser.parse_args(argv)


def _check_args(args: argparse.Namespace) -> None:
    """Argument values that cannot be judged, checked here so that they too leave a red report behind."""
    for option in ("base", "head"):
        value = getattr(args, option)
        if not re.fullmatch(r"[0-9a-f]{8,40}", value):
            raise GateError(f"--{option} {value!r} is not a commit hash (8 to 40 lowercase hex digits)")
    if args.base.startswith(args.head) or args.head.startswith(args.base):
        raise GateError(f"base and head are the same commit ({args.head}): nothing would be compared")
    args.case_ids = frozenset(_case_ids(args.cases)) if args.cases is not None else frozenset()
    args.reasons = _failures(args.failures)
    for pattern in args.bench:
        try:
            re.compile(pattern)
        except re.error as exc:
            raise GateError(f"--bench {pattern!r} is not a regular expression: {exc}") from exc
    if not args.no_confirm:
        runs_once(args.confirm_cmd)


def _case_ids(path: Path) -> list[str]:
    try:
        ids = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GateError(f"--cases {path}: unreadable ({exc})") from exc
    if not isinstance(ids, list) or not ids or not all(isinstance(i, str) for i in ids):
        raise GateError(f"--cases {path}: expected a non-empty JSON list of asv case ids")
    return ids


def _failures(path: Path | None) -> dict[str, dict[str, str]]:
    if path is None:
        return {}
    try:
        reasons = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        raise GateError(f"--failures {path}: unreadable ({exc})") from exc
    if not isinstance(reasons, dict) or not all(
        isinstance(by_case, dict) and all(isinstance(k, str) and isinstance(v, str) for k, v in by_case.items())
        for by_case in reasons.values()
    ):
        raise GateError(f'--failures {path}: expected {{"base": {{case id: reason}}, "head": {{...}}}}')
    return reasons


def _selection(args: argparse.Namespace) -> bool:
    """Whether only part of the suite is judged (--bench, --cases)."""
    return bool(args.bench or args.case_ids)


def judge(args: argparse.Namespace) -> Outcome:
    correctness = junit.correctness(args.junit)
    outcome = Outcome(args.machine, args.base, args.head, findings=tuple(correctness))
    try:
        _check_args(args)
        thresholds = _thresholds(args)
        base, head = _load(args)
        checks, spreads = _spreads(args.noise, str(head.machine["gpu_class"]))

        def rerun(suspects: list[Finding]) -> list[Finding]:
            remeasure(args.confirm_cmd, args.machine, {"base": base.commit, "head": head.commit}, suspects)
            return evaluate(thresholds, *_load(args), selection=_selection(args), spreads=spreads)

        findings = correctness + evaluate(thresholds, base, head, selection=_selection(args), spreads=spreads)
        if not args.no_confirm:
            findings = confirmed(findings, rerun)
    except GateError as exc:
        return dataclasses.replace(outcome, error=str(exc))
    added = tuple(f"{rule.label}: {rule.why}" for rule in thresholds.rules if rule.from_head)
    return Outcome(
        args.machine, base.commit, head.commit, tuple(findings), gpu=str(head.machine["gpu"]), head_rules=added,
        gpu_class=str(head.machine["gpu_class"]), noise_checks=checks,
    )  # fmt: skip


def _spreads(path: Path | None, gpu_class: str) -> tuple[int, dict[tuple[str, str], float]]:
    if path is None:
        return 0, {}
    try:
        return load_spreads(path, gpu_class)
    except NoiseError as exc:
        raise GateError(f"--noise {exc}") from exc


def _thresholds(args: argparse.Namespace) -> Thresholds:
    thresholds = load_thresholds(args.thresholds)
    return thresholds if args.head_thresholds is None else with_head_rules(thresholds, args.head_thresholds)


def _load(args: argparse.Namespace) -> tuple[Run, Run]:
    base, head = load_runs(args.results_dir, args.machine, args.base, args.head, args.base_suite)
    base, head = base.with_errors(args.reasons.get("base", {})), head.with_errors(args.reasons.get("head", {}))
    if _selection(args):
        base, head = base.selected(args.bench, args.case_ids), head.selected(args.bench, args.case_ids)
        if not head.measurements:
            chosen = f"--cases {args.cases}" if args.cases else f"--bench {args.bench}"
            raise GateError(f"{chosen} selects no benchmark case of the head results")
    return base, head


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    try:
        outcome = judge(args)
        publish(outcome, args.out)
    except Exception as exc:  # a bug or an unforeseen input still leaves a red verdict, never none
        traceback.print_exc()
        outcome = Outcome(args.machine, args.base, args.head, error=f"internal error: {type(exc).__name__}: {exc}")
        publish(outcome, args.out)
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
