"""``python -m harness.host_overhead``: what one call of our LayerNorm costs on
the host, beside eager torch, on the smallest benchmark shape (where the host
path matters most).

Per call, for each implementation:

* host us: Python time to enqueue ``--calls`` calls back to back (no sync
  inside; the GPU queue is deep enough that the loop does not wait for it);
* wall us: the same loop until the device has finished, i.e. launch
  throughput: max(host, device) per call when the two overlap;
* device us: ``harness.timing.median_ms`` (CUDA events, L2 flushed per run).

Where host us exceeds device us, the call is launch-bound: back-to-back calls
(asv's ``time_*``) see the host cost, not the kernel.
"""

import argparse
import statistics
import time

import torch

from harness import timing
from harness.cases.layer_norm import BENCH_SHAPES, bench_case
from harness.workloads import layer_norm_workload, warmed

IMPLS = ["torch", "fused", "two_pass", "auto"]
DIRECTIONS = ["fwd", "fwd+bwd"]


def host_and_wall_us(fn, calls: int, repeats: int) -> tuple[float, float]:
    """Median over ``repeats`` of (enqueue time, time to finish) per call, in us."""
    host, wall = [], []
    for _ in range(repeats):
        torch.cuda.synchronize()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        enqueued = time.perf_counter()
        torch.cuda.synchronize()
        done = time.perf_counter()
        host.append((enqueued - start) / calls * 1e6)
        wall.append((done - start) / calls * 1e6)
    return statistics.median(host), statistics.median(wall)


def main(argv=None) -> None:
    smallest = min(BENCH_SHAPES, key=lambda mn: mn[0] * mn[1])
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--shape", default=f"{smallest[0]}x{smallest[1]}", help="MxN (default: smallest bench shape)")
    parser.add_argument("--dtypes", nargs="+", default=["float32", "bfloat16"])
    parser.add_argument(
        "--calls", type=int, default=100, help="calls per timed loop (few enough not to fill the queue)"
    )
    parser.add_argument("--repeats", type=int, default=20)
    args = parser.parse_args(argv)
    if not torch.cuda.is_available():
        raise SystemExit("harness.host_overhead measures launches on a GPU; none is visible")
    print(f"per-call cost on {torch.cuda.get_device_name(0)}, {args.calls} calls per loop, median of {args.repeats}")
    print("| case | direction | impl | host us | wall us | device us | host / device |")
    print("|---|---|---|---|---|---|---|")
    for dtype in args.dtypes:
        case = bench_case(args.shape, dtype)
        for direction in DIRECTIONS:
            for impl in IMPLS:
                fn = warmed(layer_norm_workload(case, impl, direction))
                host, wall = host_and_wall_us(fn, args.calls, args.repeats)
                device = timing.median_ms(fn) * 1e3
                cells = f"{host:.1f} | {wall:.1f} | {device:.1f} | {host / device:.2f}"
                print(f"| {case.name} | {direction} | {impl} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
