"""The launch configurations ``nox -s tune`` tries for each LayerNorm key.

Wide enough to matter (rows per program, chunk size for two_pass, for fused a
non-power-of-two row whole or in two pieces, 1 to 16 warps; for the fused forward
whether w and b load up front and, 16-bit, the statistics in one reduction; for the
backward the persistent grid size and, fused, how many row blocks' loads are in flight, then
whether the leaders' grids are balanced; for both fused kernels, how far ahead the leaders
prefetch rows into L2),
pruned to tiles a memory-bound kernel can use well, so that every key of the
benchmark suite tunes in minutes:

* each thread holds at least one 16-byte access of each of the tile's pieces
  (fewer elements would leave lanes loading the same data twice; a narrower
  tail makes the compiler move the head's whole tile into the tail's layout
  through shared memory every row, 1.27-1.53x slower on an H200), and at most
  ``MAX_BYTES_PER_THREAD`` of input per tensor (past that the fp32 working set no
  longer fits in registers at useful occupancy, and spills);
* the backward's persistent grid never asks for more warps per SM than can be
  resident at once.

Configurations that still spill or do not fit are dropped after compiling.
"""

import dataclasses
import itertools

import torch

from kernelgate.kernels.layer_norm.config import (
    FUSED_BWD_REGISTER_LANES,
    FUSED_MAX_N,
    MAX_ROW_SLICES,
    LaunchConfig,
    cdiv,
    fused_tail_n,
    heuristic_config,
    next_power_of_2,
    prev_power_of_2,
)

WARPS = (1, 2, 4, 8, 16)
ROWS = (1, 2, 4, 8, 16)
TWO_PASS_BLOCK_N = (256, 512, 1024, 2048, 4096, 8192)
PROGRAMS_PER_SM = (1, 2, 4, 8)
# Triton's loop pipeliner keeps num_stages - 1 row blocks (fused) or chunks (two_pass) in flight.
# On an H200 2 was slower than 1 for every 16-bit fused key, and for two_pass at widths 6144-32768
# but one (0.92-0.95x; 16-bit 32768 1.05x, where 3 ran 1.26x), so it is not swept.
FUSED_BWD_STAGES = (1, 3, 4)
TWO_PASS_BWD_STAGES = (1, 3)
MAX_RESIDENT_WARPS = 64  # per SM on sm_80 and sm_90

# Per thread and per tensor, counted in fp32 (the kernels compute in fp32): 32
# values forward; the backward keeps x, dy, xhat and g live at once, so half as
# many. The fused kernels hold the whole row, and fewer warps are only possible
# with more per thread: twice as much (the compile step drops what spills), and a quarter
# more, so that a row of a power-of-two piece plus a quarter-width tail (N = 5000: 4096 +
# 1024) gets the warp counts its head alone would (forward 2 warps, 80 values; backward 4).
MAX_BYTES_PER_THREAD = {("two_pass", "fwd"): 128, ("two_pass", "bwd"): 64, ("fused", "fwd"): 320, ("fused", "bwd"): 160}

# The two-pass block table: two_pass forward, fp32 4096x4096, BLOCK_N x num_warps, one row per program.
BLOCK_TABLE_SHAPE = (4096, 4096)
BLOCK_TABLE_BLOCK_N = (512, 1024, 2048, 4096, 8192)
BLOCK_TABLE_WARPS = (2, 4, 8)


def block_table_configs() -> list[LaunchConfig]:
    return [
        LaunchConfig(1, block_n, warps) for block_n, warps in itertools.product(BLOCK_TABLE_BLOCK_N, BLOCK_TABLE_WARPS)
    ]


def variants_for(n: int, variants) -> list[str]:
    """The variants a launcher may use for rows of ``n`` (fused only up to FUSED_MAX_N)."""
    return [v for v in variants if v != "fused" or n <= FUSED_MAX_N]


def _fits(pieces: list[int], warps: int, variant: str, direction: str, element_bytes: int) -> bool:
    """Each of the tile's pieces (a tail piece: the row's remainder) gives each thread whole
    16-byte accesses, so both share one layout; all of them together fit."""
    threads = 32 * warps
    min_elements = 16 // element_bytes  # one 16-byte access
    max_elements = MAX_BYTES_PER_THREAD[variant, direction] // 4
    vectors = all(p % threads == 0 and p // threads >= min_elements for p in pieces)
    return vectors and sum(pieces) <= max_elements * threads


def _pieces(variant: str, n: int, rows: int, block_n: int) -> list[int]:
    tail = fused_tail_n(n, block_n) if variant == "fused" else 0
    return [rows * block_n] + ([rows * tail] if tail else [])


def _backward_stages(variant: str, n: int, block_n: int) -> tuple[int, ...]:
    """The pipeline depths a backward tile is swept at. two_pass pipelines rows of three chunks or more
    past FUSED_BWD_REGISTER_LANES, where it may be auto's backward and the heuristic's partial-sum tiles load
    two chunks ahead (16-bit 10240: three of 4096). At 6144 (H200) two and three chunks gained nothing, and
    sweeping narrower rows would take the default sweep past ten minutes."""
    if variant == "fused":
        return FUSED_BWD_STAGES
    return TWO_PASS_BWD_STAGES if n > FUSED_BWD_REGISTER_LANES and cdiv(n, block_n) >= 3 else (1,)


def candidates(variant: str, direction: str, dtype: torch.dtype, n: int) -> list[LaunchConfig]:
    """Every configuration to try for one key, the heuristic one included (so a
    tuned entry is never slower than the default it replaces, as measured)."""
    if variant == "fused" and direction == "bwd" and n > FUSED_BWD_REGISTER_LANES:
        return _row_slice_candidates(dtype, n)
    if variant == "fused":
        # A non-power-of-two row whole, or as two power-of-two pieces (fused_tail_n).
        block_ns = sorted({next_power_of_2(n), prev_power_of_2(n)})
    else:
        # Chunks from a quarter of the row (but 512 is short enough for any row: each chunk
        # ends in a cross-warp reduction) up to the whole row.
        row = next_power_of_2(n)
        block_ns = [b for b in TWO_PASS_BLOCK_N if min(512, row // 4) <= b <= row]
    tiles = [
        LaunchConfig(rows, block_n, warps)
        for block_n, rows, warps in itertools.product(block_ns, ROWS, WARPS)
        if _fits(_pieces(variant, n, rows, block_n), warps, variant, direction, dtype.itemsize)
    ]
    if direction == "bwd":
        tiles = [
            LaunchConfig(t.block_m, t.block_n, t.num_warps, programs, num_stages)
            for t in tiles
            for programs in PROGRAMS_PER_SM
            for num_stages in _backward_stages(variant, n, t.block_n)
            if programs * t.num_warps <= MAX_RESIDENT_WARPS
        ]
    if variant == "two_pass" and direction == "bwd" and n > FUSED_BWD_REGISTER_LANES:
        # Where auto runs it: dw and db also by the column kernel (column_grads), after a dx-only row kernel
        # of one or two rows a step (the only row counts it ran fastest at on an H100).
        tiles += [dataclasses.replace(t, column_grads=True) for t in tiles if t.block_m <= 2]
    if variant == "fused":
        # Both pay in registers what they save in latency; which wins depends on the tile (on an H200
        # each was 0.70-1.09x the plain forward).
        # The forward's single reduction is too inexact for fp32; the backward's is exact.
        singles = (False, True) if direction == "bwd" or dtype.itemsize == 2 else (False,)
        preloads = (False, True) if direction == "fwd" else (False,)
        tiles = [
            dataclasses.replace(t, preload_affine=preload, single_reduction=single)
            for t in tiles
            for preload in preloads
            for single in singles
        ]
    default = heuristic_config(variant, direction, dtype, n)
    return tiles if default in tiles else [*tiles, default]


def _row_slice_candidates(dtype: torch.dtype, n: int) -> list[LaunchConfig]:
    """The fused backward of a row wider than a program's registers: the row in slices of 4096 or 8192
    lanes (at most MAX_ROW_SLICES), one row a step at one program per SM, the heuristic's included."""
    tiles = [
        LaunchConfig(1, block_n, warps, programs_per_sm=1, num_stages=stages, single_reduction=single,
                     row_slices=cdiv(n, block_n))
        for block_n, warps, stages, single in itertools.product(
            (4096, FUSED_BWD_REGISTER_LANES), WARPS, FUSED_BWD_STAGES, (False, True)
        )
        if cdiv(n, block_n) <= MAX_ROW_SLICES and _fits([block_n], warps, "fused", "bwd", dtype.itemsize)
    ]  # fmt: skip
    default = heuristic_config("fused", "bwd", dtype, n)
    return tiles if default in tiles else [*tiles, default]


REFINED_LEADERS = 8  # per key: the configurations ranked first, tried again with refinements()
# The fused kernels' L2 prefetch distances, in row blocks per SM, tried on their leading configurations.
# On an H100 the forward's best was about one resident grid ahead (2-5 per SM), and at 10 every case
# ran 0.6-0.9x as fast as without; on an H200 three keys of short rows took 8, the farthest then tried.
PREFETCH_PER_SM = (1, 2, 3, 4, 5, 6, 8, 12, 16)
# Leaders tried with each distance. The forward tries every leader: an option can lose alone and
# win with the prefetch (H200, bf16 N = 8192: w and b preloaded ranked 6th without it; with it,
# 4096x8192 ran 1.05x as fast as the table's pick). The backward, on either grid, on two (its
# sweep's time).
PREFETCH_LEADERS = {"fwd": REFINED_LEADERS, "bwd": 2}


def refinements(variant: str, direction: str, leaders: list[LaunchConfig]) -> list[LaunchConfig]:
    """Variations of a key's leading configurations, timed after the first ranking. They change a
    few percent either way, so trying them on every tile would multiply the sweep for little: for
    the fused backward, the balanced persistent grid (config.persistent_programs; the same kernels);
    for both fused kernels, the L2 prefetch at each distance (one more kernel per leader, compiled
    where it is timed), in the backward on either grid."""
    if variant != "fused":
        return []
    grids = (False, True) if direction == "bwd" else (False,)
    prefetching = [
        dataclasses.replace(cfg, balanced_grid=balanced, prefetch_per_sm=ahead)
        for cfg in leaders[: PREFETCH_LEADERS[direction]]
        for balanced in grids
        for ahead in PREFETCH_PER_SM
    ]
    balanced = [dataclasses.replace(cfg, balanced_grid=True) for cfg in leaders] if direction == "bwd" else []
    return balanced + prefetching


def compile_unit(cfg: LaunchConfig) -> LaunchConfig:
    """The configuration that names ``cfg``'s kernel: the persistent grid's size and the prefetch
    distance are runtime arguments; whether it prefetches is in the code."""
    return dataclasses.replace(
        cfg,
        programs_per_sm=LaunchConfig.programs_per_sm if cfg.row_slices == 1 else 1,  # slices: one program per SM
        balanced_grid=LaunchConfig.balanced_grid,
        prefetch_per_sm=1 if cfg.prefetch_per_sm > 0 else 0,
    )


def compile_units(configs) -> list[LaunchConfig]:
    """The distinct kernels among ``configs``."""
    return list(dict.fromkeys(map(compile_unit, configs)))
