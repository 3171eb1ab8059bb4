"""What a commit's kernels compile to for benchmark cases, and how two commits' differ: no GPU needed.

    python -m kernelgate.explain compiled CASE_ID ... [--gpu-class H200] > commit.json
    python -m kernelgate.explain diff BASE.json HEAD.json

``compiled`` runs in a commit's own environment and checkout: it builds the Triton launches one call of each case
makes with that commit's launchers (``Suite.launches``, on meta tensors, with the tuned configurations of
``--gpu-class``), compiles them for sm_90 and prints, per asv case id, each kernel's code
(``kernelgate.explain.compiled.KernelCode``) or why there is none. ``diff`` prints, per case both hold, a "why"
line of the largest changes and the table of both commits' kernels (``kernelgate.explain.diff``).
"""

import argparse
import ast
import dataclasses
import json
import re
import sys
from pathlib import Path

from kernelgate.explain.diff import table, why

CASE_ID = re.compile(r"^bench_(?P<suite>\w+)\.(?P<grid>\w+)\.\w+\((?P<values>.*)\)$")


def case_launches(case_id: str, gpu: str | None) -> list:
    """The launches one call of an asv case makes (``Suite.launches``); raises ValueError naming why there are none."""
    from kernelgate.cases import SUITES

    found = CASE_ID.match(case_id)
    if found is None:
        raise ValueError(f"{case_id!r} is not an asv case id, bench_<suite>.<Class>.<method>('value', ...)")
    suite = next((s for s in SUITES if s.name == found["suite"]), None)
    if suite is None:
        raise ValueError(f"no suite {found['suite']!r}")
    if suite.launches is None:
        raise ValueError(f"the {suite.name} suite's kernels are not compiled for comparison (Suite.launches)")
    values = ast.literal_eval(f"({found['values']},)")
    if not values or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{case_id!r}: its parameters are not strings")
    *leading, impl = values
    return suite.launches(*leading, impl, gpu)


def compiled(case_ids: list[str], gpu: str | None) -> dict[str, list[dict] | dict]:
    """{case id: [each kernel's code, as a dict], or {"error": why there is none}}."""
    from kernelgate.explain.compiled import kernel_code

    codes = {}
    for case_id in case_ids:
        try:
            codes[case_id] = [dataclasses.asdict(kernel_code(launch)) for launch in case_launches(case_id, gpu)]
        except Exception as err:  # said in the report; never fatal: the verdict stands without it
            codes[case_id] = {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"}
    return codes


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


def report(base: dict, head: dict, case_ids: list[str] | None = None) -> str:
    """Markdown: per case, the "why" line and the table of base's and head's kernels."""
    lines = []
    for case_id in case_ids or sorted(set(base) & set(head)):
        b, h = base.get(case_id), head.get(case_id)
        lines += [f"**`{_said(case_id)}`**", ""]
        failed = [f"{role}: {_said(e.get('error'))}" for role, e in (("base", b), ("head", h)) if isinstance(e, dict)]
        try:
            kernels = None if b is None or h is None or failed else (_kernels(b), _kernels(h))
        except (TypeError, ValueError) as exc:
            kernels, failed = None, [f"not a list of compiled kernels ({_said(exc)})"]
        if kernels is None:
            lines += ["- compiled code not compared: " + ("; ".join(failed) or "a commit did not compile it"), ""]
            continue
        lines += [f"- why: {why(*kernels)}", "", table(*kernels), ""]
    return "\n".join(lines)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m kernelgate.explain", description=__doc__.split("\n")[0])
    commands = parser.add_subparsers(dest="command", required=True)
    compile_ = commands.add_parser("compiled", help="compile the kernels of asv cases; JSON on stdout")
    compile_.add_argument("cases", nargs="+", metavar="CASE_ID")
    compile_.add_argument("--gpu-class", help="whose tuned launch configurations (default: the untuned heuristic's)")
    diff = commands.add_parser("diff", help="two commits' compiled kernels, side by side; Markdown on stdout")
    diff.add_argument("base", type=Path)
    diff.add_argument("head", type=Path)
    args = parser.parse_args(argv)
    if args.command == "compiled":
        print(json.dumps(compiled(args.cases, args.gpu_class), indent=1))
        return 0
    try:
        base, head = (json.loads(path.read_text()) for path in (args.base, args.head))
    except (OSError, ValueError) as exc:
        raise SystemExit(f"kernelgate.explain diff: {exc}") from None
    print(report(base, head))
    return 0


if __name__ == "__main__":
    sys.exit(main())
