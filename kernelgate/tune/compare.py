"""A side-by-side A/B of two tuned-configuration tables: does a re-tune pay on every case?

``python -m kernelgate.tune.compare OLD.json NEW.json`` times each LayerNorm case's call under
table A and under table B (``config.tuned_table``), interleaved round by round in one process
with the 1 GiB copy, as ``kernelgate.measure.metrics`` times the suite's cases: time A / time B above 1 means
B is faster. The tuner ranks a key by the geometric mean over the shapes that share its N, so a
new pick can lose on one of them; this shows which. E.g., after ``nox -s tune``:

    git show HEAD:kernels/layer_norm/tuned_configs.json > /tmp/old.json
    python -m kernelgate.tune.compare /tmp/old.json kernels/layer_norm/tuned_configs.json --directions bwd
"""

import argparse
from collections.abc import Callable
from pathlib import Path

from kernelgate import cli
from kernelgate.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    LAYER_NORM,
    LAYER_NORM_VARIANTS,
    shape_names,
)
from kernelgate.kernels.layer_norm.config import tuned_table
from kernelgate.measure import timing
from kernelgate.measure.workloads import batched, rotations, warmed


def under_table(path: Path, fn: Callable[[], object]) -> Callable[[], object]:
    """``fn``, each call of it launching with ``path``'s configurations and leaving the previous
    table in place after it (a CUDA graph captures them once; without a GPU every call reads them)."""

    def call():
        with tuned_table(path):
            return fn()

    return call


def compare_case(shape: str, dtype: str, direction: str, variant: str, tables: dict[str, Path], rounds: int) -> dict:
    """{"time_ratio": time under the first table / time under the second, "pct_peak": {table name:
    % of the copy peak}} of one case (the copy only with a GPU)."""
    case = LAYER_NORM.sized(shape, dtype)
    nbytes = case.bytes_moved(direction)
    rotate = rotations(nbytes)
    fns = {
        name: batched(warmed(under_table(path, LAYER_NORM.workload(case, variant, direction, rotate))), rotate)
        for name, path in tables.items()
    }
    if timing.gpu_timing():
        fns["copy"] = timing.copy()
    t = timing.interleaved_ms(fns, rounds)
    first, second = tables
    result = {"time_ratio": timing.median_ratio(t[first], t[second]), "pct_peak": {}}
    if "copy" in t:
        result["pct_peak"] = {
            name: timing.pct_of_reference(nbytes, 2 * timing.COPY_BYTES, t["copy"], t[name]) for name in tables
        }
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("table_a", type=Path)
    parser.add_argument("table_b", type=Path)
    parser.add_argument("--variant", default="fused", choices=LAYER_NORM_VARIANTS)
    parser.add_argument("--directions", nargs="+", default=["fwd", "bwd"], choices=BENCH_DIRECTIONS)
    parser.add_argument("--dtypes", nargs="+", default=BENCH_DTYPES, choices=BENCH_DTYPES)
    parser.add_argument("--shapes", nargs="+", type=cli.shape, default=shape_names(), help="MxN")
    parser.add_argument("--rounds", type=cli.positive_int, default=5)
    args = parser.parse_args()
    for table in (args.table_a, args.table_b):
        if not table.is_file():
            parser.error(f"no table at {table}")
    tables = {"A": args.table_a, "B": args.table_b}
    print(f"A: {args.table_a}\nB: {args.table_b}\n{args.variant}, {args.rounds} rounds interleaved with the 1 GiB copy")
    print("| case | A % copy peak | B % copy peak | time A / B |\n|---|---|---|---|")
    for direction in args.directions:
        for dtype in args.dtypes:
            for shape in args.shapes:
                r = compare_case(shape, dtype, direction, args.variant, tables, args.rounds)
                pct = [f"{r['pct_peak'][name]:.1f}%" if r["pct_peak"] else "n/a" for name in tables]
                print(f"| {shape} {dtype} {direction} | {pct[0]} | {pct[1]} | {r['time_ratio']:.3f}x |", flush=True)


if __name__ == "__main__":
    main()
