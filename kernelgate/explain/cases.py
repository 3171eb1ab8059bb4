"""The cases of a commit's suites as their kernels compile: the Triton launches one call of a case makes
(``Suite.launches``, built by the commit's own launchers on meta tensors), compiled for sm_90
(``kernelgate.explain.compiled``). Run in the commit's own environment and checkout."""

import ast
import dataclasses
import itertools
import re

CASE_ID = re.compile(r"^bench_(?P<suite>\w+)\.(?P<grid>\w+)\.\w+\((?P<values>.*)\)$")


def same_call(case_ids: list[str]) -> dict[str, list[str]]:
    """The ids grouped by the call their cases make (a kernel's time case and its metrics cases run one workload:
    the suite and parameter values, whatever the grid or benchmark): {the first id of each: the others}."""
    calls: dict[str, list[str]] = {}
    for case_id in case_ids:
        found = CASE_ID.match(case_id)
        calls.setdefault((found["suite"], found["values"]) if found else case_id, []).append(case_id)
    return {first: rest for first, *rest in calls.values()}


def case_values(case_id: str):
    """(the suite, the case's parameter values) of an asv case id; raises ValueError naming what is wrong."""
    from kernelgate.cases import SUITES

    found = CASE_ID.match(case_id)
    if found is None:
        raise ValueError(f"{case_id!r} is not an asv case id, bench_<suite>.<Class>.<method>('value', ...)")
    suite = next((s for s in SUITES if s.name == found["suite"]), None)
    if suite is None:
        raise ValueError(f"no suite {found['suite']!r}")
    values = ast.literal_eval(f"({found['values']},)")
    if not values or not all(isinstance(v, str) for v in values):
        raise ValueError(f"{case_id!r}: its parameters are not strings")
    return suite, values


def case_launches(case_id: str, gpu: str | None) -> list:
    """The launches one call of an asv case makes (``Suite.launches``); raises ValueError naming why there are none."""
    suite, values = case_values(case_id)
    if suite.launches is None:
        raise ValueError(f"the {suite.name} suite's kernels are not compiled for comparison (Suite.launches)")
    *leading, impl = values
    return suite.launches(*leading, impl, gpu)


def suite_cases(names: list[str]) -> list[str]:
    """The asv ids of every time case of the named suites' grids, this project's variants only; a name this commit
    has no suite of (a kernel the other commit adds) gives none."""
    from kernelgate.cases import SUITES

    return [
        f"bench_{suite.name}.{grid.name}.{grid.time_method}({', '.join(repr(v) for v in (*leading, variant))})"
        for suite in SUITES
        if suite.name in names
        for grid in suite.grids
        for leading in itertools.product(*grid.params.values())
        for variant in grid.variants
    ]


def compiled(case_ids: list[str], gpu: str | None) -> dict[str, list[dict] | dict]:
    """{case id: [each kernel's code, as a dict], or {"error": why there is none}}. A launch several cases share
    (the same kernel, constants, warps and argument types) is compiled once."""
    from kernelgate.explain.compiled import argument_types, kernel_code

    codes, seen = {}, {}
    for case_id in case_ids:
        try:
            kernels = []
            for launch in case_launches(case_id, gpu):
                signature, attrs = argument_types(launch)
                fn = launch.kernel.fn
                key = repr((fn.__module__, fn.__qualname__, sorted(launch.constexprs.items()), launch.num_warps,
                            launch.pdl, sorted(signature.items()), sorted(attrs)))  # fmt: skip
                if key not in seen:
                    seen[key] = dataclasses.asdict(kernel_code(launch))
                kernels.append(seen[key])
            codes[case_id] = kernels
        except Exception as err:  # said in the report; never fatal: the verdict stands without it
            codes[case_id] = {"error": f"{type(err).__name__}: {str(err).strip().splitlines()[0] if str(err) else ''}"}
    return codes
