"""``nox -s tune``: sweep launch configurations, print median latencies, name
the best, and keep it in ``kernels/layer_norm/tuned_configs.json`` under the
GPU's class, where the launchers read it.

The default sweep is the seed's day-3 one (two_pass forward on 4096x4096 fp32:
BLOCK_N in {512..8192} x num_warps in {2, 4, 8}) followed by every benchmark
shape for the fused kernel; flags narrow or widen it.
"""

import argparse
import itertools
import json

import torch
import triton

from harness import timing
from harness.cases.layer_norm import BENCH_DTYPES, BENCH_SHAPES, LayerNormCase
from harness.device_info import device_info
from kernels.layer_norm.config import FUSED_MAX_N, LaunchConfig, tuned_file, tuned_key
from kernels.layer_norm.ops import backward_launch, forward_launch, layer_norm_fwd

BLOCK_N = [512, 1024, 2048, 4096, 8192]
WARPS = [2, 4, 8]
FUSED_WARPS = [2, 4, 8, 16]
ROWS = [1, 2, 4, 8]


def candidates(variant: str, n: int) -> list[LaunchConfig]:
    if variant == "two_pass":
        blocks = [b for b in BLOCK_N if b <= max(512, triton.next_power_of_2(n))]
        return [LaunchConfig(1, b, w) for b, w in itertools.product(blocks, WARPS)]
    block_n = triton.next_power_of_2(n)
    rows = [r for r in ROWS if r * block_n <= 16384] or [1]
    return [LaunchConfig(r, block_n, w) for r, w in itertools.product(rows, FUSED_WARPS)]


def time_config(case: LayerNormCase, variant: str, direction: str, cfg: LaunchConfig) -> float:
    x, w, b = case.make_inputs("cuda")
    y, mean, rstd = layer_norm_fwd(x, w, b, case.eps, variant)  # real statistics for the backward
    if direction == "fwd":
        launch = forward_launch(x, w, b, case.eps, variant, y, mean, rstd, cfg)
    else:
        dy, dx = torch.randn_like(x), torch.empty_like(x)
        launch = backward_launch(dy, x, w, b, mean, rstd, variant, dx, cfg)[0]
    try:
        launch()
    except triton.runtime.errors.OutOfResources:
        return float("inf")
    return timing.median_ms(launch)


def sweep(case: LayerNormCase, variant: str, direction: str) -> tuple[LaunchConfig, list[tuple[LaunchConfig, float]]]:
    results = [(cfg, time_config(case, variant, direction, cfg)) for cfg in candidates(variant, case.n)]
    return min(results, key=lambda r: r[1])[0], results


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["two_pass", "fused"], choices=["two_pass", "fused"])
    parser.add_argument("--shapes", nargs="+", help="MxN (default: 4096x4096 for two_pass, all for fused)")
    parser.add_argument("--dtypes", nargs="+", default=["float32"], choices=BENCH_DTYPES)
    parser.add_argument("--directions", nargs="+", default=["fwd"], choices=["fwd", "bwd"])
    parser.add_argument("--dry-run", action="store_true", help="print the table, keep the configs file as is")
    args = parser.parse_args()
    if not torch.cuda.is_available():
        raise SystemExit("nox -s tune times kernels on a GPU; none is visible")
    gpu = device_info()["gpu_class"]
    path = tuned_file()
    table = json.loads(path.read_text()) if path.exists() else {}
    for variant, dtype, direction in itertools.product(args.variants, args.dtypes, args.directions):
        shapes = args.shapes or (["4096x4096"] if variant == "two_pass" else [f"{m}x{n}" for m, n in BENCH_SHAPES])
        for shape in shapes:
            m, n = (int(v) for v in shape.split("x"))
            if variant == "fused" and n > FUSED_MAX_N:
                continue
            case = LayerNormCase(m, n, dtype)
            best, results = sweep(case, variant, direction)
            print(f"\n{variant} {direction} {case.name} on {gpu}: median ms")
            print("| BLOCK_M | BLOCK_N | num_warps | ms | GB/s |\n|---|---|---|---|---|")
            for cfg, ms in results:
                mark = " **best**" if cfg == best else ""
                print(f"| {cfg.block_m} | {cfg.block_n} | {cfg.num_warps} | {ms:.4f}{mark} | "
                      f"{timing.gbps(case.bytes_moved(direction), ms):.0f} |")  # fmt: skip
            table.setdefault(gpu, {})[tuned_key(variant, direction, case.torch_dtype, n)] = {
                "block_m": best.block_m, "block_n": best.block_n, "num_warps": best.num_warps,
            }  # fmt: skip
    if not args.dry_run:
        path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
        print(f"\nbest configurations kept in {path}")


if __name__ == "__main__":
    main()
