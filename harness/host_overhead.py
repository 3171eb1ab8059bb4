"""``python -m harness.host_overhead``: what one call of our LayerNorm costs on
the host, beside eager torch, on the smallest benchmark shape (where the host
path matters most).

Per call, for each implementation:

* host us, wall us: ``harness.timing.enqueue_us`` over ``--calls`` calls back to
  back: the host's time to enqueue them, and the time until the device is done;
* device us: the call in a CUDA graph of back-to-back calls (``harness.workloads.batched``),
  ``harness.timing.median_ms`` (CUDA events, L2 flushed per run), as the suite measures kernels.

Where host us exceeds device us, an eager caller is launch-bound: back-to-back
calls wait for the host, not the kernel.
"""

import argparse

import torch

from harness import timing
from harness.cases.layer_norm import BENCH_SHAPES, bench_case
from harness.workloads import batched, layer_norm_workload, rotations, warmed

IMPLS = ["torch", "fused", "two_pass", "auto"]
DIRECTIONS = ["fwd", "fwd+bwd"]


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
                rotate = rotations(case.bytes_moved(direction))
                fn = warmed(layer_norm_workload(case, impl, direction, rotate))
                host, wall = timing.enqueue_us(fn, args.calls, args.repeats)
                device = timing.median_ms(batched(fn, rotate)) * 1e3
                cells = f"{host:.1f} | {wall:.1f} | {device:.1f} | {host / device:.2f}"
                print(f"| {case.name} | {direction} | {impl} | {cells} |", flush=True)


if __name__ == "__main__":
    main()
