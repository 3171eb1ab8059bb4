"""Triton RMSNorm kernels: pure device code, no validation or dispatch.

Forward, per row of N elements, in fp32 whatever the input dtype (Zhang & Sennrich 2019,
"Root Mean Square Layer Normalization")::

    rstd = 1 / sqrt(sum(x^2) / N + eps)
    xhat = x * rstd
    y    = xhat * w

Backward, with ``g = w * dy``::

    c1 = sum(xhat * g) / N              # computed as rstd * sum(x * g) / N
    dx = (g - xhat * c1) * rstd
    dw = sum over rows of dy * xhat

dw is first summed per program of the persistent backward into an fp32 ``[programs, N]``
buffer of partial rows (no atomics, so the result is deterministic), then over programs by the
LayerNorm's ``column_sum_kernel`` (``ops`` launches it).

Two kernels a direction, chosen by the launch's tile:

* ``fwd_kernel`` / ``bwd_kernel``: the whole row in registers (``BLOCK_N`` lanes, N rounded up to a
  power of two), so x and dy are read from memory once. ``BLOCK_M`` rows a program, so that short
  rows still give each program enough bytes in flight. The backward is persistent: program p takes
  row blocks p, p + P, ... and keeps its dw sums in registers until the end.
* ``looped_fwd_kernel`` / ``looped_bwd_kernel``: any N, the row walked in ``BLOCK_N`` chunks twice,
  a reduction pass and a pass that writes; the second read mostly hits L2. The looped backward adds
  each row block's dw terms to its program's partial row in memory.
* ``sliced_bwd_kernel``: a row wider than the one-pass backward's registers, split over ``SLICES``
  programs (2 to 4) of ``BLOCK_N`` columns each, one row a step, so x and dy are still read once. Each
  slice publishes its share of c1's row sum and adds every slice's in slice order, through the
  LayerNorm's row-slice exchange (a word per slice and row, zero until published): the programs of a
  row wait for each other, so the launch is cooperative, and Triton's interpreter, which runs programs
  one after another, gets the row whole from the launcher.

The one-pass forward and the column sum take ``PDL`` (sm_90+): launched with programmatic dependent
launch, such a kernel is scheduled while the previous one in the stream drains and waits for it before
touching memory. The persistent backwards launch without it, as the LayerNorm's do (started early onto
SMs still busy, their programs land unevenly).
"""

import triton
import triton.language as tl

# Device helpers the LayerNorm kernels define: the wait for the previous kernel under programmatic dependent
# launch, the divisibility hint behind 16-byte accesses, correctly rounded division, int64 row offsets, the
# row-slice exchange (a slice publishes its row sums; every slice adds all of them in slice order) and the
# bulk prefetch of rows into L2.
from kernelgate.kernels.layer_norm.triton_kernels import (
    _aligned,
    _await_previous_kernel,
    _div,
    _prefetch_rows_into_l2,
    _publish_slice_sums,
    _row_offsets,
    _row_sums_of_slices,
)


@triton.jit
def _rstd(sum_sq, N, eps):
    # 1 / sqrt(mean(x^2) + eps), each step correctly rounded: per-row scalars, so it costs nothing measurable
    # next to the row's loads, and fp32 outputs keep about an ulp of error.
    return tl.math.div_rn(1.0, tl.math.sqrt_rn(_div(sum_sq, N) + eps))


@triton.jit
def _weight(W, cols, col_ok, HAS_WEIGHT: tl.constexpr):
    # w over the columns of a tile as fp32, ones without a weight (y = xhat exactly). Every program reads it:
    # kept in L2 ahead of the rows streaming past (evict_last).
    w = tl.full(cols.shape, 1.0, tl.float32)
    if HAS_WEIGHT:
        w = tl.load(W + cols, mask=col_ok, other=0.0, eviction_policy="evict_last").to(tl.float32)
    return w


@triton.jit
def _tile(X, rows, row_ok, stride, cols, col_ok):
    # The rows' columns ``cols`` as fp32, zeros past M and N (they add nothing to a row sum).
    mask = row_ok[:, None] & col_ok[None, :]
    return tl.load(X + _row_offsets(rows, stride) + cols[None, :], mask=mask, other=0.0).to(tl.float32), mask


@triton.jit
def fwd_kernel(
    X,  # input, [M, N], row stride stride_x, unit column stride
    Y,  # output, [M, N], row stride stride_y
    W,  # weight [N] (unused unless HAS_WEIGHT)
    Rstd,  # fp32 [M], written if STORE_RSTD
    stride_x,
    stride_y,
    M,
    N,
    eps,
    HAS_WEIGHT: tl.constexpr,
    STORE_RSTD: tl.constexpr,  # False for inference: nothing will read it
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # >= N: the whole row
    VEC: tl.constexpr,  # elements per 16-byte access every row is aligned to
    PDL: tl.constexpr,  # launched with launch_pdl (sm_90+): wait for the previous kernel first
):
    _await_previous_kernel(PDL)
    N, stride_x, stride_y = _aligned(N, VEC), _aligned(stride_x, VEC), _aligned(stride_y, VEC)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    x, mask = _tile(X, rows, row_ok, stride_x, cols, col_ok)
    rstd = _rstd(tl.sum(x * x, axis=1), N, eps)
    y = x * rstd[:, None] * _weight(W, cols, col_ok, HAS_WEIGHT)[None, :]
    tl.store(Y + _row_offsets(rows, stride_y) + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    if STORE_RSTD:
        tl.store(Rstd + rows, rstd, mask=row_ok)


@triton.jit
def looped_fwd_kernel(
    X,  # input, [M, N], row stride stride_x, unit column stride
    Y,  # output, [M, N], row stride stride_y
    W,  # weight [N] (unused unless HAS_WEIGHT)
    Rstd,  # fp32 [M], written if STORE_RSTD
    stride_x,
    stride_y,
    M,
    N,
    eps,
    HAS_WEIGHT: tl.constexpr,
    STORE_RSTD: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # the chunk, < N
    VEC: tl.constexpr,
):
    N, stride_x, stride_y = _aligned(N, VEC), _aligned(stride_x, VEC), _aligned(stride_y, VEC)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    chunk = tl.arange(0, BLOCK_N)

    # Pass 1: the sum of squares, chunk by chunk (elementwise in fp32, reduced once at the end).
    squares = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        x, _ = _tile(X, rows, row_ok, stride_x, start + chunk, start + chunk < N)
        squares += x * x
    rstd = _rstd(tl.sum(squares, axis=1), N, eps)

    # Pass 2: normalize and scale; the row was just read, so these loads mostly hit L2.
    for start in range(0, N, BLOCK_N):
        cols = start + chunk
        col_ok = cols < N
        x, mask = _tile(X, rows, row_ok, stride_x, cols, col_ok)
        y = x * rstd[:, None] * _weight(W, cols, col_ok, HAS_WEIGHT)[None, :]
        tl.store(Y + _row_offsets(rows, stride_y) + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)
    if STORE_RSTD:
        tl.store(Rstd + rows, rstd, mask=row_ok)


@triton.jit
def bwd_kernel(
    X,  # forward input, [M, N], row stride stride_x
    DY,  # output gradient, [M, N], row stride stride_dy
    DX,  # input gradient, [M, N], row stride stride_dx, written
    W,  # weight [N] (unused unless HAS_WEIGHT)
    Rstd,  # fp32 [M], from the forward
    Partial,  # fp32 [programs, N]: per program, its rows' sum of dy * xhat (written if HAS_WEIGHT)
    stride_x,
    stride_dy,
    stride_dx,
    M,
    N,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # >= N: the whole row
    VEC: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # > 1: the next row blocks' x and dy load (cp.async) during this one's math
):
    N, stride_x = _aligned(N, VEC), _aligned(stride_x, VEC)
    stride_dy, stride_dx = _aligned(stride_dy, VEC), _aligned(stride_dx, VEC)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = _weight(W, cols, col_ok, HAS_WEIGHT)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    for block in tl.range(pid, tl.cdiv(M, BLOCK_M), programs, num_stages=NUM_STAGES):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        x, mask = _tile(X, rows, row_ok, stride_x, cols, col_ok)
        dy, _ = _tile(DY, rows, row_ok, stride_dy, cols, col_ok)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
        # Masked lanes and rows load x = dy = 0 (and rstd = 0): they add nothing and are never stored.
        g = dy * w[None, :]
        c1 = _div(tl.sum(x * g, axis=1) * rstd, N)
        xhat = x * rstd[:, None]
        dx = (g - xhat * c1[:, None]) * rstd[:, None]
        tl.store(DX + _row_offsets(rows, stride_dx) + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
        if HAS_WEIGHT:
            dw += tl.sum(dy * xhat, axis=0)
    if HAS_WEIGHT:
        tl.store(Partial + pid.to(tl.int64) * N + cols, dw, mask=col_ok)


@triton.jit
def looped_bwd_kernel(
    X,  # forward input, [M, N], row stride stride_x
    DY,  # output gradient, [M, N], row stride stride_dy
    DX,  # input gradient, [M, N], row stride stride_dx, written
    W,  # weight [N] (unused unless HAS_WEIGHT)
    Rstd,  # fp32 [M], from the forward
    Partial,  # fp32 [programs, N]: per program, its rows' sum of dy * xhat (written if HAS_WEIGHT)
    stride_x,
    stride_dy,
    stride_dx,
    M,
    N,
    HAS_WEIGHT: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # the chunk, < N
    VEC: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # > 1: the next chunks' x and dy load (cp.async) during this one's math
):
    N, stride_x = _aligned(N, VEC), _aligned(stride_x, VEC)
    stride_dy, stride_dx = _aligned(stride_dy, VEC), _aligned(stride_dx, VEC)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    chunk = tl.arange(0, BLOCK_N)
    partial = Partial + pid.to(tl.int64) * N
    for block in range(pid, tl.cdiv(M, BLOCK_M), programs):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)

        # Pass 1: c1's row sum.
        x_g = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
        for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
            cols = start + chunk
            col_ok = cols < N
            x, _ = _tile(X, rows, row_ok, stride_x, cols, col_ok)
            dy, _ = _tile(DY, rows, row_ok, stride_dy, cols, col_ok)
            x_g += x * dy * _weight(W, cols, col_ok, HAS_WEIGHT)[None, :]
        c1 = _div(tl.sum(x_g, axis=1) * rstd, N)

        # Pass 2: dx, and this block's terms of dw.
        for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
            cols = start + chunk
            col_ok = cols < N
            x, mask = _tile(X, rows, row_ok, stride_x, cols, col_ok)
            dy, _ = _tile(DY, rows, row_ok, stride_dy, cols, col_ok)
            xhat = x * rstd[:, None]
            dx = (dy * _weight(W, cols, col_ok, HAS_WEIGHT)[None, :] - xhat * c1[:, None]) * rstd[:, None]
            tl.store(DX + _row_offsets(rows, stride_dx) + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)
            if HAS_WEIGHT:
                # Each program owns its partial row: a plain read-modify-write. Its first row block writes
                # the row without reading it, so the buffer needs no zeroing.
                dw = tl.load(partial + cols, mask=col_ok & (block != pid), other=0.0)
                tl.store(partial + cols, dw + tl.sum(dy * xhat, axis=0), mask=col_ok)


@triton.jit
def _slice_of_row(X, DY, Rstd, row, stride_x, stride_dy, cols, col_ok):
    # x and dy over this slice's columns of the row, as fp32, and the row's rstd.
    x = tl.load(X + row.to(tl.int64) * stride_x + cols, mask=col_ok, other=0.0).to(tl.float32)
    dy = tl.load(DY + row.to(tl.int64) * stride_dy + cols, mask=col_ok, other=0.0).to(tl.float32)
    return x, dy, tl.load(Rstd + row)


@triton.jit
def _publish_slice_sum(Exchange, row, x, dy, w, slice, SLICES: tl.constexpr):
    # This slice's share of c1's row sum, sum(x * g); the exchange's second sum is unused.
    _publish_slice_sums(Exchange, row, tl.sum(x * dy * w), 0.0, slice, SLICES)


@triton.jit
def _finish_sliced_row(DX, Exchange, row, stride_dx, N, cols, col_ok, x, dy, w, rstd, dw, SLICES: tl.constexpr):
    # Once every slice's sum of the row is in: its slice of dx, and dw with its terms added.
    sum_x_g, _ = _row_sums_of_slices(Exchange, row, SLICES)
    xhat = x * rstd
    dx = (dy * w - xhat * _div(sum_x_g * rstd, N)) * rstd
    tl.store(DX + row.to(tl.int64) * stride_dx + cols, dx.to(DX.dtype.element_ty), mask=col_ok)
    return dw + dy * xhat


@triton.jit(do_not_specialize=["prefetch_rows"])
def sliced_bwd_kernel(
    X,  # forward input, [M, N], row stride stride_x
    DY,  # output gradient, [M, N], row stride stride_dy
    DX,  # input gradient, [M, N], row stride stride_dx, written
    W,  # weight [N] (unused unless HAS_WEIGHT)
    Rstd,  # fp32 [M], from the forward
    Partial,  # fp32: [groups, N] per group, its rows' sum of dy * xhat (if HAS_WEIGHT), then, 16-byte aligned,
    # the slices' words, zero at launch (row_words of them a row)
    stride_x,
    stride_dy,
    stride_dx,
    M,
    N,
    prefetch_rows,  # with PREFETCH: the distance, in rows, to the slice of x and dy each step pulls into L2
    HAS_WEIGHT: tl.constexpr,
    BLOCK_N: tl.constexpr,  # a slice's columns; SLICES - 1 of them < N <= SLICES of them
    VEC: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # > 1: the next rows' slices of x and dy load (cp.async) during this one's math
    SLICES: tl.constexpr,  # 2 to 4 programs a row
    FINISH_LATE: tl.constexpr,  # a step publishes its row's sum, then finishes the previous row
    PREFETCH: tl.constexpr,  # sm_90+, 16-byte aligned rows
):
    N, stride_x = _aligned(N, VEC), _aligned(stride_x, VEC)
    stride_dy, stride_dx = _aligned(stride_dy, VEC), _aligned(stride_dx, VEC)
    # Persistent: the programs form groups of SLICES, one program per slice of columns; group g handles rows
    # g, g + groups, ...
    pid = tl.program_id(0)
    group, groups, slice = pid // SLICES, tl.num_programs(0) // SLICES, pid % SLICES
    exchange = Partial
    if HAS_WEIGHT:
        exchange += (groups.to(tl.int64) * N + 3) // 4 * 4  # 16-byte aligned
    first = slice * BLOCK_N
    cols = first + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = _weight(W, cols, col_ok, HAS_WEIGHT)
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    # FINISH_LATE: the previous row, loaded again (from L2), whose other slices' sums had this step's loads
    # and sum to arrive, so that the exchange's round trip no longer adds to every step.
    first_row = group
    if FINISH_LATE:
        x, dy, _ = _slice_of_row(X, DY, Rstd, group, stride_x, stride_dy, cols, col_ok)
        _publish_slice_sum(exchange, group, x, dy, w, slice, SLICES)
        first_row += groups
    for row in tl.range(first_row, M, groups, num_stages=NUM_STAGES):
        if PREFETCH:  # this slice of x and dy prefetch_rows rows on, a row this group reaches later
            ahead = row + prefetch_rows + tl.zeros([1], dtype=tl.int32)
            width = tl.minimum(N - first, BLOCK_N)
            _prefetch_rows_into_l2(X + first, ahead, ahead < M, stride_x, width)
            _prefetch_rows_into_l2(DY + first, ahead, ahead < M, stride_dy, width)
        x, dy, rstd = _slice_of_row(X, DY, Rstd, row, stride_x, stride_dy, cols, col_ok)
        _publish_slice_sum(exchange, row, x, dy, w, slice, SLICES)
        finished = row
        if FINISH_LATE:
            finished -= groups
            x, dy, rstd = _slice_of_row(X, DY, Rstd, finished, stride_x, stride_dy, cols, col_ok)
        dw = _finish_sliced_row(DX, exchange, finished, stride_dx, N, cols, col_ok, x, dy, w, rstd, dw, SLICES)
    if FINISH_LATE:
        last = group + (M - 1 - group) // groups * groups
        x, dy, rstd = _slice_of_row(X, DY, Rstd, last, stride_x, stride_dy, cols, col_ok)
        dw = _finish_sliced_row(DX, exchange, last, stride_dx, N, cols, col_ok, x, dy, w, rstd, dw, SLICES)
    if HAS_WEIGHT:
        tl.store(Partial + group.to(tl.int64) * N + cols, dw, mask=col_ok)
