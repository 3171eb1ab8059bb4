"""What a commit's kernels compile to for benchmark cases, and how two commits' differ: no GPU needed.

    python -m kernelgate.explain compiled CASE_ID ... [--suites NAME ...] [--gpu-class H200] > commit.json
    python -m kernelgate.explain diff BASE.json HEAD.json
    python -m kernelgate.explain changes --base REF [--head REF] [--gpu-class H200]
    python -m kernelgate.explain profile CASE_ID ...

``compiled`` runs in a commit's own environment and checkout: it builds the Triton launches one call of each case
makes with that commit's launchers (``Suite.launches``, on meta tensors, with the tuned configurations of
``--gpu-class``), compiles them for sm_90 and prints, per asv case id, each kernel's code
(``kernelgate.explain.compiled.KernelCode``) or why there is none; ``--suites`` adds every case of those suites.
``diff`` prints, per case both hold, a "why" line of the largest changes and the table of both commits' kernels.
``changes`` does both for every case of the suites a change from base to head selects, each commit compiled by its
own code (``kernelgate.explain.changes``), and prints what changed. ``profile`` (a GPU and Nsight Compute) prints
what each kernel of one call of each case did on the GPU (``kernelgate.explain.profile``); ``call`` is what it runs
under the profiler.
"""

import argparse
import json
import os
import sys
from pathlib import Path

from kernelgate.explain.cases import compiled, suite_cases
from kernelgate.explain.report import report


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelgate.explain", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    compile_ = commands.add_parser("compiled", help="compile the kernels of asv cases; JSON on stdout")
    compile_.add_argument("cases", nargs="*", metavar="CASE_ID")
    compile_.add_argument("--suites", nargs="+", default=[], metavar="NAME", help="every case of these suites too")
    compile_.add_argument("--gpu-class", help="whose tuned launch configurations (default: the untuned heuristic's)")
    diff = commands.add_parser("diff", help="two commits' compiled kernels, side by side; Markdown on stdout")
    diff.add_argument("base", type=Path)
    diff.add_argument("head", type=Path)
    changed = commands.add_parser("changes", help="what a change does to the compiled kernels of the suites it selects")
    changed.add_argument("--base", required=True, help="base commit or ref")
    changed.add_argument("--head", default="HEAD", help="head commit or ref (default: HEAD)")
    changed.add_argument("--gpu-class", default="H200", help="whose tuned launch configurations (default: %(default)s)")
    changed.add_argument("--work", type=Path, default=Path(".explain"), help="worktrees and environments")
    profile_ = commands.add_parser("profile", help="what each kernel of one call of a case did on the GPU (ncu)")
    profile_.add_argument("cases", nargs="+", metavar="CASE_ID")
    call = commands.add_parser("call", help="one call of a case between the profiler's start and stop")
    call.add_argument("case", metavar="CASE_ID")
    args = parser.parse_args(argv)
    if args.command in ("profile", "call"):
        return profile_command(args)
    if args.command == "compiled":
        print(json.dumps(compiled([*args.cases, *suite_cases(args.suites)], args.gpu_class), indent=1))
        return 0
    if args.command == "changes":
        from kernelgate.explain.changes import explain_change

        text = explain_change(args.base, args.head, args.gpu_class, args.work.resolve())
        print(text)
        summary_file = os.environ.get("GITHUB_STEP_SUMMARY")
        if summary_file:
            with open(summary_file, "a", encoding="utf-8") as fh:
                fh.write(text)
        return 0
    try:
        base, head = (json.loads(path.read_text()) for path in (args.base, args.head))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"kernelgate.explain diff: {exc}") from None
    print(report(base, head))
    return 0


def profile_command(args) -> int:
    from kernelgate.explain import profile

    if args.command == "call":
        profile.call(args.case)
        return 0
    tool = profile.ncu()
    if tool is None:
        raise SystemExit(f"kernelgate.explain profile: no ncu (on PATH, ${profile.NCU_ENV} or {profile.CUDA_NCU})")
    for case_id in args.cases:
        kernels = profile.profile_case(tool, sys.executable, case_id, timeout=600)
        print(f"**`{case_id}`**\n")
        print(kernels if isinstance(kernels, str) else profile.table(kernels, kernels), "\n", flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
