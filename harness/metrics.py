"""The derived metrics of one benchmark case, measured in one process: every
kernel variant beside its references, round after round (timing.interleaved_ms),
so clock and thermal drift cancel in each ratio.

asv runs every benchmark in a process of its own; ``per_run`` lets the first
process of a case measure it for all the case's track_* benchmarks.

``python -m harness.metrics`` measures the LayerNorm cases in one process and
prints the table ``nox -s bench`` would (no time_* column, no history): the
same numbers in minutes rather than the full asv run.
"""

import argparse
import contextlib
import json
import statistics
from collections.abc import Callable
from pathlib import Path

from harness import timing
from harness.cases.attention import ATTENTION_BASELINE, AttentionCase
from harness.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    LAYER_NORM_BASELINE,
    LAYER_NORM_REFERENCES,
    LAYER_NORM_VARIANTS,
    LayerNormCase,
    bench_case,
    shape_names,
)
from harness.workloads import attention_backward_workload, batched, layer_norm_workload, rotations, warmed


def layer_norm_metrics(case: LayerNormCase, direction: str) -> dict[str, dict[str, float]]:
    """Per variant: speedup over eager torch and torch.compile, GB/s, % of the copy
    peak, and the host's cost per eager call.

    Device times are do_bench medians (L2 flushed before every run) of a CUDA graph
    of back-to-back calls on rotated inputs (``harness.workloads.batched``), per call,
    references included: the kernels, not the launch path, which ``host_us`` measures
    on its own. Under the interpreter only the speedup over torch, GB/s and host_us
    are measured (smoke values).
    """
    gpu = timing.gpu_timing()
    impls = LAYER_NORM_VARIANTS + (LAYER_NORM_REFERENCES if gpu else [LAYER_NORM_BASELINE])
    nbytes = case.bytes_moved(direction)
    rotate = rotations(nbytes)
    eager = {impl: warmed(layer_norm_workload(case, impl, direction, rotate)) for impl in impls}
    loops = dict(calls=50, repeats=5) if gpu else dict(calls=1, repeats=1)  # the interpreter takes ms a call
    host_us = {impl: timing.enqueue_us(eager[impl], **loops)[0] for impl in LAYER_NORM_VARIANTS}
    fns = {impl: batched(fn, rotate) for impl, fn in eager.items()}
    if gpu:
        fns["copy"] = timing.copy()  # 2 * COPY_BYTES moved
    t = timing.interleaved_ms(fns)
    metrics = {}
    for variant in LAYER_NORM_VARIANTS:
        m = {
            "speedup_vs_torch": timing.median_ratio(t[LAYER_NORM_BASELINE], t[variant]),
            "gbps": timing.gbps(nbytes, statistics.median(t[variant])),
            "host_us": host_us[variant],
        }
        if gpu:
            m["speedup_vs_compile"] = timing.median_ratio(t["torch_compile"], t[variant])
            m["pct_peak"] = 100 * nbytes / (2 * timing.COPY_BYTES) * timing.median_ratio(t["copy"], t[variant])
        metrics[variant] = m
    return metrics


def attention_metrics(case: AttentionCase, modes: list[str]) -> dict[str, dict[str, float]]:
    """Per accumulation mode: TFLOP/s, % of the bf16 matmul peak and, where FA2 runs
    (d_qk == d_v), the speedup over torch's varlen FA2 backward."""
    fns = {mode: warmed(attention_backward_workload(case, mode)) for mode in modes}
    with contextlib.suppress(NotImplementedError):
        fns[ATTENTION_BASELINE] = warmed(attention_backward_workload(case, ATTENTION_BASELINE))
    fns["matmul"], matmul_flops = timing.matmul()
    t = timing.interleaved_ms(fns)
    flops = case.flops_backward()
    metrics = {}
    for mode in modes:
        m = {
            "tflops": timing.tflops(flops, statistics.median(t[mode])),
            "pct_matmul_peak": 100 * flops / matmul_flops * timing.median_ratio(t["matmul"], t[mode]),
        }
        if ATTENTION_BASELINE in t:
            m["speedup_vs_fa2"] = timing.median_ratio(t[ATTENTION_BASELINE], t[mode])
        metrics[mode] = m
    return metrics


def per_run(key: str, measure: Callable[[], dict]) -> dict:
    """``measure()`` once per asv run and key.

    asv gives all benchmarks of a class that defines ``setup_cache`` one working
    directory for the run (and deletes it afterwards): the first process that
    needs ``key`` measures it and leaves the JSON there for the others. Nothing
    is written when measuring fails, so every benchmark of that key fails too.
    """
    path = Path(f"metrics-{key}.json")
    if not path.exists():
        partial = path.with_suffix(".partial")
        partial.write_text(json.dumps(measure()))
        partial.replace(path)
    return json.loads(path.read_text())


def main(argv=None) -> None:
    from harness.report import markdown_table

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shapes", nargs="+", default=shape_names())
    parser.add_argument("--dtypes", nargs="+", default=BENCH_DTYPES)
    parser.add_argument("--directions", nargs="+", default=BENCH_DIRECTIONS)
    args = parser.parse_args(argv)
    if not timing.gpu_timing():
        raise SystemExit("harness.metrics measures on a GPU; none is visible (the asv smoke run covers the CPU)")
    import torch

    print(f"{torch.cuda.get_device_name(0)}: copy peak {timing.copy_peak_gbps():.0f} GB/s\n", flush=True)
    rows = []
    for shape in args.shapes:
        for dtype in args.dtypes:
            case = bench_case(shape, dtype)
            for direction in args.directions:
                for variant, m in layer_norm_metrics(case, direction).items():
                    rows.append({"kernel": f"layer_norm/{variant}", "case": f"{shape} {dtype} {direction}",
                                 "speedup_torch": m["speedup_vs_torch"], "speedup_compile": m["speedup_vs_compile"],
                                 "gbps": m["gbps"], "pct_peak": m["pct_peak"], "host_us": m["host_us"]})  # fmt: skip
                print(f"measured {case.name} {direction}", flush=True)
    print(markdown_table(rows))


if __name__ == "__main__":
    main()
