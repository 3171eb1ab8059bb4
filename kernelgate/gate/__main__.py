"""``python -m kernelgate.gate``: the pull request's performance verdict (see harness/gate/__init__.py)."""

import argparse
import dataclasses
import os
import re
import sys
from pathlib import Path

from kernelgate.gate import GateError, junit
from kernelgate.gate.asv_results import Run, check_same_machine, load_run
from kernelgate.gate.checks import evaluate
from kernelgate.gate.confirm import DEFAULT_CONFIRM_CMD, confirmed, remeasure
from kernelgate.gate.findings import Finding, Outcome
from kernelgate.gate.report import markdown, plot_ratios, write_json
from kernelgate.gate.thresholds import load_thresholds


def parse_args(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kernelgate.gate", description=__doc__)
    parser.add_argument("--base", required=True, type=_commit, help="base commit hash (8 to 40 hex digits)")
    parser.add_argument("--head", required=True, type=_commit, help="head commit hash (8 to 40 hex digits)")
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
    parser.add_argument("--results-dir", type=Path, default=Path(".asv/results"), help="asv's results_dir")
    parser.add_argument("--thresholds", type=Path, default=Path("perf-thresholds.toml"))
    parser.add_argument(
        "--out", type=Path, default=Path("gate-report"), help="folder for report.md, verdict.json, ratios.png"
    )
    confirm = parser.add_mutually_exclusive_group()
    confirm.add_argument(
        "--confirm-cmd",
        default=DEFAULT_CONFIRM_CMD,
        help="command re-measuring suspects, run once per commit; placeholders {machine} {commit} {regex} "
        f"(default: {DEFAULT_CONFIRM_CMD!r})",
    )
    confirm.add_argument("--no-confirm", action="store_true", help="fail on suspects without re-measuring them")
    return parser.parse_args(argv)


def _commit(value: str) -> str:
    if not re.fullmatch(r"[0-9a-f]{8,40}", value):
        raise argparse.ArgumentTypeError(f"{value!r} is not a commit hash (8 to 40 lowercase hex digits)")
    return value


def judge(args: argparse.Namespace) -> Outcome:
    correctness = junit.correctness(args.junit)
    outcome = Outcome(args.machine, args.base, args.head, findings=tuple(correctness))
    try:
        thresholds = load_thresholds(args.thresholds)
        base, head = _load(args)

        def rerun(suspects: list[Finding]) -> list[Finding]:
            remeasure(args.confirm_cmd, args.machine, {"base": base.commit, "head": head.commit}, suspects)
            return evaluate(thresholds, *_load(args), selection=bool(args.bench))

        findings = correctness + evaluate(thresholds, base, head, selection=bool(args.bench))
        if not args.no_confirm:
            findings = confirmed(findings, rerun)
    except GateError as exc:
        return dataclasses.replace(outcome, error=str(exc))
    return Outcome(args.machine, base.commit, head.commit, tuple(findings), gpu=str(head.machine["gpu"]))


def _load(args: argparse.Namespace) -> tuple[Run, Run]:
    base = load_run(args.results_dir, args.machine, args.base, "base")
    head = load_run(args.results_dir, args.machine, args.head, "head")
    check_same_machine(base, head)
    if args.bench:
        base, head = base.selected(args.bench), head.selected(args.bench)
        if not head.measurements:
            raise GateError(f"--bench {args.bench} selects no benchmark case of the head results")
    return base, head


def main(argv: list[str] | None = None) -> int:
    args = parse_args(argv)
    outcome = judge(args)
    text = markdown(outcome)
    print(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(text)
    args.out.mkdir(parents=True, exist_ok=True)
    (args.out / "report.md").write_text(text)
    write_json(outcome, args.out / "verdict.json")
    plot_ratios(outcome, args.out / "ratios.png")
    return outcome.exit_code


if __name__ == "__main__":
    sys.exit(main())
