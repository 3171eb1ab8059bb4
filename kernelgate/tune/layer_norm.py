"""``nox -s tune``: sweep LayerNorm launch configurations on the GPU, print
median latencies, name the best, and keep it in
``kernels/layer_norm/tuned_configs.json`` under the GPU's class, where the
launchers read it.

The default run:

1. the two-pass block table: two_pass forward on 4096x4096 fp32, BLOCK_N in
   {512..8192} x num_warps in {2, 4, 8}, one row per program;
2. every key the launchers look up for the benchmark cases: variant (fused,
   two_pass) x direction (fwd, bwd) x dtype x N of each benchmark shape. Shapes
   with the same N share a key: the configuration with the lowest geometric
   mean time over them is kept.

Candidates (kernelgate.tune.space) are first compiled in parallel
(kernelgate.tune.compile), dropping those that spill or do not fit, then timed
one by one in this process as the suite times a call: ``kernelgate.measure.timing.median_ms``
of a CUDA graph of back-to-back calls on rotated input sets
(``kernelgate.measure.workloads.batched``). Timing single launches instead would add the
launch latency to every candidate, as large as a small case's kernel, and rank
them by noise there. The forward is timed as the suite's fwd case runs it, as
inference: storing the statistics compiles another kernel that ranks differently
(on an H100, fp16 4096x5000's earlier pick took 31.1 us storing them and 33.8 us
without; the heuristic's configuration 32.6 and 31.7 us). Each key's leaders are
then timed once more with the runtime-argument variations of
``kernelgate.tune.space.refinements``. The backward is timed
as the whole ``layer_norm_bwd`` (main kernel, partial buffer, column sums), since
the grid's size changes the column-sum work too. Last, the ``CONFIRMED_LEADERS``
first are timed again, round by round in turn (``kernelgate.measure.timing.interleaved_ms``, as
the suite's metrics are), and the table keeps the fastest of those: one outlying
timing in the sweep cannot pick the entry.

``--plan`` prints what would run and the time estimate, without a GPU.
"""

import argparse
import dataclasses
import itertools
import json
import math
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch

from kernelgate import cli
from kernelgate.cases.common import DTYPES
from kernelgate.cases.layer_norm import BENCH_DTYPES, LayerNormCase, bench_case, shape_names
from kernelgate.kernels.layer_norm.config import (
    LaunchConfig,
    heuristic_config,
    heuristic_variant,
    read_tuned_table,
    tuned_file,
    tuned_key,
    with_tuned,
    write_tuned_table,
)
from kernelgate.measure import timing
from kernelgate.measure.parallel import default_jobs
from kernelgate.measure.workloads import batched, rotations
from kernelgate.tune.space import (
    BLOCK_TABLE_SHAPE,
    REFINED_LEADERS,
    block_table_configs,
    candidates,
    compile_unit,
    compile_units,
    refinements,
    variants_for,
)

WARMUP_MS = 5  # shorter than the suite's timing: many configurations, each only ranked
REP_MS = 20
CONFIRMED_LEADERS = 4  # per key: re-timed interleaved before the table keeps one

# For the estimate printed at the start (seconds). Compile: one kernel on one
# worker, launch included (0.3-0.5 s seen for sm_90 ahead-of-time on a slow CPU).
COMPILE_S = 0.8
POOL_START_S = 15  # spawn the workers, import torch, initialize CUDA
LOAD_S = 0.01  # the timing process loading one kernel from Triton's disk cache
# Per configuration beyond warm-up + repetitions (graph capture, median_ms): 2.6 ms on an H200;
# kept well above it, since a whole H100 sweep ran closer to its estimate.
TIMING_OVERHEAD_S = 0.008


@dataclasses.dataclass(frozen=True)
class Key:
    """One entry of the tuned table."""

    variant: str
    direction: str
    dtype: str
    n: int

    @property
    def name(self) -> str:
        return tuned_key(self.variant, self.direction, DTYPES[self.dtype], self.n)


@dataclasses.dataclass(frozen=True)
class Measurement:
    key: Key
    case: LayerNormCase
    cfg: LaunchConfig
    ms: float

    @property
    def gbps(self) -> float:
        return timing.gbps(self.case.bytes_moved(self.key.direction), self.ms)


def plan(variants, directions, dtypes, shapes) -> dict[Key, list[LayerNormCase]]:
    """Every key to tune and the shapes it is timed on."""
    keys: dict[Key, list[LayerNormCase]] = {}
    for direction, dtype, shape in itertools.product(directions, dtypes, shapes):
        case = bench_case(shape, dtype)
        for variant in variants_for(case.n, variants):
            keys.setdefault(Key(variant, direction, dtype, case.n), []).append(case)
    return dict(sorted(keys.items(), key=lambda kv: dataclasses.astuple(kv[0])))


def key_candidates(key: Key) -> list[LaunchConfig]:
    return candidates(key.variant, key.direction, DTYPES[key.dtype], key.n)


def ranked_by_geomean(measurements: list[Measurement]) -> list[tuple[LaunchConfig, float]]:
    """(config, geometric mean ms over shapes), fastest first; only configurations
    with a finite time on every shape measured qualify."""
    shapes = {m.case for m in measurements}
    times: dict[LaunchConfig, dict[LayerNormCase, float]] = {}
    for m in measurements:
        times.setdefault(m.cfg, {})[m.case] = m.ms
    ranked = [
        (cfg, math.exp(sum(math.log(ms) for ms in per_shape.values()) / len(per_shape)))
        for cfg, per_shape in times.items()
        if set(per_shape) == shapes and all(0 < ms < math.inf for ms in per_shape.values())
    ]
    return sorted(ranked, key=lambda r: r[1])


def estimate_s(
    keys: dict[Key, list[LayerNormCase]], block_table: bool, jobs: int, rep_ms: float, warmup_ms: float
) -> dict:
    units = {(k.variant, k.direction, k.dtype, k.n, c) for k in keys for c in compile_units(key_candidates(k))}
    # The refinements are of the leaders: any REFINED_LEADERS candidates count the same. Their own
    # kernels compile one at a time in the timing process.
    refined = {k: refinements(k.variant, k.direction, key_candidates(k)[:REFINED_LEADERS]) for k in keys}
    compiled_when_timed = sum(
        len(set(compile_units(r)) - set(compile_units(key_candidates(k)))) for k, r in refined.items()
    )
    per_key = {k: len(key_candidates(k)) + len(refined[k]) for k in keys}
    confirmations = CONFIRMED_LEADERS * timing.ROUNDS
    timings = sum((per_key[k] + confirmations) * len(cases) for k, cases in keys.items())
    timings += len(block_table_configs()) if block_table else 0
    compile_s = POOL_START_S + len(units) * COMPILE_S / jobs + compiled_when_timed * COMPILE_S
    time_s = len(units) * LOAD_S + timings * ((warmup_ms + rep_ms) / 1e3 + TIMING_OVERHEAD_S)
    return {"kernels": len(units), "timings": timings, "compile_s": compile_s, "time_s": time_s}


# --- GPU side ---------------------------------------------------------------------------------------------


@dataclasses.dataclass
class CaseTensors:
    """Rotated input sets of one case, made once and reused by every configuration."""

    case: LayerNormCase
    sets: list[dict[str, torch.Tensor]]

    @classmethod
    def make(cls, case: LayerNormCase, variant: str, direction: str) -> "CaseTensors":
        from kernelgate.kernels.layer_norm.ops import layer_norm_fwd

        sets = []
        for _ in range(rotations(case.bytes_moved(direction))):
            x, w, b = case.make_inputs("cuda")
            _, mean, rstd = layer_norm_fwd(x, w, b, case.eps, variant)  # real statistics for the backward
            sets.append(dict(x=x, w=w, b=b, dy=torch.randn_like(x), mean=mean, rstd=rstd))
        return cls(case, sets)

    def runner(self, variant: str, direction: str, cfg: LaunchConfig):
        """One call per input set, in turn, timed as the suite times a call (``batched``: a CUDA
        graph of back-to-back calls, so launch latency and the host stay out of the ranking). Each
        call allocates its outputs, as the suite's workloads do: a small output then stays in L2
        between calls (docs/measuring.md)."""
        from kernelgate.kernels.layer_norm import ops

        def call(s: dict):
            if direction == "fwd":  # as the suite's fwd case runs: inference, no statistics stored
                y = torch.empty_like(s["x"])
                return ops.forward_launch(s["x"], s["w"], s["b"], self.case.eps, variant, y, None, None, cfg)()
            return ops.layer_norm_bwd(s["dy"], s["x"], s["w"], s["b"], s["mean"], s["rstd"], variant, None, cfg)

        return self.runner_of(call)

    def runner_of(self, call: Callable[[dict], object]):
        """``call`` of one input set, timed as ``runner``'s: each call takes the next set."""
        sets = itertools.cycle(self.sets)
        return batched(lambda: call(next(sets)), len(self.sets))


def time_configs(key: Key, tensors: CaseTensors, configs, warmup_ms: float, rep_ms: float) -> list[Measurement]:
    out = []
    for cfg in configs:
        ms = timing.median_ms(tensors.runner(key.variant, key.direction, cfg), warmup_ms, rep_ms)
        out.append(Measurement(key, tensors.case, cfg, ms))
    return out


def time_on_shapes(key: Key, cases: list[LayerNormCase], configs, args) -> list[Measurement]:
    """``configs`` timed on each of the key's shapes (one shape's input sets in memory at a time)."""
    measured = []
    for case in cases:
        tensors = CaseTensors.make(case, key.variant, key.direction)
        measured += time_configs(key, tensors, configs, args.warmup_ms, args.rep_ms)
        del tensors
    return measured


def confirm_leaders(key: Key, cases: list[LayerNormCase], leaders: list[LaunchConfig]) -> list[Measurement]:
    """``leaders`` timed again on each of the key's shapes, round by round in turn, each the
    median of its rounds: drift and one-off outliers of the sweep's single timings cancel."""
    measured = []
    for case in cases:
        tensors = CaseTensors.make(case, key.variant, key.direction)
        rounds = timing.interleaved_ms({cfg: tensors.runner(key.variant, key.direction, cfg) for cfg in leaders})
        measured += [Measurement(key, case, cfg, statistics.median(ms)) for cfg, ms in rounds.items()]
        del tensors
    return measured


def _option_columns(key: Key) -> dict[str, str]:
    """{column heading: LaunchConfig field} of the options this key's kernel takes beyond the tile."""
    prefetch = {"prefetch/SM": "prefetch_per_sm"}
    if key.direction == "bwd":
        pipeline = {"programs/SM": "programs_per_sm", "stages": "num_stages"}
        fused = {"balanced grid": "balanced_grid", "one reduction": "single_reduction", **prefetch}
        return {**pipeline, **fused} if key.variant == "fused" else pipeline
    fused = {"preload w, b": "preload_affine", "one reduction": "single_reduction", **prefetch}
    return fused if key.variant == "fused" else {}


def _cfg_cells(cfg: LaunchConfig, key: Key) -> str:
    options = "".join(f" | {getattr(cfg, field):.3g}" for field in _option_columns(key).values())  # 0.75, True: 1
    return f"{cfg.block_m} | {cfg.block_n} | {cfg.num_warps}{options}"


def print_block_table(measured: list[Measurement], dropped: dict[LaunchConfig, str], gpu: str) -> None:
    case = LayerNormCase(*BLOCK_TABLE_SHAPE)
    print(f"\nblock table: two_pass fwd {case.name} on {gpu}, one row per program: median ms")
    print("| BLOCK_N | num_warps | ms | GB/s |\n|---|---|---|---|")
    times = {m.cfg: m for m in measured}
    for cfg in block_table_configs():
        m = times.get(cfg)
        cells = f"{m.ms:.4f} | {m.gbps:.0f}" if m else f"dropped: {dropped.get(cfg, 'not run')} | -"
        print(f"| {cfg.block_n} | {cfg.num_warps} | {cells} |")
    if not measured:
        return
    best = min(measured, key=lambda m: m.ms)
    print(f"best: BLOCK_N={best.cfg.block_n}, num_warps={best.cfg.num_warps} ({best.ms:.4f} ms, {best.gbps:.0f} GB/s)")


def print_key_table(key: Key, measured: list[Measurement], ranked, confirmed, default: LaunchConfig, top: int) -> None:
    cases = sorted({m.case for m in measured}, key=lambda c: c.m)
    by = {(m.cfg, m.case): m for m in measured}
    options = _option_columns(key)
    heads = "".join(f" {c.m}x{c.n} ms (GB/s) |" for c in cases)
    print(f"\n{key.name}: {len(ranked)} configurations, {top} fastest by geometric mean (and the heuristic)")
    print(f"| BLOCK_M | BLOCK_N | num_warps |{''.join(f' {h} |' for h in options)}{heads} geomean ms |")
    print("|---" * (4 + len(options) + len(cases)) + "|")
    shown = ranked[:top] + [r for r in ranked[top:] if r[0] == default]
    for cfg, geomean in shown:
        cells = "".join(f" {by[cfg, c].ms:.4f} ({by[cfg, c].gbps:.0f}) |" for c in cases)
        mark = " kept" if cfg == confirmed[0][0] else ""
        mark += " heuristic" if cfg == default else ""
        print(f"| {_cfg_cells(cfg, key)} |{cells} {geomean:.4f}{mark} |")
    leaders = ", ".join(f"{_cfg_cells(cfg, key).replace(' | ', '/')} {ms:.4f}" for cfg, ms in confirmed)
    print(f"confirmed, {len(confirmed)} leaders timed again in turn (the first is kept): {leaders}")
    heuristic = dict(ranked).get(default)
    if heuristic:
        print(f"best vs heuristic: {heuristic / ranked[0][1]:.3f}x (sweep timings)")


def run(args, keys: dict[Key, list[LayerNormCase]], block_table: bool, gpu: str) -> tuple[dict, list, list, list]:
    """({key: (best config, its confirmed geometric mean ms)}, the sweep's measurements, the
    confirmations, dropped compiles)."""
    from kernelgate.tune.compile import CompileTask, compile_all

    tasks = {
        CompileTask(k.variant, k.direction, k.dtype, k.n, unit)
        for k in keys
        for unit in compile_units(key_candidates(k))
    }
    if block_table:
        tasks |= {CompileTask("two_pass", "fwd", "float32", BLOCK_TABLE_SHAPE[1], cfg) for cfg in block_table_configs()}
    start = time.perf_counter()
    print(f"\ncompiling {len(tasks)} kernels on {args.jobs} processes", flush=True)
    dropped = {t: r for t, r in compile_all(sorted(tasks, key=str), args.jobs).items() if r is not None}
    if len(dropped) == len(tasks):
        raise SystemExit(f"every kernel failed to compile or launch, e.g.: {next(iter(dropped.values()))}")
    for task, reason in sorted(dropped.items(), key=lambda tr: str(tr[0])):
        print(f"  dropped {task.variant}/{task.direction}/{task.dtype}/{task.n} {task.cfg}: {reason}")

    def usable(key: Key, cfg: LaunchConfig) -> bool:
        return CompileTask(key.variant, key.direction, key.dtype, key.n, compile_unit(cfg)) not in dropped

    all_measured: list[Measurement] = []
    if block_table:
        key = Key("two_pass", "fwd", "float32", BLOCK_TABLE_SHAPE[1])
        tensors = CaseTensors.make(LayerNormCase(*BLOCK_TABLE_SHAPE), key.variant, key.direction)
        configs = [c for c in block_table_configs() if usable(key, c)]
        block_measured = time_configs(key, tensors, configs, args.warmup_ms, args.rep_ms)
        all_measured += block_measured
        block_dropped = {
            c: dropped[CompileTask(key.variant, "fwd", "float32", key.n, c)]
            for c in block_table_configs()
            if c not in configs
        }
        print_block_table(block_measured, block_dropped, gpu)

    best: dict[Key, tuple[LaunchConfig, float]] = {}
    all_confirmed: list[Measurement] = []
    timed_start = time.perf_counter()
    for i, (key, cases) in enumerate(keys.items(), 1):
        measured = time_on_shapes(key, cases, [c for c in key_candidates(key) if usable(key, c)], args)
        leaders = [cfg for cfg, _ in ranked_by_geomean(measured)[:REFINED_LEADERS]]
        measured += time_on_shapes(key, cases, refinements(key.variant, key.direction, leaders), args)
        all_measured += measured
        ranked = ranked_by_geomean(measured)
        if not ranked:
            print(f"\n{key.name}: no usable configuration; the heuristic stays")
            continue
        confirmed = confirm_leaders(key, cases, [cfg for cfg, _ in ranked[:CONFIRMED_LEADERS]])
        all_confirmed += confirmed
        confirmed_ranked = ranked_by_geomean(confirmed)
        best[key] = confirmed_ranked[0]
        default = heuristic_config(key.variant, key.direction, DTYPES[key.dtype], key.n)
        print_key_table(key, measured, ranked, confirmed_ranked, default, args.top)
        spent = time.perf_counter() - timed_start
        print(
            f"[{i}/{len(keys)} keys, {time.perf_counter() - start:.0f} s, ~{spent / i * (len(keys) - i):.0f} s left]",
            flush=True,
        )
    return best, all_measured, all_confirmed, [(t, r) for t, r in dropped.items()]


def auto_choices(best: dict[Key, tuple[LaunchConfig, float]]) -> dict[str, str]:
    """``auto/...`` table entries: for each (direction, dtype, N) swept with both variants, the one
    whose best configuration has the lower geometric-mean time, where it is not what
    ``heuristic_variant`` picks anyway."""
    fastest: dict[tuple, tuple[float, str]] = {}
    swept: dict[tuple, int] = {}
    for key, (_, geomean) in best.items():
        slot = (key.direction, key.dtype, key.n)
        swept[slot] = swept.get(slot, 0) + 1
        fastest[slot] = min(fastest.get(slot, (math.inf, "")), (geomean, key.variant))
    return {
        tuned_key("auto", direction, DTYPES[dtype], n): fastest[direction, dtype, n][1]
        for (direction, dtype, n), count in swept.items()
        if count > 1 and fastest[direction, dtype, n][1] != heuristic_variant(direction, n)
    }


def write_json(path: Path, gpu_info: dict, args, best, auto, measured, confirmed, dropped) -> None:
    def config(cfg: LaunchConfig) -> dict:
        return dataclasses.asdict(cfg)

    def records(ms: list[Measurement]) -> list[dict]:
        return [
            {"key": m.key.name, "shape": f"{m.case.m}x{m.case.n}", "config": config(m.cfg), "ms": m.ms, "gbps": m.gbps}
            for m in ms
        ]

    doc = {
        "device": gpu_info,
        "settings": {
            "warmup_ms": args.warmup_ms,
            "rep_ms": args.rep_ms,
            "timer": "triton.testing.do_bench median, L2 flushed",
        },
        "best": {key.name: config(cfg) for key, (cfg, _) in best.items()},
        "auto": auto,
        "measurements": records(measured),  # the sweep: each configuration timed once per shape
        "confirmed": records(confirmed),  # each key's leaders timed again in turn; "best" is the fastest of them
        "dropped": [
            {"key": tuned_key(t.variant, t.direction, DTYPES[t.dtype], t.n), "config": config(t.cfg), "reason": r}
            for t, r in dropped
        ],
    }
    path.write_text(json.dumps(doc, indent=1) + "\n")


def read_measurements(path: Path) -> list[Measurement]:
    """The measurements of a ``--json`` file (``write_json``'s), e.g. to score a heuristic against a
    recorded sweep."""
    measured = []
    for m in json.loads(path.read_text())["measurements"]:
        variant, direction, dtype, n = m["key"].split("/")
        rows, cols = map(int, m["shape"].split("x"))
        key = Key(variant, direction, dtype, int(n))
        measured.append(Measurement(key, LayerNormCase(rows, cols, dtype), LaunchConfig(**m["config"]), m["ms"]))
    return measured


def parse_args(argv=None):
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=["fused", "two_pass"], choices=["fused", "two_pass"])
    parser.add_argument(
        "--shapes", nargs="+", type=cli.shape, default=shape_names(), help="MxN (default: every benchmark shape)"
    )
    parser.add_argument("--dtypes", nargs="+", default=BENCH_DTYPES, choices=BENCH_DTYPES)
    parser.add_argument("--directions", nargs="+", default=["fwd", "bwd"], choices=["fwd", "bwd"])
    parser.add_argument("--no-block-table", action="store_true", help="skip the two_pass block table")
    parser.add_argument("--jobs", type=cli.positive_int, default=default_jobs(14), help="compile processes")
    parser.add_argument("--warmup-ms", type=cli.positive_float, default=WARMUP_MS)
    parser.add_argument("--rep-ms", type=cli.positive_float, default=REP_MS)
    parser.add_argument("--top", type=cli.positive_int, default=5, help="rows per key table")
    parser.add_argument("--json", type=Path, help="write every measurement (key, shape, config, ms, GB/s) here")
    parser.add_argument("--dry-run", action="store_true", help="print the tables, keep the configs file as is")
    parser.add_argument("--plan", action="store_true", help="print the keys and the time estimate, then stop")
    return parser.parse_args(argv)


def main(argv=None) -> None:
    args = parse_args(argv)
    keys = plan(args.variants, args.directions, args.dtypes, args.shapes)
    block_table = (
        not args.no_block_table
        and "two_pass" in args.variants
        and "fwd" in args.directions
        and "float32" in args.dtypes
    )
    est = estimate_s(keys, block_table, args.jobs, args.rep_ms, args.warmup_ms)
    print(
        f"tune: {len(keys)} keys over {sum(map(len, keys.values()))} (key, shape) pairs"
        f"{' + the block table' if block_table else ''}; "
        f"{est['kernels']} kernels to compile on {args.jobs} processes (~{est['compile_s']:.0f} s), "
        f"{est['timings']} timings at {args.warmup_ms:g}+{args.rep_ms:g} ms (~{est['time_s']:.0f} s): "
        f"estimate ~{(est['compile_s'] + est['time_s']) / 60:.1f} min"
    )
    if args.plan:
        for key, cases in keys.items():
            print(f"  {key.name}: {len(key_candidates(key))} configs x {', '.join(f'{c.m}x{c.n}' for c in cases)}")
        return
    if not torch.cuda.is_available():
        raise SystemExit("nox -s tune times kernels on a GPU; none is visible (--plan shows what it would run)")
    from kernelgate.measure.device_info import device_info

    info = device_info()
    start = time.perf_counter()
    best, measured, confirmed, dropped = run(args, keys, block_table, info["gpu_class"])
    auto = auto_choices(best)
    print(f"\ntuned {len(best)} keys in {time.perf_counter() - start:.0f} s; auto picks: {auto}")
    if args.json:
        write_json(args.json, info, args, best, auto, measured, confirmed, dropped)
        print(f"every measurement written to {args.json}")
    if not args.dry_run:
        path = tuned_file()
        configs = {key.name: cfg for key, (cfg, _) in best.items()}
        write_tuned_table(path, with_tuned(read_tuned_table(path), info["gpu_class"], configs, auto))
        print(f"best configurations kept in {path} under {info['gpu_class']}")


if __name__ == "__main__":
    main()
