"""``python -m kernelgate.prcheck`` (``nox -s pr-check``): the pull request's GPU status check.

    python -m kernelgate.prcheck --base REF --head REF [--full REASON] [--shard K/N] [--out DIR]
    python -m kernelgate.prcheck merge --base SHA --head SHA --shards N [--full REASON] --out DIR SHARDS_DIR
    python -m kernelgate.prcheck remeasure --out DIR --base SHA --head SHA --regex REGEX   (the gate's re-measurement)
    python -m kernelgate.prcheck select --base REF --head REF [--full REASON] [--out DIR]   (no GPU: what would run)

Exit code: 0 passed, 1 failed, 2 could not evaluate. The report is written in every case:
``<out>/report.md`` (also appended to ``$GITHUB_STEP_SUMMARY``) and ``<out>/gate/verdict.json``.
"""

import argparse
import contextlib
import json
import os
import re
import shutil
import subprocess
import sys
import traceback
from pathlib import Path

from kernelgate import cli
from kernelgate.measure import references, workers
from kernelgate.measure.steps import Steps
from kernelgate.prcheck import check, isolation, selection
from kernelgate.prcheck.check import CheckError, Plan

DEFAULT_WORK = Path(".pr-check")


def parse_args(argv: list[str]) -> argparse.Namespace:
    command = argv[0] if argv and argv[0] in ("merge", "remeasure", "select") else "run"
    rest = argv[1:] if command != "run" else argv
    parser = argparse.ArgumentParser(prog=f"python -m kernelgate.prcheck {command if command != 'run' else ''}".strip())
    parser.add_argument("--out", type=Path, default=DEFAULT_WORK / "out", help="the run's output folder")
    if command in ("run", "select", "merge"):
        parser.add_argument("--base", required=True, help="base commit or ref")
        parser.add_argument("--head", required=True, help="head commit or ref")
        parser.add_argument("--full", metavar="REASON", help="run every group (e.g. a label or main's history)")
    if command == "run":
        parser.add_argument("--shard", type=cli.shard, default=(1, 1), metavar="K/N", help="this runner's share")
        parser.add_argument(
            "--bench", type=cli.regex, metavar="REGEX", help="only the selected benchmark cases this also matches"
        )
        parser.add_argument(
            "--skip-tests", action="store_true", help="calibration runs: no GPU tests, so the verdict cannot pass"
        )
        parser.add_argument("--work", type=Path, default=DEFAULT_WORK, help="worktrees and environments")
        cache = Path(os.environ.get("KERNELGATE_CACHE", DEFAULT_WORK / "cache"))
        parser.add_argument(
            "--cache", type=Path, default=cache, help="JIT caches, a folder per role ($KERNELGATE_CACHE)"
        )
        parser.add_argument(
            "--references", type=Path, default=references.store(),
            help="the references' stored times, which main's runs record ($KERNELGATE_REFERENCES, else %(default)s)",
        )  # fmt: skip
        runner = os.environ.get("KERNELGATE_RUNNER_PYTHON", sys.executable)
        parser.add_argument("--runner-python", default=runner, help="the provisioned runner environment's Python")
        parser.add_argument(
            "--head-user",
            default=os.environ.get(isolation.HEAD_USER_ENV) or None,
            help=f"run head's code as this unprivileged user; the check then runs as root (${isolation.HEAD_USER_ENV})",
        )
    elif command == "merge":
        parser.add_argument("--shards", type=int, required=True, metavar="N", help="how many shards the run had")
        parser.add_argument("folder", type=Path, help="the folder holding each shard's output as shard-K")
    elif command == "remeasure":
        parser.add_argument("--base", required=True)
        parser.add_argument("--head", required=True)
        parser.add_argument("--regex", type=cli.regex, required=True, help="the case ids to measure again")
        parser.add_argument(
            "--recorded", action="store_true", help="take the shards' own re-measurements (the merge; no GPU)"
        )
    args = parser.parse_args(rest)
    args.command = command
    for name in ("out", "work", "cache", "references"):  # the steps run in other folders (each commit's checkout)
        if hasattr(args, name):
            setattr(args, name, getattr(args, name).resolve())
    return args


def fenced(text: str, language: str) -> list[str]:
    """``text`` as a Markdown code block whose fence is longer than any run of backticks in it: text from
    the pull request cannot close the block and write into the report around it."""
    fence = "`" * max(3, 1 + max(map(len, re.findall(r"`+", text)), default=0))
    return [f"{fence}{language}", text, fence]


def references_lines(plan: Plan) -> list[str]:
    """Which of head's metrics cases were read against the references' times stored for its environment."""
    found = {name: f for name, f in plan.references.items() if f["stored"]}
    if not plan.references:
        return []
    if not found:
        return ["Head's metrics were timed beside their references: none are stored for this environment.", ""]
    told = [f"{name} {f['stored']} of {f['cases']} (timed by main at `{f['commit'][:12]}`)"
            for name, f in found.items()]  # fmt: skip
    return [f"Head's metrics read against the references' times stored for this environment: {', '.join(told)}; "
            "the rest, and every floor or ceiling passed narrowly, timed beside their references.", ""]  # fmt: skip


def report(out: Path, plan: Plan | None, steps: Steps, error: str | None, code: int, earlier: list) -> str:
    verdict = {0: "✅ passed", 1: "❌ FAILED"}.get(code, "❌ could not evaluate")
    lines = [f"# PR check {verdict}", ""]
    if plan is not None and not plan.machine:  # the selection alone (``select``)
        lines += [f"base `{plan.base[:12]}` → head `{plan.head[:12]}`: the selection, without a GPU", ""]
    elif plan is not None:
        gpu = plan.machine.get("gpu", "?")
        versions = ", ".join(
            f"{k} {plan.machine.get(k, '?')}" for k in ("gpu_driver", "cuda", "torch", "triton", "tilelang")
        )
        lines += [
            f"base `{plan.base[:12]}` → head `{plan.head[:12]}` on `{plan.machine['machine']}` ({gpu}; {versions})",
            "",
        ]
    if plan is not None:
        k, n = plan.shard
        if k == 0:
            lines += [f"The verdict on all {n} shards, merged.", ""]
        elif n > 1:
            lines += [f"Shard {k} of {n}: its cases only; the merged verdict judges them all.", ""]
        lines += ["## What ran, and why", ""]
        lines += [
            f"- **{g}**: {', '.join(plan.reasons[g][:8])}{' …' if len(plan.reasons[g]) > 8 else ''}"
            for g in plan.groups
        ]
        if not plan.groups:
            lines.append("- nothing: no changed path selects a group (pr-check.toml)")
        lines += ["", *references_lines(plan)]
        if plan.judging_changes:  # base's files judge; of head's changes, only added work and floors apply now
            lines += ["## Changes to the gate's files", "",
                      *fenced(plan.judging_changes.rstrip("\n"), "diff"), "",
                      "The base commit's files judge. What this change adds to them, groups and their tests and "
                      "benchmarks, and floors, applies now: it can only tighten the check. The rest takes effect "
                      "once merged.", ""]  # fmt: skip
    if error:
        lines += ["## Error", "", f"**{error}**", "", "The check fails closed.", ""]
    gate_report = out / "gate" / "report.md"
    if gate_report.is_file():
        lines += [gate_report.read_text()]
    explained = out / check.EXPLAIN
    if explained.is_file():
        lines += ["## What changed in the kernels", "",
                  "The worst failing calls: each commit's kernels compiled for sm_90 with its own launchers, and one "
                  "call profiled on the GPU with Nsight Compute (`python -m kernelgate.explain`):", "",
                  explained.read_text(), ""]  # fmt: skip
    lines += ["## Steps", "", steps.table(earlier), ""]
    text = "\n".join(lines)
    (out / "report.md").write_text(text)
    summary = os.environ.get("GITHUB_STEP_SUMMARY")
    if summary:
        with open(summary, "a", encoding="utf-8") as fh:
            fh.write(text)
    return text


def finish(out: Path, plan: Plan | None, steps: Steps, error: str | None, code: int) -> int:
    earlier = plan.steps if plan is not None and plan.shard[0] == 0 else []  # a merge: the shards' steps
    if plan is not None:
        plan.steps = [*earlier, *steps.times]
        plan.save(out)
    if not (out / "gate" / "verdict.json").is_file():  # the gate did not run: nothing selected, or an error
        (out / "gate").mkdir(parents=True, exist_ok=True)
        verdict = {"passed": code == 0, "exit_code": code, "error": error, "findings": []}
        (out / "gate" / "verdict.json").write_text(json.dumps(verdict, indent=2))
    print("\n" + report(out, plan, steps, error, code, earlier), flush=True)
    print(f"report: {out / 'report.md'}", flush=True)
    return code


def run(args: argparse.Namespace) -> int:
    out = args.out
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    steps, plan, scratch = Steps(), None, None
    try:
        scratch = isolation.scratch(args.head_user)
        plan = check.prepare(args, steps, scratch)
        if not plan.groups:
            return finish(out, plan, steps, None, 0)
        with contextlib.nullcontext() if args.skip_tests else check.tests_beside(plan, out, steps):
            cases = check.choose(plan, out, steps)
            stored = check.stored_references(plan, out, cases["head"], args.references)
            check.warm_up(plan, steps, cases, stored)
        records = check.measure(plan, steps, cases, stored)
        (out / check.MEASUREMENTS).write_text(json.dumps(records))
        check.write_results(plan, out, records)
        plan.save(out)  # the gate's re-measurement reads it
        code = check.gate(plan, out, check.junit_files(out), steps)
        if code == 1:
            check.explain(plan, out, steps)
    except (CheckError, workers.WorkerError, selection.SelectionError, isolation.IsolationError, OSError,
            subprocess.SubprocessError) as exc:  # fmt: skip
        return finish(out, plan, steps, f"{type(exc).__name__}: {exc}", 2)
    except Exception as exc:  # a bug or an unforeseen input still leaves a red report, never none
        traceback.print_exc()
        return finish(out, plan, steps, f"internal error: {type(exc).__name__}: {exc}", 2)
    finally:  # head's tree, environment and caches: fresh for every run
        if scratch is not None:
            check.drop_scratch(scratch)
    return finish(out, plan, steps, None, code)


def remeasure(args: argparse.Namespace) -> int:
    """Measure the cases matching ``--regex`` again, interleaved, and judge them on that reading (the gate's
    confirm command). Each case's first reading stays in measurements.json, the latest in remeasured.json.
    With ``--recorded`` (merging shards), the readings are those the shards' gates re-measured."""
    plan = Plan.load(args.out)
    if (plan.base, plan.head) != (args.base, args.head):
        raise SystemExit(
            f"{args.out} measured {plan.base[:12]}..{plan.head[:12]}, not {args.base[:12]}..{args.head[:12]}"
        )
    first, fresh = json.loads((args.out / check.MEASUREMENTS).read_text()), check.remeasured(args.out)
    again = {}
    for role, suite in check.read_suites(args.out).items():
        again[role] = [
            c for c in workers.measured_cases(suite) if c.asv_id in plan.cases[role] and re.search(args.regex, c.asv_id)
        ]
    if args.recorded:
        missing = [f"{role} {c.asv_id}" for role, cases in again.items() for c in cases if c.asv_id not in fresh[role]]
        if missing:
            raise SystemExit(f"no shard re-measured {len(missing)} of the cases to judge again, e.g. {missing[0]}")
        chosen = {role: {c.asv_id: fresh[role][c.asv_id] for c in cases} for role, cases in again.items()}
    else:
        print(f"re-measuring {len(again['base'])} base and {len(again['head'])} head cases", flush=True)
        chosen = workers.measure([plan.side("base"), plan.side("head")], again)
        for role in fresh:
            fresh[role].update(chosen[role])
        (args.out / check.REMEASURED).write_text(json.dumps(fresh))
        chosen = fresh
    check.write_results(plan, args.out, {role: {**first[role], **chosen[role]} for role in first})
    return 0


def select(args: argparse.Namespace) -> int:
    """The selection step alone, with no GPU: ``selection.json`` says which groups the change selects,
    and why. A change that selects none has its verdict here (passed): no GPU runner need start."""
    out, steps, plan = args.out, Steps(), None
    shutil.rmtree(out, ignore_errors=True)
    out.mkdir(parents=True)
    try:
        with steps("select"):
            plan = check.selected_plan(*check.commits(args.base, args.head), out, args.full)
    except (CheckError, selection.SelectionError, OSError, subprocess.SubprocessError) as exc:
        return finish(out, plan, steps, f"{type(exc).__name__}: {exc}", 2)
    (out / "selection.json").write_text(json.dumps({"base": plan.base, "head": plan.head, "groups": plan.groups}))
    if plan.groups:  # the GPU check runs them and gives the verdict
        plan.save(out)
        return 0
    return finish(out, plan, steps, None, 0)


def merge(args: argparse.Namespace) -> int:
    """One verdict from the shards' folders, judged by what this process selects and reads from git itself:
    a missing or failed shard, or one whose manifest disagrees with that selection, is red."""
    out, steps, plan = args.out, Steps(), None
    folder = args.folder.resolve()
    if out == folder or out in folder.parents or folder in out.parents:
        raise SystemExit(f"--out {out} and the shards' folder {folder} overlap: merge into another")
    shutil.rmtree(out, ignore_errors=True)  # no verdict of an earlier merge may stand for this one
    out.mkdir(parents=True)
    try:
        with steps("merge shards"):
            expected = check.selected_plan(*check.commits(args.base, args.head), out, args.full)
            plan = check.merge_shards(folder, args.shards, expected, out)
        if not plan.groups:
            return finish(out, plan, steps, None, 0)
        code = check.gate(plan, out, check.junit_files(out), steps, recorded=True)
    except (CheckError, selection.SelectionError, OSError, ValueError) as exc:
        return finish(out, plan, steps, f"{type(exc).__name__}: {exc}", 2)
    except Exception as exc:  # a bug or an unforeseen input still leaves a red report, never none
        traceback.print_exc()
        return finish(out, plan, steps, f"internal error: {type(exc).__name__}: {exc}", 2)
    return finish(out, plan, steps, None, code)


def main(argv: list[str] | None = None) -> int:
    args = parse_args(sys.argv[1:] if argv is None else argv)
    return {"run": run, "merge": merge, "remeasure": remeasure, "select": select}[args.command](args)


if __name__ == "__main__":
    sys.exit(main())
