"""Launch configurations for the LayerNorm kernels.

A configuration is looked up in ``tuned_configs.json`` (written by
``nox -s tune``; ``KERNELGATE_TUNED_CONFIGS=path`` points at another table, e.g.
to try or to inject a slower one) for the current GPU class, variant,
direction, dtype and N; otherwise a heuristic picks one. Launchers, the ahead-of-time code checks and
the tuner all go through ``launch_config`` so they see the same kernels.
"""

import contextlib
import dataclasses
import functools
import json
import os
from pathlib import Path

import torch

# The fused kernels keep a whole row (and, backward, its gradient and the dw/db
# accumulators) in registers. A 32768-wide fp32 forward row takes 32 warps at 32 values
# a thread, in the 64 registers a 1024-thread program gets; past that the compiler spills
# to local memory, so the fused variant refuses larger rows; two_pass takes any N.
FUSED_MAX_N = 32768

# The fused backward's tile stays in registers up to this many lanes (at 16384 every configuration
# spills for sm_90). A wider row is split into slices of this many lanes, one program each
# (row_slices, at most MAX_ROW_SLICES), so that it is still read once.
FUSED_BWD_REGISTER_LANES = 8192
MAX_ROW_SLICES = 4
# auto's backward splits rows from this width on, where they fill three quarters of their slices' lanes
# or more (measured from 12288 up); narrower rows past 8192 lanes run two_pass's backward.
ROW_SLICES_MIN_N = 12288

# Short forward rows run small programs (short_row_tile), fitted on both GPUs' sweeps at 320-2048 columns.
SHORT_ROW_MAX_N = 1536
SHORT_PROGRAM_BYTES = 4096
SHORT_VALUES_PER_THREAD = 48

# How far ahead of its loads the fused forward prefetches rows into L2, per SM (forward_prefetch_per_sm).
FORWARD_PREFETCH_BYTES = 48 * 1024
# Shared memory the heuristic lets the fused backward's prefetched row blocks take
# (sm_80 and sm_90 offer 163 and 227 KiB a block).
PIPELINE_MAX_BYTES = 128 * 1024

TUNED_FILE = Path(__file__).with_name("tuned_configs.json")
# Another table for the whole process, e.g. to try (or inject) configurations. Read once, at import:
# every launch would otherwise pay for reading the environment.
TUNED_ENV = "KERNELGATE_TUNED_CONFIGS"
_tuned_override: str | None = os.environ.get(TUNED_ENV)
VARIANTS = ("fused", "two_pass", "auto")


@dataclasses.dataclass(frozen=True)
class LaunchConfig:
    block_m: int  # rows per program (per loop step for the persistent backward)
    block_n: int  # two_pass: the chunk; fused: the row's tile, or its first piece (fused_tail_n)
    num_warps: int
    programs_per_sm: int = 2  # backward only: persistent grid size
    # Backward only: 1 loads each row block (fused) or chunk (two_pass) when it is reached; n > 1
    # issues the loads n - 1 ahead, through shared memory, so they overlap the reductions.
    num_stages: int = 1
    # Fused forward only: load w and b with x, so their latency overlaps x's rather than following
    # the statistics (more registers held through the reductions).
    preload_affine: bool = False
    # Fused kernels: two row sums in one cross-warp exchange instead of two. Forward, 16-bit inputs
    # only: the sum and the sum of squares (too inexact for fp32's tolerance). Backward, any dtype:
    # the sums of xhat * g and of g (the same additions, exact).
    single_reduction: bool = False
    # Backward only: as few programs as take the same number of row-block steps each (persistent_programs).
    balanced_grid: bool = False
    # Fused only: each program (the forward) or row-block step (the persistent backward) first pulls
    # into L2 the rows this many times the SM count of row blocks later (0: off; below 1, a fraction of
    # a wave); a row slice, its slice of the row this many of its group's steps later. About 48 KiB an SM
    # ahead pays in the forward; further, the rows are evicted before use.
    prefetch_per_sm: float = 0
    # two_pass backward only: the row kernel writes dx alone and a column kernel sums dw and db,
    # reading x and dy once more, instead of each program adding its rows to fp32 partial rows of
    # its own (read and written every step, summed by column_sum_kernel).
    column_grads: bool = False
    # Fused backward only: each row split over this many programs of block_n columns (2 to
    # MAX_ROW_SLICES), which exchange their row sums, so that a row wider than a program's registers
    # is still read once. One row a step, one program per SM, in one cooperative launch.
    row_slices: int = 1


# Host-side integer helpers. triton.cdiv and triton.next_power_of_2 are
# constexpr functions in Triton 3.6 and cost ~3 us per host call: these sit on every launch's path.
def cdiv(a: int, b: int) -> int:
    return -(-a // b)


def next_power_of_2(n: int) -> int:
    return 1 << (n - 1).bit_length() if n > 0 else 1


def prev_power_of_2(n: int) -> int:
    return 1 << (n.bit_length() - 1) if n > 0 else 1


def persistent_programs(blocks: int, resident: int, balanced: bool) -> int:
    """Programs of a persistent grid over ``blocks`` row blocks, at most ``resident`` (SMs x
    programs_per_sm); program p takes blocks p, p + programs, ... Balanced: as few programs as
    finish in the same number of steps, so that fewer SMs idle through the last one (2048 blocks
    on 132 SMs: 128 programs of 16 steps, not 132 of which 52 take a 16th step while 80 SMs
    idle). The heuristic balances grids of two or more programs an SM (config.heuristic_config); at
    one, the tuner chooses per key."""
    programs = max(1, min(blocks, resident))
    return cdiv(blocks, cdiv(blocks, programs)) if balanced else programs


def fused_tail_n(n: int, block_n: int) -> int:
    """Columns of the fused kernels' second tile piece, past the first ``block_n``: 0 where
    ``block_n`` holds the whole row, else the power of two that covers the rest."""
    return next_power_of_2(n - block_n) if block_n < n else 0


def fused_block_n(direction: str, n: int) -> int:
    """The heuristic's fused tile past the short rows (short_row_tile): N rounded up to a power of two,
    or, forward past 2048, N's largest power-of-two piece where a tail piece covers the rest in fewer
    lanes (5000: 4096 + 1024, 2% of the lanes masked off instead of 39%). Narrower rows and the
    backward keep one piece: where the tail gives a thread fewer elements than the head's vector, the
    compiler moves the whole head tile into the tail's layout through shared memory every row."""
    whole, head = next_power_of_2(n), prev_power_of_2(n)
    split = direction == "fwd" and n > 2048 and head + fused_tail_n(n, head) < whole
    return head if split else whole


def short_row_tile(n: int, element_bytes: int) -> tuple[int, int, int] | None:
    """The heuristic's fused forward tile for a short row, (block_m, block_n, warps), or None past
    SHORT_ROW_MAX_N: a small program, about SHORT_PROGRAM_BYTES of x in 1-16 rows on one warp per
    SHORT_VALUES_PER_THREAD values of x a thread. Past 512 columns the row is a power-of-two head and
    tail where each row's tail gives a warp whole 16-byte accesses, so both pieces share one layout
    (768: 512 + 256 lanes). A tile a quarter masked or more takes two rows or more on one warp (fp32
    576: two rows of 1024 lanes), or, where they need more warps, the wider rows' tile (16-bit 1152):
    a row across warps waits on a cross-warp reduction that its masked lanes do nothing to fill."""
    if n > SHORT_ROW_MAX_N:
        return None
    block_m = prev_power_of_2(min(16, max(1, SHORT_PROGRAM_BYTES // (n * element_bytes))))
    whole, head = next_power_of_2(n), prev_power_of_2(n)
    tail = fused_tail_n(n, head)
    split = n > 512 and head + tail < whole and tail * element_bytes >= 32 * 16
    block_n = head if split else whole
    masked = 4 * n < 3 * (block_n + fused_tail_n(n, block_n))
    block_m = max(block_m, 2) if masked else block_m
    warps = next_power_of_2(cdiv(block_m * n, 32 * SHORT_VALUES_PER_THREAD))
    if masked and warps > 1:
        return None
    return block_m, block_n, min(warps, block_m) if split else warps


def forward_prefetch_per_sm(block_bytes: int) -> float:
    """The heuristic's forward L2 prefetch distance for row blocks of ``block_bytes`` of x: every forward
    prefetches the rows FORWARD_PREFETCH_BYTES an SM ahead, as the H200's best configurations at the model
    widths do. Whole row blocks where one fits in that; where one does not (fp32 past 12288 columns, 16-bit
    past 24576), that fraction of a wave: a whole wave ahead ran those rows up to 1.40x slower (H100)."""
    return FORWARD_PREFETCH_BYTES // block_bytes or FORWARD_PREFETCH_BYTES / block_bytes


def fused_lanes(direction: str, n: int) -> int:
    block_n = fused_block_n(direction, n)
    return block_n + fused_tail_n(n, block_n)


def resolve_variant(variant: str, direction: str, dtype: torch.dtype, n: int, gpu: str | None) -> str:
    """The kernel one launch runs. "auto" takes the variant the tune sweep measured faster
    for this key on this GPU class (an ``auto/...`` entry of the tuned table); without
    one, ``heuristic_variant``'s.
    Forward and backward resolve separately: both read the same saved statistics."""
    if variant not in VARIANTS:
        raise ValueError(f"layer_norm: unknown variant {variant!r}; choose one of {VARIANTS}")
    if variant != "auto":
        return variant
    tuned = _tuned_entry(tuned_key("auto", direction, dtype, n), gpu, _tuned_override)
    return tuned["variant"] if tuned is not None else heuristic_variant(direction, n)


def heuristic_variant(direction: str, n: int) -> str:
    """auto's variant without a tuned choice: fused up to FUSED_MAX_N, the backward while its tile stays in
    registers (FUSED_BWD_REGISTER_LANES) and in row slices from ROW_SLICES_MIN_N; two_pass otherwise."""
    if n > FUSED_MAX_N:
        return "two_pass"
    fits = direction == "fwd" or fused_lanes(direction, n) <= FUSED_BWD_REGISTER_LANES or n >= ROW_SLICES_MIN_N
    return "fused" if fits else "two_pass"


def tuned_key(variant: str, direction: str, dtype: torch.dtype, n: int) -> str:
    return f"{variant}/{direction}/{str(dtype).removeprefix('torch.')}/{n}"


def tuned_file() -> Path:
    return Path(_tuned_override or TUNED_FILE)


def tuned_override() -> str | None:
    """The table that replaces ``tuned_configs.json`` for lookups now, if one does."""
    return _tuned_override


@contextlib.contextmanager
def tuned_table(path: Path):
    """Look configurations up in ``path`` inside the block (an A/B of two tables in one process)."""
    global _tuned_override
    previous, _tuned_override = _tuned_override, str(path)
    try:
        yield
    finally:
        _tuned_override = previous


def _warps_for(elements: int, per_thread: int) -> int:
    return max(1, min(16, elements // (32 * per_thread)))


def two_pass_block_n(n: int, element_bytes: int, cap: int, floor: int) -> int:
    """The heuristic's two_pass chunk: the row rounded up to a power of two, or, 16-bit, that, its
    half or its quarter (not below ``floor``), whichever masks the fewest lanes (3072: three chunks of
    1024, not one of 4096 a quarter masked); at most ``cap``. fp32 rows stay whole: split, they ran
    slower, masked lanes and all."""
    whole = next_power_of_2(n)
    if element_bytes < 4:
        pieces = [c for c in (whole, whole // 2, whole // 4) if c >= min(floor, whole)]
        whole = min(pieces, key=lambda c: (cdiv(n, c) * c, -c))
    return min(whole, cap)


def heuristic_config(variant: str, direction: str, dtype: torch.dtype, n: int) -> LaunchConfig:
    """The configuration of a key the tuned table lacks: another GPU class, or another N. Written from
    the recorded sweeps (tests/fixtures/recorded_sweeps.json), among whose configurations a test holds
    it within 1.13x of each key's best; docs/tuning.md lists the rules and what they rest on."""
    size = dtype.itemsize
    if variant == "two_pass":
        if direction == "fwd":  # chunks up to 8192, rows packed to 2048 elements and two while a chunk is under 8 KiB
            block_n = two_pass_block_n(n, size, 8192, 256)
            block_m = prev_power_of_2(min(16, max(2048 // block_n, 2 if block_n * size < 8192 else 1)))
            return LaunchConfig(block_m, block_n, _warps_for(block_m * block_n, 32))
        # Two rows a step of chunks up to 4096 (from 512: at most 8 programs per SM); x, dy, xhat and the
        # dw/db sums live at once: 16 elements a thread. Rows past 8192 load two chunks ahead (3 stages) and
        # step more rows at once (fp32 8 of 1024, 16-bit 4 of 4096): every step reads and writes the
        # program's fp32 dw/db partial rows. 16-bit rows of 12288 or more write dx alone, a row of
        # 8192-column chunks a step, and a column kernel sums dw and db (column_grads): their partial rows
        # no longer fit in L2 beside x and dy.
        if n >= 12288 and size < 4:
            return LaunchConfig(1, 8192, 16, programs_per_sm=4, column_grads=True)
        wide = n > 8192
        wide_tile = (8, 1024) if size == 4 else (4, 4096)
        block_m, block_n = wide_tile if wide else (2, two_pass_block_n(n, size, 4096, 512))
        warps = _warps_for(block_m * block_n, 32 if wide and size < 4 else 16)
        stages = 3 if wide or cdiv(n, block_n) >= 4 else 1
        return LaunchConfig(block_m, block_n, warps, programs_per_sm=max(1, 16 // warps), num_stages=stages)
    if direction == "fwd" and (short := short_row_tile(n, size)) is not None:
        block_m, block_n, warps = short
        lanes = block_n + fused_tail_n(n, block_n)
        # fp32 programs of one or two rows up to 768 columns do not prefetch: it cost them up to 7% on both GPUs.
        fp32_few_rows = size == 4 and n <= 768 and block_m <= 2
        prefetch = 0 if fp32_few_rows else forward_prefetch_per_sm(block_m * lanes * size)
        return LaunchConfig(block_m, block_n, warps, preload_affine=True, prefetch_per_sm=prefetch)
    block_n, lanes = fused_block_n(direction, n), fused_lanes(direction, n)
    # Other short rows: pack several per program, to 4096 elements forward, 8 rows backward.
    block_m = prev_power_of_2(min(16 if direction == "fwd" else 8, 4096 // lanes))
    warps = _warps_for(block_m * block_n, 32)
    if direction == "fwd" and lanes > 16384:
        # Wider forward rows: 16-bit 16 warps (64 values a thread in 128 registers), fp32 32 (32 in 64).
        warps = 32 if size == 4 else 16
    tail_warps = block_m * (lanes - block_n) * size // (32 * 16)
    if tail_warps >= 1:  # a tail piece wide enough for 16-byte accesses keeps them (bf16 5000: 4 warps, 1.5x)
        warps = min(warps, tail_warps)
    if direction == "fwd":
        prefetch = forward_prefetch_per_sm(block_m * lanes * size)
        if lanes > 8192:  # wider rows: 8 warps up to 16384
            return LaunchConfig(block_m, block_n, min(warps, 8) if lanes <= 16384 else warps, prefetch_per_sm=prefetch)
        # The single reduction stays a tuned option: it costs the statistics bits. w and b load with x, lest
        # their latency follow the statistics, but for a whole 8192-lane tile (slower there on the H200).
        return LaunchConfig(block_m, block_n, warps, preload_affine=lanes < 8192, prefetch_per_sm=prefetch)
    if lanes > FUSED_BWD_REGISTER_LANES:
        # A row in slices of 8192 lanes, 8 warps, two row steps loading ahead (three in fp32). 16-bit slices,
        # whose fixed costs weigh more per byte, also prefetch two steps ahead and take the single reduction.
        slices = cdiv(n, FUSED_BWD_REGISTER_LANES)
        wide_16bit = size < 4
        return LaunchConfig(1, FUSED_BWD_REGISTER_LANES, 8, programs_per_sm=1, num_stages=3 if wide_16bit else 4,
                            prefetch_per_sm=2 if wide_16bit else 0, single_reduction=wide_16bit,
                            row_slices=slices)  # fmt: skip
    # The fused backward at one program per SM, two (on a balanced grid) where a row block of x is under
    # 8 KiB, with up to three row blocks of x and dy loading ahead (4 stages) where shared memory holds
    # them, and the single reduction while the tile stays in registers.
    row_block = 2 * block_m * lanes * size  # x and dy
    stages = next((s for s in (4, 3) if (s - 1) * row_block <= PIPELINE_MAX_BYTES), 1)
    programs = 2 if block_m * n * size < 8192 else 1
    single = lanes <= FUSED_BWD_REGISTER_LANES
    return LaunchConfig(block_m, block_n, warps, programs_per_sm=programs, num_stages=stages, single_reduction=single,
                        balanced_grid=programs > 1)  # fmt: skip


def launch_config(variant: str, direction: str, dtype: torch.dtype, n: int, gpu: str | None) -> LaunchConfig:
    """The configuration for one launch; ``variant`` is "fused" or "two_pass"."""
    return _launch_config(variant, direction, dtype, n, gpu, _tuned_override)


# Cached: it sits on every launch's path (~1 us to look up, ~7 us to build). The table override
# is part of the key so that changing it takes effect.
@functools.cache
def _launch_config(variant: str, direction: str, dtype: torch.dtype, n: int, gpu: str | None, override: str | None):
    tuned = _tuned_entry(tuned_key(variant, direction, dtype, n), gpu, override)
    return LaunchConfig(**tuned) if tuned is not None else heuristic_config(variant, direction, dtype, n)


@functools.cache
def _tuned_entry(key: str, gpu: str | None, override: str | None) -> dict | None:
    return _tuned_table(Path(override or TUNED_FILE)).get(gpu or "", {}).get(key)


@functools.cache
def _tuned_table(path: Path) -> dict:
    return read_tuned_table(path)


def read_tuned_table(path: Path) -> dict:
    """{gpu class: {tuned_key: LaunchConfig fields}}; empty when there is no file."""
    return json.loads(path.read_text()) if path.exists() else {}


def with_tuned(table: dict, gpu: str, best: dict[str, LaunchConfig], auto: dict[str, str]) -> dict:
    """``table`` with ``best`` ({tuned_key: config}) and ``auto`` ({auto tuned_key: variant})
    filed under ``gpu``: other GPU classes and this class's other keys are kept."""
    merged = {cls: dict(entries) for cls, entries in table.items()}
    entries = merged.setdefault(gpu, {})
    entries.update({key: dataclasses.asdict(cfg) for key, cfg in best.items()})
    entries.update({key: {"variant": variant} for key, variant in auto.items()})
    return merged


def launch_entries(table: dict) -> list[tuple[str, str, LaunchConfig]]:
    """(GPU class, tuned_key, config) of every launch configuration in the table (not auto's choices)."""
    return [
        (gpu, key, LaunchConfig(**fields))
        for gpu, entries in sorted(table.items())
        for key, fields in sorted(entries.items())
        if not key.startswith("auto/")
    ]


def write_tuned_table(path: Path, table: dict) -> None:
    path.write_text(json.dumps(table, indent=1, sort_keys=True) + "\n")
