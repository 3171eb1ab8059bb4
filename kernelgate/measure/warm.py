"""Fill the on-disk JIT caches (Triton, Inductor, TileLang) for every benchmark
workload, in parallel processes, before the benchmarks run.

The benchmark processes then load compiled code instead of compiling it, one case
after another (torch.compile of the LayerNorm graphs alone takes many minutes
serially). Nothing is timed here, and a benchmark's own setup still calls its
workload once before sampling.

``python -m kernelgate.measure.warm [--jobs N] [--groups layer_norm attention] [--without-references]``
(``nox -s bench`` and the PR check run it on a GPU; ``--groups`` names pr-check.toml's groups, default
all; ``--without-references`` warms this project's kernels alone, all that the PR check times on base).
With ``KERNELGATE_WARM_CASES`` set, only the workloads of those benchmark cases are warmed: a PR check
shard warms its own share.
"""

import argparse
import json
import os
import time

import torch

from kernelgate import cli
from kernelgate.cases.attention import BENCH_CONFIGS
from kernelgate.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    LAYER_NORM_VARIANTS,
    MODEL_DIRECTIONS,
    bench_case,
    model_width_shape_names,
    shape_names,
)
from kernelgate.measure.parallel import default_jobs, in_worker_processes

# Eager torch, FA2 and cuDNN have nothing to compile.
LAYER_NORM_COMPILED_REFERENCES = ["torch_compile", "liger"]
GROUPS = ("layer_norm", "attention")
# A JSON file of [kind, parameter values] pairs, one per asv case ("time" or "track"): warm only what
# they run. Set by the PR check (kernelgate.prcheck.check) for its shard's cases; unset, every workload
# of the groups is warmed.
WARM_CASES_ENV = "KERNELGATE_WARM_CASES"


def for_cases(todo: list[tuple], cases: list[tuple[str, list]]) -> list[tuple]:
    """The items of ``todo`` that ``cases`` run. An item is (group, *parameters, implementation), as a
    time case's parameters are; a track case measures every implementation of its leading parameters."""
    timed = {tuple(values) for kind, values in cases if kind == "time"}
    measured = {tuple(values[:-1]) for kind, values in cases if kind == "track"}
    return [item for item in todo if item[1:] in timed or item[1:-1] in measured]


def items(groups: tuple[str, ...] = GROUPS, references: bool = True) -> list[tuple]:
    suites = [  # (shapes, directions, our variants): the LayerNorm and LayerNormWidths benchmarks
        (shape_names(), BENCH_DIRECTIONS, LAYER_NORM_VARIANTS),
        (model_width_shape_names(), MODEL_DIRECTIONS, ["auto"]),
    ]
    layer_norm = sorted({
        ("layer_norm", shape, dtype, direction, impl)
        for shapes, directions, variants in suites
        for shape in shapes
        for dtype in BENCH_DTYPES
        for direction in directions
        for impl in variants + (LAYER_NORM_COMPILED_REFERENCES if references else [])
    })  # fmt: skip
    from kernelgate.kernels.attention import ACCUM_MODES

    attention = [("attention", config, mode) for config in BENCH_CONFIGS for mode in ACCUM_MODES]
    # torch.compile items are the slowest: start them first.
    chosen = [item for item in layer_norm + attention if item[0] in groups]
    return sorted(chosen, key=lambda item: item[-1] != "torch_compile")


def warm(item: tuple) -> float:
    from kernelgate.measure.workloads import attention_backward_workload, layer_norm_workload, warmed

    start = time.perf_counter()
    if item[0] == "layer_norm":
        _, shape, dtype, direction, impl = item
        warmed(layer_norm_workload(bench_case(shape, dtype), impl, direction))
    else:
        _, config, mode = item
        warmed(attention_backward_workload(BENCH_CONFIGS[config], mode))
    torch.cuda.empty_cache()
    return time.perf_counter() - start


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--jobs", type=cli.positive_int, default=default_jobs(12))
    parser.add_argument("--groups", nargs="+", default=list(GROUPS), help="groups to warm; others are ignored")
    parser.add_argument("--without-references", action="store_true", help="skip torch.compile and Liger-Kernel")
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
