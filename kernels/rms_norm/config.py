"""Launch configurations for the RMSNorm kernels: one frozen dataclass and one heuristic.

The kernel a launch runs follows from its configuration: a tile that covers the row
(``block_n >= N``) runs the one-pass kernel, which holds the row in registers; a backward of
``row_slices`` > 1 splits the row over that many programs of ``block_n`` columns; any other
narrower tile runs the looped kernel, which walks the row in ``block_n`` chunks twice. There is no tuned table
yet: every launch takes ``heuristic_config``, whose rules rest on sweeps of these kernels on an H200
where they were measured, and on the LayerNorm's rules for its kernels of the same shape elsewhere
(docs/kernels/rms-norm.md says which).
"""

import dataclasses
import functools

import torch

# Host-side integer helpers and the shared-memory budget of a pipelined loop, as the LayerNorm's launchers use them.
from kernelgate.kernels.layer_norm.config import PIPELINE_MAX_BYTES, cdiv, next_power_of_2, prev_power_of_2

# The forward holds a row of x (and w) in registers up to this many lanes: fp32 at 32 warps is
# 32 values a thread, in the 64 registers a 1024-thread program gets (the LayerNorm's bound, where
# its fused forward holds more). Wider rows loop.
FWD_REGISTER_LANES = 32768
# The backward holds x, dy, w and the dw sums of a row block in registers up to this many lanes: a row of
# 16384 spills on sm_90 at 16 and at 32 warps (32-53 stores to local memory), as the LayerNorm's fused
# backward's does. Wider rows loop.
BWD_REGISTER_LANES = 8192
# Wider backward rows, from ROW_SLICES_MIN_N columns (where they fill three quarters of their slices' lanes) up to
# MAX_ROW_SLICES slices, split over programs of BWD_REGISTER_LANES columns each (the LayerNorm's row slices):
# still read once. Narrower and wider rows loop.
ROW_SLICES_MIN_N = 12288
MAX_ROW_SLICES = 4

# Rows per program: short rows are packed until a program holds about this many elements.
PROGRAM_ELEMENTS = 4096
# Values of a row tile per thread, which set the warps a tile takes (1 to 16; 32 for the widest fp32 forward).
# The forward holds x; the backward x, dy, g and xhat at once, and its dw sums: at 32 values a thread its fp32
# tile of 2 x 2048 spills on sm_90 (168 registers, three stores to local memory), at 16 none does.
FWD_VALUES_PER_THREAD = 32
BWD_VALUES_PER_THREAD = 16
# 16-bit backwards of rows up to this many lanes take 32 values a thread (4 warps for 4096 elements), two
# programs an SM and three stages: on an H200 (8192 rows of 768, 1024, 2048 and 4096, the backward alone)
# within 0.3% of the fastest of 48 tiles at each width, and 1.75-1.84x the 16-value tile on four stages at 768
# and 1024. fp32's rule below is within 2.5% of the fastest at those widths; wider 16-bit rows were not swept.
SHORT_16BIT_BWD_LANES = 4096
# The looped kernels' chunk: 8192 columns forward (one row a program). The backward, whose every step also
# reads and writes the program's fp32 dw partial row, steps several rows at once: fp32 8 rows of 1024 columns,
# as the LayerNorm's two_pass backward past 8192 columns; 16-bit 4 rows of 2048, half the LayerNorm's chunk,
# so that three pipeline stages take 104 KiB of shared memory, not 192 (sm_80 offers 163 KiB a block), and
# two programs fit an sm_90 SM. On 8 warps (32 values a thread), two programs an SM for 16-bit: of 66 tiles,
# warps, stages and programs swept on an H200 (8192 rows of 16384 and 32768, the backward alone), the fastest
# over both widths in either dtype, 1.5-1.65x the 16-warp, one-program tile at 16-bit and 1.01x at fp32.
LOOPED_FWD_CHUNK = 8192
LOOPED_BWD_TILE = {4: (8, 1024), 2: (4, 2048)}  # element bytes: (rows a step, chunk)
LOOPED_BWD_WARPS = 8
# Shared memory a block may take on every GPU these kernels target (sm_80: 163 KiB; sm_90: 227 KiB).
MAX_SHARED_BYTES = 163 * 1024


@dataclasses.dataclass(frozen=True)
class RMSNormConfig:
    block_m: int  # rows per program (per step of the persistent backward)
    block_n: int  # the row's tile (>= N: one pass, the row in registers) or the looped kernels' chunk (< N)
    num_warps: int
    # Backward: the persistent grid's programs per SM; at two or more, as few as take the same number of
    # steps each (the LayerNorm's balanced grid: 2048 row blocks on 132 SMs as 128 programs of 16 steps).
    programs_per_sm: int = 1
    num_stages: int = 1  # backward: > 1 loads the next steps' x and dy (cp.async) during this one's math
    # Backward: > 1 splits each row over this many programs of block_n columns, one row a step, one program an
    # SM; they exchange their row sums (2 to MAX_ROW_SLICES).
    row_slices: int = 1
    # Row slices: a step publishes its row's sum and then finishes the previous row, rather than waiting for
    # the other slices' sums right after publishing its own.
    finish_late: bool = False
    # Row slices (sm_90+, 16-byte aligned rows): each step pulls its slice of x and dy this many of its
    # group's steps ahead into L2 (0: no prefetch).
    prefetch_steps: int = 0

    def looped(self, n: int) -> bool:
        """Whether a launch on rows of ``n`` walks them in chunks (the looped kernels)."""
        return self.block_n < n and self.row_slices == 1


def _warps(elements: int, per_thread: int) -> int:
    return max(1, min(16, elements // (32 * per_thread)))


def heuristic_config(direction: str, dtype: torch.dtype, n: int) -> RMSNormConfig:
    """The configuration of one launch, ``direction`` "fwd" or "bwd"."""
    return _heuristic_config(direction, dtype, n)


@functools.cache  # on every launch's path
def _heuristic_config(direction: str, dtype: torch.dtype, n: int) -> RMSNormConfig:
    if direction not in ("fwd", "bwd"):
        raise ValueError(f"rms_norm: direction must be 'fwd' or 'bwd', got {direction!r}")
    size, lanes = dtype.itemsize, next_power_of_2(n)
    if direction == "fwd":
        if lanes > FWD_REGISTER_LANES:
            return RMSNormConfig(1, LOOPED_FWD_CHUNK, 8)
        block_m = prev_power_of_2(max(1, min(16, PROGRAM_ELEMENTS // lanes)))
        warps = _warps(block_m * lanes, FWD_VALUES_PER_THREAD)
        if lanes > 16384:  # 16-bit: 64 values a thread in 128 registers; fp32 32 in 64
            warps = 32 if size == 4 else 16
        return RMSNormConfig(block_m, lanes, warps)
    if ROW_SLICES_MIN_N <= n <= MAX_ROW_SLICES * BWD_REGISTER_LANES:
        # Slices of 8192 lanes on 8 warps, three stages, each step prefetching its slice two steps ahead; 16-bit
        # slices, whose fixed costs weigh more per byte, finish each row a step late (fp32's late finish takes
        # 256 KiB of shared memory). docs/kernels/rms-norm.md gives the sweep behind each choice.
        return RMSNormConfig(1, BWD_REGISTER_LANES, 8, num_stages=3, row_slices=cdiv(n, BWD_REGISTER_LANES),
                             finish_late=size < 4, prefetch_steps=2)  # fmt: skip
    if lanes > BWD_REGISTER_LANES:
        block_m, chunk = LOOPED_BWD_TILE[size]
        programs = 2 if size < 4 else 1  # fp32's pipeline leaves room for one program an SM
        return RMSNormConfig(block_m, chunk, LOOPED_BWD_WARPS, programs_per_sm=programs, num_stages=3)
    block_m = prev_power_of_2(max(1, min(8, PROGRAM_ELEMENTS // lanes)))
    if size < 4 and lanes <= SHORT_16BIT_BWD_LANES:
        warps = _warps(block_m * lanes, FWD_VALUES_PER_THREAD)
        return RMSNormConfig(block_m, lanes, warps, programs_per_sm=2, num_stages=3)
    # Up to three row blocks of x and dy load ahead while they fit the pipeline's shared memory; two programs
    # an SM where a row block of x is under 8 KiB (the LayerNorm's fused backward rules).
    row_block = 2 * block_m * lanes * size
    stages = next((s for s in (4, 3) if (s - 1) * row_block <= PIPELINE_MAX_BYTES), 1)
    programs = 2 if block_m * n * size < 8192 else 1
    warps = _warps(block_m * lanes, BWD_VALUES_PER_THREAD)
    return RMSNormConfig(block_m, lanes, warps, programs_per_sm=programs, num_stages=stages)
