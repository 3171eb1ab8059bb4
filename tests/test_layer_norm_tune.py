"""``nox -s tune``: what it tries, what it covers, how it picks and how it keeps the
result; and, on a GPU, that it times what the suite times."""

import dataclasses
import itertools
import json
import math
import statistics
from pathlib import Path

import pytest
import torch

from kernelgate.cases.layer_norm import BENCH_DTYPES, BENCH_SHAPES, DTYPES, LAYER_NORM_VARIANTS, LayerNormCase
from kernelgate.kernels.layer_norm.config import (
    FUSED_MAX_N,
    LaunchConfig,
    fused_tail_n,
    heuristic_config,
    launch_config,
    launch_entries,
    read_tuned_table,
    resolve_variant,
    tuned_key,
    tuned_table,
    with_tuned,
    write_tuned_table,
)
from kernelgate.kernels.layer_norm.ops import select_variant
from kernelgate.measure.workloads import BATCH_CALLS
from kernelgate.tune import layer_norm as tune
from kernelgate.tune.space import (
    MAX_RESIDENT_WARPS,
    PREFETCH_LEADERS,
    PREFETCH_PER_SM,
    REFINED_LEADERS,
    block_table_configs,
    candidates,
    compile_unit,
    refinements,
)


def test_block_table_is_block_n_by_warps():
    got = {(c.block_m, c.block_n, c.num_warps) for c in block_table_configs()}
    assert got == {(1, b, w) for b in (512, 1024, 2048, 4096, 8192) for w in (2, 4, 8)}
    assert len(block_table_configs()) == 15


def test_default_plan_covers_every_key_the_benchmarks_look_up():
    args = tune.parse_args([])
    planned = {key.name for key in tune.plan(args.variants, args.directions, args.dtypes, args.shapes)}
    looked_up = {
        tuned_key(select_variant(variant, direction, DTYPES[dtype], n, None), direction, DTYPES[dtype], n)
        for m, n in BENCH_SHAPES
        for dtype in BENCH_DTYPES
        for direction in ("fwd", "bwd")
        for variant in LAYER_NORM_VARIANTS
    }
    assert looked_up <= planned
    assert all(int(name.rsplit("/", 1)[1]) <= FUSED_MAX_N for name in planned if name.startswith("fused/"))


def test_shapes_with_the_same_row_length_share_a_key():
    keys = tune.plan(["two_pass"], ["fwd"], ["float32"], ["4096x4096", "16384x4096", "4096x1024"])
    assert {k.n: [(c.m, c.n) for c in cases] for k, cases in keys.items()} == {
        1024: [(4096, 1024)],
        4096: [(4096, 4096), (16384, 4096)],
    }


def test_fused_is_not_planned_past_its_row_limit():
    keys = tune.plan(["fused", "two_pass"], ["fwd"], ["float32"], [f"4x{FUSED_MAX_N + 1}"])
    assert [k.variant for k in keys] == ["two_pass"]


@pytest.mark.parametrize("direction", ["fwd", "bwd"])
@pytest.mark.parametrize("variant", ["fused", "two_pass"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", sorted({n for _, n in BENCH_SHAPES}))
def test_candidates_are_sensible(variant, direction, dtype, n):
    dt = DTYPES[dtype]
    configs = candidates(variant, direction, dt, n)
    row = 1 << (n - 1).bit_length()
    # The fused kernels may split a non-power-of-two row: a power-of-two first piece, then a tail.
    fused_tiles = {row, 1 << (n.bit_length() - 1)}
    assert len(configs) == len(set(configs)), "duplicates"
    assert heuristic_config(variant, direction, dt, n) in configs, "the default must be measured beside the others"
    assert len(configs) >= 3 and len({c.num_warps for c in configs}) >= 2
    for c in configs:
        if variant == "fused":
            assert c.block_n in fused_tiles
            # A tail piece keeps the head's 16-byte vectors (else the tile changes layout every row).
            tail = c.block_m * fused_tail_n(n, c.block_n)
            assert tail == 0 or tail // (32 * c.num_warps) >= 16 // dt.itemsize, c
        else:
            assert c.block_n <= row
        assert c.num_warps in (1, 2, 4, 8, 16)
        if direction == "bwd":
            assert c.programs_per_sm * c.num_warps <= MAX_RESIDENT_WARPS
    if direction == "bwd":
        assert len({c.programs_per_sm for c in configs}) >= 2, "the persistent grid size is part of the backward space"
    # Only the backwards pipeline their loads (in the forwards num_stages would be ignored); two_pass
    # only past the benchmark's widths (below).
    pipelined = direction == "bwd" and variant == "fused"
    assert ({c.num_stages for c in configs} != {1}) == pipelined
    assert {c.balanced_grid for c in configs} == {False}, "a refinement of the leaders, not a candidate"
    # The heuristic's own prefetch distance (every forward's) is measured as it is; others are refinements.
    heuristic = heuristic_config(variant, direction, dt, n)
    assert {c.prefetch_per_sm for c in configs if c != heuristic} == {0}, "a refinement of the leaders, not a candidate"
    # The fused kernels' options; the forward's one reduction only where it is exact enough (16-bit).
    fused_fwd = variant == "fused" and direction == "fwd"
    single = variant == "fused" and (direction == "bwd" or dtype != "float32")
    assert {c.preload_affine for c in configs} == ({False, True} if fused_fwd else {False})
    assert {c.single_reduction for c in configs} == ({False, True} if single else {False})


def test_the_fused_backward_leaders_are_tried_again_on_a_balanced_grid():
    leaders = candidates("fused", "bwd", torch.bfloat16, 4096)[:REFINED_LEADERS]
    balanced = [c for c in refinements("fused", "bwd", leaders) if c.prefetch_per_sm == 0]
    assert all(c.balanced_grid for c in balanced)
    assert [dataclasses.replace(c, balanced_grid=False) for c in balanced] == leaders
    assert list(map(compile_unit, balanced)) == list(map(compile_unit, leaders)), "the same kernels, nothing to compile"
    assert refinements("two_pass", "fwd", leaders) == refinements("two_pass", "bwd", leaders) == []


@pytest.mark.parametrize(("direction", "n"), [("fwd", 5000), ("bwd", 5000), ("bwd", 16384)])
def test_the_fused_leaders_are_tried_again_with_each_prefetch_distance(direction, n):
    # 16384: the backward's leaders are row slices, which prefetch their own slice of a row.
    leaders = candidates("fused", direction, torch.float16, n)[:REFINED_LEADERS]
    assert all((c.row_slices > 1) == (n == 16384) for c in leaders)
    prefetching = [c for c in refinements("fused", direction, leaders) if c.prefetch_per_sm]
    # The backward on either persistent grid.
    grids = (False, True) if direction == "bwd" else (False,)
    tried = leaders[: PREFETCH_LEADERS[direction]]
    assert len(prefetching) == PREFETCH_LEADERS[direction] * len(grids) * len(PREFETCH_PER_SM)
    assert {
        (dataclasses.replace(c, prefetch_per_sm=0, balanced_grid=False), c.balanced_grid, c.prefetch_per_sm)
        for c in prefetching
    } == set(itertools.product(tried, grids, PREFETCH_PER_SM))
    assert 0 not in PREFETCH_PER_SM, "without prefetch, the leader itself was timed already"
    kernels = {dataclasses.replace(compile_unit(c), prefetch_per_sm=1) for c in tried}
    assert set(map(compile_unit, prefetching)) == kernels, "one more kernel per leader, whatever the distance"


def test_a_sweep_written_to_json_reads_back(tmp_path):
    args = tune.parse_args([])
    short, tall = LayerNormCase(4096, 1024, "bfloat16"), LayerNormCase(32768, 1024, "bfloat16")
    key = tune.Key("fused", "bwd", "bfloat16", 1024)
    measured = [tune.Measurement(key, case, LaunchConfig(4, 1024, 4, balanced_grid=True), ms)
                for case, ms in ((short, 0.0127), (tall, 0.054))]  # fmt: skip
    confirmed = [dataclasses.replace(measured[0], ms=0.0131)]
    path = tmp_path / "sweep.json"
    tune.write_json(path, {"name": "test"}, args, {}, {}, measured, confirmed, [])
    assert tune.read_measurements(path) == measured, "the sweep, not its confirmations"
    assert json.loads(path.read_text())["confirmed"][0]["ms"] == 0.0131


def test_the_leaders_are_confirmed_round_by_round_and_an_outlier_loses(monkeypatch):
    """The sweep timed ``lucky`` once at 0.9 (an outlier); timed again in turn with ``steady``,
    its rounds read 1.1 and it loses: each confirmed time is the median of its rounds."""
    lucky, steady = LaunchConfig(1, 4096, 4, single_reduction=True), LaunchConfig(1, 4096, 4)
    rounds = {lucky: [1.1, 1.2, 1.1], steady: [1.0, 1.0, 1.05]}
    calls = []

    class FakeTensors:
        def runner(self, variant, direction, cfg):
            return cfg

    def interleaved_ms(fns):
        calls.append(list(fns))
        return {cfg: rounds[runner] for cfg, runner in fns.items()}

    monkeypatch.setattr(tune.CaseTensors, "make", classmethod(lambda cls, case, variant, direction: FakeTensors()))
    monkeypatch.setattr(tune.timing, "interleaved_ms", interleaved_ms)
    cases = [LayerNormCase(4096, 5000, "float16")]
    key = tune.Key("fused", "fwd", "float16", 5000)
    confirmed = tune.confirm_leaders(key, cases, [lucky, steady])
    assert calls == [[lucky, steady]], "both leaders in the same rounds, per shape"
    assert {m.cfg: m.ms for m in confirmed} == {lucky: 1.1, steady: 1.0}
    assert tune.ranked_by_geomean(confirmed)[0][0] == steady


# Recorded sweeps, reduced to each key's three best configurations and the heuristic's: every key on
# the H100 (the forward timed storing its statistics, then as inference like the suite's fwd case),
# 4096x5000's forward on the H100 with the fused space widened to 80 values a thread, the fused
# backward on the H200 (single reduction, then the balanced grid), every key of the model widths
# (8192 rows, N from 768 to 32768, none of them benchmark keys) on the H200, where no fused backward
# configuration at 16384 compiled without spilling, and the two_pass backward at 6144-32768 on the
# H200 with its chunk loops pipelined (those keys' five best and the heuristic's; the model widths'
# sweep, made before, holds two_pass backwards up to 6144 only), and rows past 16384 on the H100: the
# fused forward at 32768 (1024 to 32768 rows) and at 20480, a width no rule was written from, and the
# two_pass backward's tiles at 16384 and 32768, then its 16-bit keys there with column_grads in the space
# (every configuration, on the H100), and the fused forward with the L2 prefetch in the heuristic, at
# 768-8192, 16384 and 32768 on the H100 and at the model widths up to 16384 on the H200 (each key's three
# best, the heuristic's and its twin without the prefetch), and the 16-bit fused backward in row slices at
# 12288-32768 on both GPUs (the prefetch distance, the single reduction, warps, stages and slice widths,
# each configuration's repeats averaged), and the fused backward at the model widths up to 6144 without a
# table entry on both GPUs, each key's heuristic configuration on a balanced grid and not, and the fused
# forward at 1024-8192 on both GPUs, each key's heuristic configuration with w and b preloaded and not
# (both the median of five interleaved rounds), and the fused forward's whole space at short rows (384-2048
# columns, 2048-32768 rows) on both GPUs (each shape's five best and the heuristic's before short rows ran
# small programs), then at widths the small programs were not fitted on (320, 576, 960 and 1408: each
# shape's five best, the old heuristic's and the new one's), then the old heuristic configuration against
# the small program on each changed key (the median of three interleaved rounds), and the fused forward's
# options on the H100 at fp32 12288 and 16384 and 16-bit 32768 (warps, w and b preloaded, the prefetch and,
# 16-bit, the single reduction; the median of three interleaved rounds), and the fp32 backward in row slices
# at 12288-32768, swept on the H200 (each shape's five best and the heuristic's), then four of its
# configurations on the H100 (the median of two interleaved rounds), and the fused forward at 16384 and
# 32768 on the H100 (2048 and 8192 rows), the heuristic's configuration at L2 prefetch distances from none
# to one and a half waves (the median of five interleaved rounds), then the same at widths the rule was not
# written from, fp32 20480 on the H200 and fp32 18432 and bf16 25600 on the H100; with the keys each holds.
RECORDED_SWEEPS = Path(__file__).parent / "fixtures" / "recorded_sweeps.json"
SWEEP_KEYS = {
    "h100-every-key": 48,
    "h100-every-key-forward-as-inference": 48,
    "h100-4096x5000-wider-fused-space": 6,
    "h200-fused-backward-single-reduction": 12,
    "h200-fused-backward-balanced-grid": 12,
    "h200-model-widths": 69,
    "h200-two-pass-backward-stages": 9,
    "h100-wide-rows": 12,
    "h200-wide-rows": 6,
    "h100-wide-rows-column-grads": 4,
    "h100-fused-forward-prefetch": 32,
    "h200-fused-forward-prefetch": 18,
    "h100-wide-16bit-row-slices": 6,
    "h200-wide-16bit-row-slices": 6,
    "h100-fused-backward-balanced-grid-model-widths": 15,
    "h200-fused-backward-balanced-grid-model-widths": 15,
    "h100-fused-forward-preload": 15,
    "h200-fused-forward-preload": 15,
    "h100-short-rows": 33,
    "h200-short-rows": 33,
    "h100-short-rows-held-out": 12,
    "h200-short-rows-held-out": 12,
    "h100-short-rows-rule": 40,
    "h200-short-rows-rule": 40,
    "h100-wide-forward-options": 4,
    "h200-fp32-row-slices": 3,
    "h100-fp32-row-slices-options": 3,
    "h100-wide-forward-prefetch-distance": 6,
    "h200-held-out-forward-prefetch-distance": 1,
    "h100-held-out-forward-prefetch-distance": 2,
}


def recorded_sweep(name: str) -> list[tune.Measurement]:
    measured = []
    for row in json.loads(RECORDED_SWEEPS.read_text())[name]:
        variant, direction, dtype, n = row["key"].split("/")
        case = LayerNormCase(*map(int, row["shape"].split("x")), dtype)
        measured.append(
            tune.Measurement(
                tune.Key(variant, direction, dtype, int(n)), case, LaunchConfig(**row["config"]), row["ms"]
            )
        )
    return measured


@pytest.mark.parametrize("sweep", sorted(SWEEP_KEYS))
def test_untuned_configs_are_near_the_best_of_recorded_sweeps(sweep):
    """What a key the tuned table lacks runs (the heuristic), as measured among the configurations
    of a recorded sweep: within 1.13x of each key's best. A key whose heuristic changed after a sweep
    must have the new one measured in another recorded sweep."""
    measured = recorded_sweep(sweep)
    keys = sorted({m.key for m in measured}, key=lambda k: k.name)
    assert len(keys) == SWEEP_KEYS[sweep]
    for key in keys:
        ranked = dict(tune.ranked_by_geomean([m for m in measured if m.key == key]))
        heuristic = heuristic_config(key.variant, key.direction, DTYPES[key.dtype], key.n)
        if heuristic not in ranked:
            elsewhere = [s for s in SWEEP_KEYS if any(m.key == key and m.cfg == heuristic for m in recorded_sweep(s))]
            assert elsewhere, f"{key.name}: no recorded sweep measured the heuristic configuration"
            continue
        assert ranked[heuristic] <= 1.13 * min(ranked.values()), key.name


@pytest.mark.parametrize(
    "sweep", ["h100-fused-backward-balanced-grid-model-widths", "h200-fused-backward-balanced-grid-model-widths"]
)
def test_the_heuristic_balances_the_backward_grid_where_it_was_measured_faster(sweep):
    """At two programs an SM the balanced grid ran faster on every key of both GPUs' sweeps, and the
    heuristic takes it there; at one it was a wash either way, and the heuristic leaves it off."""
    measured = recorded_sweep(sweep)
    for key in sorted({m.key for m in measured}, key=lambda k: k.name):
        heuristic = heuristic_config(key.variant, key.direction, DTYPES[key.dtype], key.n)
        ms = {m.cfg.balanced_grid: m.ms for m in measured if m.key == key}
        assert heuristic.balanced_grid == (heuristic.programs_per_sm > 1), key.name
        if heuristic.programs_per_sm > 1:
            assert ms[True] < ms[False], key.name


def test_the_heuristic_preloads_w_and_b_where_both_gpus_measured_it_faster():
    """Each fused forward key of both GPUs' preload sweeps: the heuristic preloads w and b exactly where
    the geometric mean over both GPUs' shapes of (time without / time with) is above 1."""
    sweeps = ["h100-fused-forward-preload", "h200-fused-forward-preload"]
    ms = {(s, m.key, m.case, m.cfg.preload_affine): m.ms for s in sweeps for m in recorded_sweep(s)}
    for key in sorted({key for _, key, _, _ in ms}, key=lambda k: k.name):
        heuristic = heuristic_config(key.variant, key.direction, DTYPES[key.dtype], key.n)
        ratios = [ms[s, k, case, False] / ms[s, k, case, True] for s, k, case, on in ms if k == key and on]
        gain = math.exp(statistics.fmean(map(math.log, ratios)))
        assert heuristic.preload_affine == (gain > 1), f"{key.name}: {gain:.3f}x with w and b preloaded"


@pytest.mark.parametrize(
    ("sweep", "wide_keys"),
    [
        ("h100-wide-forward-prefetch-distance", 4),
        ("h200-held-out-forward-prefetch-distance", 1),
        ("h100-held-out-forward-prefetch-distance", 2),
    ],
)
def test_the_heuristic_prefetches_rows_wider_than_its_distance_a_fraction_of_a_wave_ahead(sweep, wide_keys):
    """Where one row block holds more than FORWARD_PREFETCH_BYTES (fp32 16384-32768, 16-bit 32768), the fused
    forward prefetches that fraction of a wave ahead: on every shape of the sweeps faster than a whole wave
    ahead and than no prefetch, and within 1% of the fastest distance, at widths held out of the rule too."""
    measured = recorded_sweep(sweep)
    fractions = 0
    for key in sorted({m.key for m in measured}, key=lambda k: k.name):
        heuristic = heuristic_config(key.variant, key.direction, DTYPES[key.dtype], key.n)
        if heuristic.prefetch_per_sm >= 1:  # 16-bit 16384: a row block of 32 KiB, one wave ahead
            continue
        fractions += 1
        for case in sorted({m.case for m in measured if m.key == key}, key=lambda c: c.m):
            ms = {m.cfg.prefetch_per_sm: m.ms for m in measured if m.key == key and m.case == case}
            label = f"{key.name} {case.name}"
            assert ms[heuristic.prefetch_per_sm] < min(ms[0], ms[1]), label
            assert ms[heuristic.prefetch_per_sm] <= 1.01 * min(ms.values()), label
    assert fractions == wide_keys


@pytest.mark.parametrize("gpu", ["h100", "h200"])
def test_the_heuristic_runs_short_forward_rows_in_small_programs_where_they_were_measured(gpu):
    """Each fused forward key the small-program rule changed (256-1536 columns) was timed against the tile it
    replaced on both GPUs: the heuristic's configuration is the small program, at most 1.5% slower than the
    old tile on any shape (up to 1.25x faster)."""
    measured = recorded_sweep(f"{gpu}-short-rows-rule")
    for key in sorted({m.key for m in measured}, key=lambda k: k.name):
        heuristic = heuristic_config(key.variant, key.direction, DTYPES[key.dtype], key.n)
        assert heuristic.num_warps <= 2, key.name
        for case in sorted({m.case for m in measured if m.key == key}, key=lambda c: c.m):
            ms = {m.cfg: m.ms for m in measured if m.key == key and m.case == case}
            (old,) = set(ms) - {heuristic}
            assert ms[heuristic] <= 1.015 * ms[old], f"{key.name} {case.name}"


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("n", [12288, 16384, 32768])
def test_wide_two_pass_backward_sweeps_pipelined_chunk_loops(n, dtype):
    configs = candidates("two_pass", "bwd", DTYPES[dtype], n)
    assert heuristic_config("two_pass", "bwd", DTYPES[dtype], n) in configs
    assert {c.num_stages for c in configs} == {1, 3}
    # A row of fewer than three chunks is swept unpipelined.
    assert all(c.num_stages == 1 for c in configs if -(-n // c.block_n) < 3)


def _m(case, cfg, ms):
    return tune.Measurement(tune.Key("fused", "fwd", "float32", case.n), case, cfg, ms)


def test_best_is_the_lowest_geometric_mean_over_shapes():
    short, tall = LayerNormCase(4096, 1024), LayerNormCase(32768, 1024)
    a, b, c = LaunchConfig(1, 1024, 4), LaunchConfig(2, 1024, 8), LaunchConfig(4, 1024, 8)
    measured = [
        _m(short, a, 1.0), _m(tall, a, 10.0),  # fastest on the short shape; geomean sqrt(10) = 3.16
        _m(short, b, 1.5), _m(tall, b, 6.0),  # geomean 3.0: the best
        _m(short, c, 0.5),  # never measured on the tall shape: does not qualify
    ]  # fmt: skip
    ranked = tune.ranked_by_geomean(measured)
    assert [cfg for cfg, _ in ranked] == [b, a]
    assert ranked[0][1] == pytest.approx(3.0)


def test_configurations_that_failed_on_a_shape_do_not_qualify():
    short, tall = LayerNormCase(4096, 1024), LayerNormCase(32768, 1024)
    a, b = LaunchConfig(1, 1024, 4), LaunchConfig(2, 1024, 8)
    measured = [_m(short, a, 0.1), _m(tall, a, float("inf")), _m(short, b, 1.0), _m(tall, b, 1.0)]
    assert [cfg for cfg, _ in tune.ranked_by_geomean(measured)] == [b]


def test_merge_keeps_other_gpu_classes_and_keys(tmp_path):
    old = {
        "H100": {"fused/fwd/float32/4096": {"block_m": 1, "block_n": 4096, "num_warps": 8}},
        "H200": {
            "fused/fwd/float32/4096": {"block_m": 1, "block_n": 4096, "num_warps": 8},
            "fused/fwd/float32/1024": {"block_m": 4, "block_n": 1024, "num_warps": 4},
        },
    }
    snapshot = json.loads(json.dumps(old))
    new_cfg = LaunchConfig(2, 4096, 16, programs_per_sm=2)
    merged = with_tuned(old, "H200", {"fused/fwd/float32/4096": new_cfg}, {"auto/bwd/float32/5000": "two_pass"})
    assert old == snapshot, "the table read from disk must not be changed in place"
    assert merged["H100"] == old["H100"]
    assert merged["H200"]["fused/fwd/float32/1024"] == old["H200"]["fused/fwd/float32/1024"]
    assert LaunchConfig(**merged["H200"]["fused/fwd/float32/4096"]) == new_cfg
    # What is written is what the launchers read back.
    path = tmp_path / "tuned.json"
    write_tuned_table(path, merged)
    assert read_tuned_table(path) == merged
    assert select_variant("auto", "bwd", torch.float32, 5000, "H200") == "fused"  # cached before the override
    with tuned_table(path):
        assert select_variant("auto", "bwd", torch.float32, 5000, "H200") == "two_pass", "a stale cached choice"
        assert launch_config("fused", "fwd", torch.float32, 4096, "H200") == new_cfg
        assert launch_config("fused", "fwd", torch.float32, 4096, "H100") == LaunchConfig(1, 4096, 8)
        assert launch_config("fused", "fwd", torch.float32, 8192, "H200") == heuristic_config(
            "fused", "fwd", torch.float32, 8192
        )
        # auto follows the table's choice per direction, and the padding rule elsewhere.
        assert resolve_variant("auto", "bwd", torch.float32, 5000, "H200") == "two_pass"
        assert resolve_variant("auto", "fwd", torch.float32, 5000, "H200") == "fused"
        assert resolve_variant("auto", "bwd", torch.float32, 5000, "H100") == "fused"  # 8192 lanes, 39% masked
        # Past 8192 lanes the fused backward splits a row over programs, where the row fills most of them.
        assert resolve_variant("auto", "bwd", torch.float32, 9000, "H100") == "two_pass"  # two slices, 45% masked
        assert resolve_variant("auto", "bwd", torch.float32, 16384, "H100") == "fused"
        assert resolve_variant("auto", "bwd", torch.float32, 32768, "H100") == "fused"
        assert resolve_variant("auto", "bwd", torch.bfloat16, 16384, "H100") == "fused"
        assert resolve_variant("auto", "bwd", torch.bfloat16, 32768, "H100") == "fused"
        assert resolve_variant("auto", "fwd", torch.float32, 16384, "H100") == "fused"
        assert resolve_variant("auto", "bwd", torch.float32, FUSED_MAX_N + 1, "H100") == "two_pass"
    assert select_variant("auto", "bwd", torch.float32, 5000, "H200") == "fused", "the override outlived its block"
    assert [key for _, key, _ in launch_entries(merged)] == [
        "fused/fwd/float32/4096",
        "fused/fwd/float32/1024",
        "fused/fwd/float32/4096",
    ]


def test_auto_picks_the_variant_with_the_faster_best_config():
    cfg = LaunchConfig(1, 4096, 8)
    best = {
        tune.Key("fused", "fwd", "float32", 5000): (cfg, 0.050),
        tune.Key("two_pass", "fwd", "float32", 5000): (cfg, 0.048),
        tune.Key("fused", "bwd", "float32", 5000): (cfg, 0.090),
        tune.Key("two_pass", "bwd", "float32", 5000): (cfg, 0.115),
        tune.Key("two_pass", "fwd", "float32", 65536): (cfg, 1.0),  # fused cannot hold the row: no choice
    }
    # The backward's pick is the heuristic's anyway (fused), so the table keeps only the forward's.
    assert tune.auto_choices(best) == {"auto/fwd/float32/5000": "two_pass"}


def test_default_run_is_estimated_within_ten_minutes_on_14_processes():
    # A full sweep fits in ten minutes of a 16-core GPU host. The estimate runs high (an H100's whole
    # sweep: 6.8 min estimated, 5.7 taken; the fused forward's keys on an H200: 3.4 estimated, 2.1 taken).
    args = tune.parse_args(["--jobs", "14"])
    keys = tune.plan(args.variants, args.directions, args.dtypes, args.shapes)
    est = tune.estimate_s(keys, True, args.jobs, args.rep_ms, args.warmup_ms)
    assert est["compile_s"] + est["time_s"] <= 600, est


def test_plan_runs_without_a_gpu(capsys):
    tune.main(["--plan"])
    assert "estimate" in capsys.readouterr().out


def test_without_a_gpu_it_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="none is visible"):
        tune.main([])


@pytest.mark.gpu
@pytest.mark.parametrize("direction", ["fwd", "bwd"])
def test_configs_are_timed_as_graphs_of_calls_over_rotated_inputs(direction, cuda_device, monkeypatch):
    from kernelgate.kernels.layer_norm import ops

    case = LayerNormCase(4096, 1024, "bfloat16")
    key = tune.Key("fused", direction, case.dtype, case.n)
    tensors = tune.CaseTensors.make(case, key.variant, direction)
    assert len(tensors.sets) > 1, "a 16 MiB case cycles through several input sets"
    read, outputs = [], []  # each call's x, and its fresh outputs
    forward_launch, layer_norm_bwd = ops.forward_launch, ops.layer_norm_bwd

    def forward(x, w, b, eps, variant, y, *rest):
        read.append(x.data_ptr())
        outputs.append(y)
        return forward_launch(x, w, b, eps, variant, y, *rest)

    def backward(dy, x, *rest):
        read.append(x.data_ptr())
        outputs.append(layer_norm_bwd(dy, x, *rest)[0])
        return outputs[-1]

    monkeypatch.setattr(ops, "forward_launch", forward)
    monkeypatch.setattr(ops, "layer_norm_bwd", backward)
    configs = candidates(key.variant, direction, case.torch_dtype, case.n)[:2]
    runner = tensors.runner(key.variant, direction, configs[0])
    assert runner.calls == max(len(tensors.sets), BATCH_CALLS), "one graph replay: back-to-back calls on every set"
    assert set(read) == {s["x"].data_ptr() for s in tensors.sets}, "some input set was never run"
    captured = outputs[-runner.calls :]  # the graph's own outputs, allocated in its pool
    for out in captured:
        out.fill_(float("nan"))
    runner()
    torch.cuda.synchronize()
    assert all(torch.isfinite(out).all() for out in captured), "a replayed call left its output unwritten"
    measured = tune.time_configs(key, tensors, configs, warmup_ms=1, rep_ms=5)
    assert [m.cfg for m in measured] == configs and all(0 < m.ms < 1 for m in measured), measured


@pytest.mark.gpu
def test_leaders_are_confirmed_on_the_gpu(cuda_device):
    case = LayerNormCase(4096, 1024, "bfloat16")
    key = tune.Key("fused", "fwd", case.dtype, case.n)
    leaders = candidates(key.variant, key.direction, case.torch_dtype, case.n)[:2]
    confirmed = tune.confirm_leaders(key, [case], leaders)
    assert [m.cfg for m in confirmed] == leaders and all(0 < m.ms < 1 for m in confirmed), confirmed
