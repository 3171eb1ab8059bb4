"""The derived metrics of one benchmark case, measured in one process: every
kernel variant beside its references, round after round (timing.interleaved_ms),
so clock and thermal drift cancel in each ratio.

A metrics class measures all its cases once, in its ``setup_cache`` (``measure_cases``),
and asv hands the result to each track_* benchmark: one process with warm compile caches
(on an H100, ~3 minutes for the LayerNorm cases rather than ~14 with a cold process per
case, as ``asv run`` would start for each benchmark).

``python -m kernelgate.measure.metrics`` measures the LayerNorm cases in one process and
prints the table ``nox -s bench`` would (no time_* column, no history): the
same numbers without asv's history.
"""

import argparse
import contextlib
import functools
import itertools
import json
import os
import statistics
import time
from collections.abc import Callable, Iterable

from kernelgate import cli
from kernelgate.cases.attention import ATTENTION_REFERENCES, AttentionCase
from kernelgate.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    LAYER_NORM_BASELINE,
    LAYER_NORM_REFERENCES,
    LAYER_NORM_VARIANTS,
    LayerNormCase,
    bench_case,
    shape_names,
)
from kernelgate.measure import timing
from kernelgate.measure.workloads import (
    attention_backward_workload,
    batched,
    layer_norm_workload,
    rotations,
    sized_for_device,
    tensor_copy_workload,
    warmed,
)


def layer_norm_metrics(
    case: LayerNormCase, direction: str, variants: list[str] = LAYER_NORM_VARIANTS
) -> dict[str, dict[str, float]]:
    """Per variant: speedup over eager torch, torch.compile and Liger-Kernel, GB/s, % of the copy
    peak and % of a copy of one of the case's [M, N] tensors (the memory system's rate at
    this size), and the host's cost per eager call, alone and as a ratio to eager torch's and
    torch.compile's (measured alternately with them: a ratio does not depend on the host's CPU).

    Device times are do_bench medians (L2 flushed before every run) of a CUDA graph
    of back-to-back calls on rotated inputs (``kernelgate.measure.workloads.batched``), per call,
    references included: the kernels, not the launch path, which ``host_us`` measures
    on its own. Under the interpreter only the speedup over torch, GB/s and the host's
    cost are measured (smoke values).
    """
    gpu = timing.gpu_timing()
    impls = variants + (LAYER_NORM_REFERENCES if gpu else [LAYER_NORM_BASELINE])
    nbytes = case.bytes_moved(direction)
    rotate = rotations(nbytes)
    eager = {impl: warmed(layer_norm_workload(case, impl, direction, rotate)) for impl in impls}
    # Many short loops: their least is the host's cost (timing.least_ratio). The interpreter takes ms a call.
    loops = dict(calls=10, rounds=50) if gpu else dict(calls=1, rounds=1)
    # The host ratios are to eager torch's and torch.compile's, the calls a user would otherwise make.
    host = timing.interleaved_enqueue_us({impl: eager[impl] for impl in impls if impl != "liger"}, **loops)
    fns = {impl: batched(fn, rotate) for impl, fn in eager.items()}
    copies = {}  # {metric: (copy, bytes it moves)}: the variant's bandwidth as % of the copy's
    if gpu:
        fns["copy"], fns["tensor_copy"] = timing.copy(), batched(tensor_copy_workload(case, rotate), rotate)
        copies = dict(pct_peak=("copy", 2 * timing.COPY_BYTES), pct_tensor_copy=("tensor_copy", 2 * case.tensor_bytes))
    t = timing.interleaved_ms(fns)
    metrics = {}
    for variant in variants:
        m = {
            "speedup_vs_torch": timing.median_ratio(t[LAYER_NORM_BASELINE], t[variant]),
            "gbps": timing.gbps(nbytes, statistics.median(t[variant])),
            "host_us": min(host[variant]),
            "host_vs_torch": timing.least_ratio(host[variant], host[LAYER_NORM_BASELINE]),
        }
        if gpu:
            m["speedup_vs_compile"] = timing.median_ratio(t["torch_compile"], t[variant])
            m["speedup_vs_liger"] = timing.median_ratio(t["liger"], t[variant])
            m["host_vs_compile"] = timing.least_ratio(host[variant], host["torch_compile"])
        for metric, (copy, copied) in copies.items():
            m[metric] = timing.pct_of_reference(nbytes, copied, t[copy], t[variant])
        metrics[variant] = m
    return metrics


# The references each mode's speed is read against, where they run (FA2, cuDNN): the metric each one gives.
ATTENTION_SPEEDUPS = dict(zip(ATTENTION_REFERENCES, ("speedup_vs_fa2", "speedup_vs_cudnn"), strict=True))


def attention_metrics(case: AttentionCase, modes: list[str]) -> dict[str, dict[str, float]]:
    """Per accumulation mode: TFLOP/s, % of the bf16 matmul peak and the speedups over torch's varlen
    FA2 backward, where it runs (d_qk == d_v), and over cuDNN SDPA's on the padded batch."""
    fns = {mode: warmed(attention_backward_workload(case, mode)) for mode in modes}
    for reference in ATTENTION_SPEEDUPS:
        with contextlib.suppress(NotImplementedError):
            fns[reference] = warmed(attention_backward_workload(case, reference))
    fns["matmul"], matmul_flops = timing.matmul()
    t = timing.interleaved_ms(fns)
    flops = case.flops_backward()
    metrics = {}
    for mode in modes:
        m = {
            "tflops": timing.tflops(flops, statistics.median(t[mode])),
            "pct_matmul_peak": timing.pct_of_reference(flops, matmul_flops, t["matmul"], t[mode]),
        }
        for reference, name in ATTENTION_SPEEDUPS.items():
            if reference in t:
                m[name] = timing.median_ratio(t[reference], t[mode])
        metrics[mode] = m
    return metrics


def layer_norm_measures(
    cases: Iterable[tuple[str, str, str]], variants: list[str] = LAYER_NORM_VARIANTS
) -> dict[str, Callable[[], dict]]:
    """What measures each LayerNorm case (shape, dtype, direction), by ``case_key``."""
    return {
        case_key(shape, dtype, direction): functools.partial(
            layer_norm_metrics, sized_for_device(bench_case(shape, dtype)), direction, variants
        )
        for shape, dtype, direction in cases
    }


# The parameter combinations a run needs, as a JSON list of lists (set by the PR check's worker
# for one metrics class); unset, all of them. A metrics class's setup_cache measures only those.
SELECTED_ENV = "KERNELGATE_SELECTED_PARAMS"


def selected_params(params: list[list]) -> list[tuple]:
    """The combinations of an asv class's ``params`` that this run needs."""
    chosen = os.environ.get(SELECTED_ENV)
    if chosen is None:
        return list(itertools.product(*params))
    return [tuple(combo) for combo in json.loads(chosen)]


def case_key(*params: str) -> str:
    return "-".join(params)


def measure_cases(measures: dict[str, Callable[[], dict]]) -> dict[str, dict | str]:
    """Each case's metrics, measured in turn, each case's seconds printed (the PR check's shard
    balance is fitted to them). A case whose measurement raises keeps its error (a string) and the
    others are still measured: ``case_metrics`` then fails that case's benchmarks only."""
    results = {}
    for key, measure in measures.items():
        start = time.perf_counter()
        try:
            results[key] = measure()
        except Exception as err:  # recorded; case_metrics raises it for this case's benchmarks
            results[key] = f"{type(err).__name__}: {err}"
        print(f"measured {key} in {time.perf_counter() - start:.1f} s", flush=True)
    return results


def case_metrics(results: dict[str, dict | str], key: str) -> dict:
    """One case's metrics from ``measure_cases``; raises what its measurement raised."""
    if key not in results:
        raise KeyError(f"{key} was not measured")
    if isinstance(results[key], str):
        raise RuntimeError(f"measuring {key} failed: {results[key]}")
    return results[key]


def main(argv=None) -> None:
    from kernelgate.report.bench import markdown_table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", type=cli.shape, default=shape_names(), help="MxN")
    parser.add_argument("--dtypes", nargs="+", default=BENCH_DTYPES, choices=BENCH_DTYPES)
    parser.add_argument("--directions", nargs="+", default=BENCH_DIRECTIONS, choices=BENCH_DIRECTIONS)
    parser.add_argument("--variants", nargs="+", default=LAYER_NORM_VARIANTS, choices=LAYER_NORM_VARIANTS)
    args = parser.parse_args(argv)
    if not timing.gpu_timing():
        raise SystemExit(
            "kernelgate.measure.metrics measures on a GPU; none is visible (the asv smoke run covers the CPU)"
        )
    import torch

    print(f"{torch.cuda.get_device_name(0)}: copy peak {timing.copy_peak_gbps():.0f} GB/s\n", flush=True)
    cases = itertools.product(args.shapes, args.dtypes, args.directions)
    results = measure_cases(layer_norm_measures(cases, args.variants))
    rows, failed = [], []
    for shape in args.shapes:
        for dtype in args.dtypes:
            for direction in args.directions:
                key = case_key(shape, dtype, direction)
                if isinstance(results[key], str):
                    failed.append(f"{key}: {results[key]}")
                    continue
                for variant, m in results[key].items():
                    names = ("speedup_vs_torch", "speedup_vs_compile", "speedup_vs_liger", "gbps", "pct_peak",
                             "pct_tensor_copy", "host_us", "host_vs_torch", "host_vs_compile")  # fmt: skip
                    row = {name.replace("speedup_vs_", "speedup_"): m[name] for name in names}  # column keys
                    rows.append({"kernel": f"layer_norm/{variant}", "case": f"{shape} {dtype} {direction}", **row})
    print(markdown_table(rows))
    if failed:
        raise SystemExit("measuring failed:\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
