"""Fill the on-disk JIT caches (Triton, Inductor, TileLang) for every benchmark
workload, in parallel processes, before the benchmarks run.

The benchmark processes then load compiled code instead of compiling it, one case
after another (torch.compile of a kernel's references alone takes many minutes
serially). Nothing is timed here, and a benchmark's own setup still calls its
workload once before sampling. A workload is a time case's (``Suite.workload``): each
grid's variants, and its references that compile (``Suite.jit_references``).

``python -m kernelgate.measure.warm [--jobs N] [--groups NAME ...] [--without-references]``
(``nox -s bench`` and the PR check run it on a GPU; ``--groups`` names pr-check.toml's groups, the suites'
names, default all; ``--without-references`` warms this project's kernels alone, all that the PR check times
on base). With ``KERNELGATE_WARM_CASES`` set, only the workloads of those benchmark cases are warmed: a PR
check shard warms its own share.
"""

import argparse
import itertools
import json
import os
import time

import torch

from kernelgate import cli
from kernelgate.asv_case import Case
from kernelgate.cases import SUITES, named, suite_of
from kernelgate.measure.parallel import default_jobs, in_worker_processes

GROUPS = tuple(suite.name for suite in SUITES)
# A JSON file of [benchmark, parameter values] pairs, one per asv case: warm only what they run. Set by the
# PR check (kernelgate.prcheck.check) and the main job for their share of the cases; unset, every workload
# of the groups is warmed.
WARM_CASES_ENV = "KERNELGATE_WARM_CASES"


def for_cases(todo: list[tuple], cases: list[tuple[str, list]]) -> list[tuple]:
    """The items of ``todo`` that ``cases`` run. An item is (suite, *parameters, implementation), as a time
    case's parameters are; a track case measures its leading parameters' variants and the references its
    metric reads (``Metric.references``; all of them where it does not say)."""
    timed, measured = set(), {}
    for benchmark, values in cases:
        suite = suite_of(benchmark)
        if suite is not None and Case(benchmark).kind == "time":
            timed.add((suite.name, *values))
        elif suite is not None:
            key = (suite.name, *values[:-1])
            read = _references_read(suite, benchmark)
            known = measured.get(key, set())
            measured[key] = None if read is None or known is None else known | read
    return [item for item in todo if item in timed or _measured(measured, item)]


def _references_read(suite, benchmark: str) -> set[str] | None:
    """The references a track benchmark's metric reads; None: every one (or a metric this code does not know)."""
    owner, method = benchmark.rsplit(".", 2)[1:]
    grids = {grid.name: grid for grid in suite.grids}
    grid = grids.get(owner.removesuffix("Metrics"))
    metric = next((m for m in grid.metrics if f"track_{m.name}" == method), None) if grid else None
    return None if metric is None or metric.references is None else set(metric.references)


def _measured(measured: dict[tuple, set | None], item: tuple) -> bool:
    """Whether a track case measures ``item``: every variant of its case, and the references its metrics read."""
    if item[:-1] not in measured:
        return False
    read = measured[item[:-1]]
    return read is None or item[-1] in read or item[-1] not in named(item[0]).jit_references


def items(groups: tuple[str, ...] = GROUPS, references: bool = True) -> list[tuple]:
    """The workloads of the suites named ``groups``; the references' first, the slowest to compile."""
    todo = []
    for suite in (suite for suite in SUITES if suite.name in groups):
        jit = suite.jit_references if references else ()
        todo += sorted({
            (suite.name, *params, impl)
            for grid in suite.grids
            for params in itertools.product(*grid.params.values())
            for impl in grid.impls
            if impl in grid.variants or impl in jit
        })  # fmt: skip
    return sorted(todo, key=lambda item: item[-1] not in named(item[0]).jit_references)


def warm(item: tuple) -> float:
    from kernelgate.measure.workloads import warmed

    start = time.perf_counter()
    warmed(named(item[0]).workload(*item[1:]))
    torch.cuda.empty_cache()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=cli.positive_int, default=default_jobs(12))
    parser.add_argument("--groups", nargs="+", default=list(GROUPS), help="groups to warm; others are ignored")
    parser.add_argument(
        "--without-references", action="store_true", help="warm this project's kernels alone, no reference"
    )
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("kernelgate.measure.warm compiles GPU kernels; no GPU is visible (smoke runs need no warm-up)")
    # One Inductor compile thread per worker: the workers are the parallelism.
    os.environ.setdefault("TORCHINDUCTOR_COMPILE_THREADS", "1")
    unknown = sorted(set(args.groups) - set(GROUPS))
    if unknown:
        print(f"no JIT work to warm for {unknown}", flush=True)
    todo = items(tuple(args.groups), references=not args.without_references)
    if os.environ.get(WARM_CASES_ENV):
        with open(os.environ[WARM_CASES_ENV]) as f:
            todo = for_cases(todo, json.load(f))
    start = time.perf_counter()
    print(f"warming {len(todo)} workloads on {args.jobs} processes", flush=True)
    failed = []
    for done, (item, seconds, err) in enumerate(in_worker_processes(warm, todo, args.jobs), 1):
        label = " ".join(item)
        if err is not None:  # the benchmark will fail on it too, and asv records that
            failed.append(label)
        outcome = f"FAILED: {err!r}" if err is not None else f"{seconds:.1f} s"
        print(f"[{done}/{len(todo)}] {label}: {outcome}", flush=True)
    print(f"warm-up done in {time.perf_counter() - start:.0f} s; {len(failed)} failed: {failed}", flush=True)


if __name__ == "__main__":
    main()
