"""Triton LayerNorm kernels: pure device code, no validation or dispatch.

Forward, per row of N elements::

    mean = sum(x) / N
    var  = sum((x - mean)^2) / N           # centered: never E[x^2] - E[x]^2
    rstd = 1 / sqrt(var + eps)
    xhat = (x - mean) * rstd
    y    = xhat * w + b

Every row is first shifted by its own first element (``shift = x[0]``). The
variance is shift-invariant, and the mean of the shifted row is of the order of
the row's spread rather than its magnitude, so rows such as ``1e3 + randn``
keep full fp32 accuracy in both ``mean`` and ``xhat``.

Backward, with ``g = w * dy``::

    c1 = sum(xhat * g) / N
    c2 = sum(g) / N
    dx = (g - (xhat * c1 + c2)) * rstd
    dw = sum over rows of dy * xhat
    db = sum over rows of dy

dw and db are first reduced per program into fp32 ``[programs, N]`` slabs of
one buffer (no atomics, so the result is deterministic), then summed over
programs by ``column_sum_kernel``, both slabs in one launch. Or, for wide rows
(``two_pass_bwd_kernel`` with ``PARTIAL_SUMS=False``), the row kernel writes dx
alone and ``column_grads_kernel`` sums them over the rows from x and dy
(deterministic too).

Two families:

* ``fused_*``: the whole row lives in registers, so x is read from memory
  exactly once. Its tile is one power-of-two piece, or two: ``BLOCK_N`` columns,
  then ``TAIL_N`` (N = 5000 takes 4096 + 1024 lanes rather than 8192).
* ``two_pass_*``: any N. The row is walked in ``BLOCK_N`` chunks twice: a
  statistics pass (chunk statistics merged with Chan's parallel formula),
  then a normalize pass. The second read mostly hits L2.

Both families process ``BLOCK_M`` rows per program, so short rows still give
each program enough bytes in flight.

A row wider than the fused backward's registers hold (8192 lanes) is split over
``SLICES`` programs (2 to 4), one slice of ``BLOCK_N`` columns each: each slice
publishes its two row sums, waits for the others' and adds them all in slice
order, so x and dy are still read once. The programs of a row wait for each
other, so the launch is cooperative (all resident, or an error); Triton's
interpreter, which runs programs one after another, gets the row whole. The
words they exchange through must be zero when the launch starts: zeroed with the
partial sums by the launcher, or, for eager calls, by the forward that
stored the statistics, beside Rstd (``EXCHANGE_WORDS``, ``EXCHANGE_AFTER_RSTD``),
so that the backward launches nothing to zero them; then ``column_sum_kernel``,
which runs after the row kernel, zeroes them again for a repeated backward or a
replayed CUDA graph.

The fused forward takes two options, chosen per configuration by the tuner since each
trades registers (programs per SM) for latency: ``PRELOAD_AFFINE`` loads w and b with x
instead of after the statistics; ``SINGLE_REDUCTION`` (16-bit inputs) takes the sum and
the sum of squares of the shifted row in one cross-warp exchange instead of two. The fused
backward takes ``SINGLE_REDUCTION`` too, for c1's and c2's sums (any dtype: no new rounding).

The fused forward may also prefetch (``PREFETCH``; sm_90+, 16-byte aligned rows): each program
first has the TMA unit pull the rows ``prefetch_rows`` past its own into L2, so that programs
find their rows there when they start instead of each waiting out a whole row's loads before it
can reduce, the grid's last ones with the memory system idling around them. In a probe on an H100,
about one resident grid ahead, 16-bit 4096x5000 went from 94% of the speed of a copy of its tensor
to 97-99.5%, and fp16 16384x5000 ran 1.045x as fast. Too far ahead, the rows are evicted before
use and it is much slower, so the distance is tuned. The fused backward takes the same option in
its persistent loop: each row-block step first prefetches the x and dy rows ``prefetch_rows``
past its own, rows that some program will reach a few steps later (a row slice: its slice of
its group's row that many rows on).

The fused forward and the column sum take ``PDL``: launched with programmatic
dependent launch (sm_90+), such a kernel is scheduled while the previous one in the
stream drains and waits for it before touching memory (``_await_previous_kernel``),
which hides the launch gap between back-to-back kernels. On an H200 that made the
fused forward 1.01-1.10x faster; two_pass's forward ran 0.89-1.03x (its 1-warp
N=1024 16-bit configurations lost) and the persistent backwards up to 1.18x slower,
so those launch as before.
"""

import triton
import triton.language as tl
from triton.language.extra import cuda as tl_cuda


@triton.jit
def _await_previous_kernel(PDL: tl.constexpr):
    # Programmatic dependent launch (sm_90+, launched with launch_pdl): the grid may start while
    # the stream's previous kernel drains, so nothing is read or written before that kernel has
    # finished; then the next kernel may start launching likewise.
    if PDL:
        tl_cuda.gdc_wait()
        tl_cuda.gdc_launch_dependents()


@triton.jit
def _div(total, n):
    # Correctly rounded: Triton's `/` is div.full.f32 (2 ulp), which for N = 1
    # leaves g - c2 != 0 in the backward, amplified by rstd = 1/sqrt(eps).
    # These are per-row scalars, so exactness costs nothing measurable.
    return tl.math.div_rn(total, n * 1.0)


@triton.jit
def _aligned(value, VEC: tl.constexpr):
    # Identity for the values the launcher passes (N and row strides are
    # multiples of VEC, rows start 16-byte aligned), but it tells the compiler
    # so: 16-byte loads and stores for any such N (5000 too), not only the
    # multiples of 16 that Triton's JIT specializes on by itself.
    return value // VEC * VEC


@triton.jit
def _row_offsets(rows, stride):
    # int64: M * stride can exceed 2**31 for large activations.
    return rows.to(tl.int64)[:, None] * stride


@triton.jit
def _partial_rows(Partial, N, row, rows, HAS_WEIGHT: tl.constexpr):
    # Partial is [dw slab if HAS_WEIGHT, db slab if HAS_BIAS], each [rows, N]:
    # row ``row`` of each (int64: rows * N can pass 2**31).
    dw_row = Partial + row.to(tl.int64) * N
    db_row = dw_row
    if HAS_WEIGHT:
        db_row += rows.to(tl.int64) * N
    return dw_row, db_row


@triton.jit
def _piece(X, rows, row_ok, stride, start, N, WIDTH: tl.constexpr):
    # Columns [start, start + WIDTH) of the rows, masked past N: (x as fp32, cols, column mask, mask).
    cols = start + tl.arange(0, WIDTH)
    col_ok = cols < N
    mask = row_ok[:, None] & col_ok[None, :]
    x = tl.load(X + _row_offsets(rows, stride) + cols[None, :], mask=mask, other=0.0).to(tl.float32)
    return x, cols, col_ok, mask


@triton.jit
def _param_piece(P, cols, col_ok, PRESENT: tl.constexpr, ABSENT: tl.constexpr):
    # An [N] parameter over the columns of one piece, as stored; ABSENT (fp32) without one. Every
    # program reads it: kept in L2 ahead of the rows streaming past (evict_last).
    p = tl.full(cols.shape, ABSENT, tl.float32)
    if PRESENT:
        p = tl.load(P + cols, mask=col_ok, other=0.0, eviction_policy="evict_last")
    return p


@triton.jit
def _affine_params(W, B, cols, col_ok, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    # (w, b) over the columns of one piece: y = xhat * w + b is then exact without them.
    return _param_piece(W, cols, col_ok, HAS_WEIGHT, 1.0), _param_piece(B, cols, col_ok, HAS_BIAS, 0.0)


@triton.jit
def _store_affine(Y, rows, stride, cols, mask, xhat, w, b):
    # y = xhat * w + b over the columns of one piece.
    y = xhat * w.to(tl.float32)[None, :] + b.to(tl.float32)[None, :]
    tl.store(Y + _row_offsets(rows, stride) + cols[None, :], y.to(Y.dtype.element_ty), mask=mask)


@triton.jit
def _sum_pair(a0, a1, b0, b1):
    return a0 + b0, a1 + b1


@triton.jit
def _row_sum_pair(a, b, SINGLE_REDUCTION: tl.constexpr):
    # The row sums of a and b: with SINGLE_REDUCTION in one cross-warp exchange instead of two.
    if SINGLE_REDUCTION:
        total_a, total_b = tl.reduce((a, b), 1, _sum_pair)
    else:
        total_a, total_b = tl.sum(a, axis=1), tl.sum(b, axis=1)
    return total_a, total_b


@triton.jit
def _shifted_sums(x, mask, shift, SINGLE_REDUCTION: tl.constexpr):
    # (x - shift, its row sums, and with SINGLE_REDUCTION its row sums of squares, in the same
    # cross-warp exchange); masked columns contribute exact zeros.
    xs = tl.where(mask, x - shift[:, None], 0.0)
    if SINGLE_REDUCTION:
        total, squares = _row_sum_pair(xs, xs * xs, True)
    else:
        total = tl.sum(xs, axis=1)
        squares = tl.zeros_like(total)
    return xs, total, squares


@triton.jit
def _prefetch_rows_into_l2(X, rows, row_ok, stride, N):
    # One bulk prefetch of each row's N elements from X, issued by one thread (cp.async.bulk.prefetch,
    # sm_90+: they must start 16-byte aligned and span a multiple of 16 bytes). No data reaches
    # registers and nothing waits for it.
    lane = tl.arange(0, tl_cuda.num_threads())
    issue = ((lane[None, :] == 0) & row_ok[:, None]).to(tl.int32)
    start = X + _row_offsets(rows, stride) + lane[None, :] * 0
    row_bytes = issue * 0 + N * (X.dtype.element_ty.primitive_bitwidth // 8)
    tl.inline_asm_elementwise(
        "{ .reg .pred p; setp.ne.s32 p, $2, 0; @p cp.async.bulk.prefetch.L2.global [$1], $3; mov.u32 $0, 0; }",
        "=r,l,r,r", [start, issue, row_bytes], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit
def _publish_slice_sums(Exchange, row, a, b, slice, SLICES: tl.constexpr):
    # A row split over SLICES (2 to 4) programs, one slice of columns each, exchanges the slices' sums a and
    # b through its words (_exchange_words), zero until published. A slice publishes both sums in one word,
    # their bits inverted, which no float makes zero once NaN is canonical: a word is complete when it is
    # non-zero, and no fence is needed.
    words = _exchange_words(Exchange, row, SLICES)
    _publish(words + slice, a, b)
    if SLICES == 3:  # the fourth word adds nothing
        _publish(words + 3, 0.0, 0.0)


@triton.jit
def _row_sums_of_slices(Exchange, row, SLICES: tl.constexpr):
    # Wait for every slice's word of the row, and sum them in slice order: the same bits in every slice
    # (deterministic). Scalars, so that each thread waits once; in PTX, because Triton's pipeliner issues a
    # loop's loads iterations early, and a loop in Triton would keep it from pipelining the row loop.
    return tl.inline_asm_elementwise(
        _SUM_OF_TWO if SLICES == 2 else _SUM_OF_FOUR, "=r,=r,l", [_exchange_words(Exchange, row, SLICES)],
        dtype=(tl.float32, tl.float32), is_pure=False, pack=1,
    )  # fmt: skip


@triton.jit
def _exchange_words(Exchange, row, SLICES: tl.constexpr):
    # A row's 64-bit words: one per slice, 2, or 4 for 3 slices and 4.
    return Exchange.to(tl.pointer_type(tl.int64)) + row.to(tl.int64) * (2 if SLICES == 2 else 4)


@triton.jit
def _publish(word, a, b):
    a = tl.where(a == a, a, float("nan")).to(tl.int32, bitcast=True)
    b = tl.where(b == b, b, float("nan")).to(tl.int32, bitcast=True)
    tl.inline_asm_elementwise(
        "{ .reg .b32 a, b; .reg .b64 w; not.b32 a, $1; not.b32 b, $2; mov.b64 w, {a, b}; "
        "st.relaxed.gpu.global.b64 [$3], w; mov.u32 $0, 0; }",
        "=r,r,r,l", [a, b, word], dtype=tl.int32, is_pure=False, pack=1,
    )  # fmt: skip


# Wait until the 2 (4) words at $2 are non-zero; then $0 and $1, the sums of their inverted low and high
# halves in slice order. A wait of 2**24 polls (seconds) traps, so that a fault is an error, not a hang.
_SUM_OF_TWO: tl.constexpr = tl.constexpr(
    "{ .reg .pred p; .reg .b64 w0, w1; .reg .b32 a0, b0, a1, b1, polls; mov.u32 polls, 0; "
    "wait: ld.volatile.global.v2.b64 {w0, w1}, [$2]; add.u32 polls, polls, 1; setp.eq.u32 p, polls, 16777216; "
    "@p trap; setp.eq.u64 p, w0, 0; setp.eq.or.u64 p, w1, 0, p; @p bra wait; "
    "mov.b64 {a0, b0}, w0; mov.b64 {a1, b1}, w1; not.b32 a0, a0; not.b32 b0, b0; not.b32 a1, a1; not.b32 b1, b1; "
    "add.rn.f32 $0, a0, a1; add.rn.f32 $1, b0, b1; }"
)
_SUM_OF_FOUR: tl.constexpr = tl.constexpr(
    "{ .reg .pred p; .reg .b64 w0, w1, w2, w3; .reg .b32 a0, b0, a1, b1, a2, b2, a3, b3, polls; mov.u32 polls, 0; "
    "wait: ld.volatile.global.v2.b64 {w0, w1}, [$2]; ld.volatile.global.v2.b64 {w2, w3}, [$2+16]; "
    "add.u32 polls, polls, 1; setp.eq.u32 p, polls, 16777216; @p trap; setp.eq.u64 p, w0, 0; "
    "setp.eq.or.u64 p, w1, 0, p; setp.eq.or.u64 p, w2, 0, p; setp.eq.or.u64 p, w3, 0, p; "
    "@p bra wait; mov.b64 {a0, b0}, w0; mov.b64 {a1, b1}, w1; mov.b64 {a2, b2}, w2; mov.b64 {a3, b3}, w3; "
    "not.b32 a0, a0; not.b32 b0, b0; not.b32 a1, a1; not.b32 b1, b1; not.b32 a2, a2; not.b32 b2, b2; "
    "not.b32 a3, a3; not.b32 b3, b3; add.rn.f32 a0, a0, a1; add.rn.f32 a2, a2, a3; add.rn.f32 $0, a0, a2; "
    "add.rn.f32 b0, b0, b1; add.rn.f32 b2, b2, b3; add.rn.f32 $1, b0, b2; }"
)


@triton.jit(do_not_specialize=["prefetch_rows"])  # one kernel for every distance the tuner tries
def fused_fwd_kernel(
    X,  # input, [M, N], row stride stride_x, unit column stride
    Y,  # output, [M, N], row stride stride_y
    W,  # weight [N] (unused unless HAS_WEIGHT)
    B,  # bias [N] (unused unless HAS_BIAS)
    Mean,  # fp32 [M], written if STORE_STATS
    Rstd,  # fp32 [M], written if STORE_STATS
    stride_x,
    stride_y,
    M,
    N,
    eps,
    prefetch_rows,  # with PREFETCH: the distance, in rows, to the rows each program pulls into L2
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    STORE_STATS: tl.constexpr,  # False for inference: nothing will read them
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # columns [0, BLOCK_N)
    TAIL_N: tl.constexpr,  # 0, or columns [BLOCK_N, BLOCK_N + TAIL_N): N=5000 as 4096 + 1024, not 8192
    VEC: tl.constexpr,
    PDL: tl.constexpr,  # launched with launch_pdl (sm_90+): see _await_previous_kernel
    PRELOAD_AFFINE: tl.constexpr,  # load w and b with x rather than after the statistics
    SINGLE_REDUCTION: tl.constexpr,  # 16-bit inputs only: sum and sum of squares in one reduction
    PREFETCH: tl.constexpr,  # sm_90+, 16-byte aligned rows: pull later rows into L2 first
    EXCHANGE_WORDS: tl.constexpr,  # > 0: zero the backward's row-slice words, [M, EXCHANGE_WORDS] after Rstd
):
    _await_previous_kernel(PDL)
    N, stride_x, stride_y = _aligned(N, VEC), _aligned(stride_x, VEC), _aligned(stride_y, VEC)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    if PREFETCH:
        _prefetch_rows_into_l2(X, rows + prefetch_rows, rows + prefetch_rows < M, stride_x, N)
    x, cols, col_ok, mask = _piece(X, rows, row_ok, stride_x, 0, N, BLOCK_N)
    if TAIL_N > 0:
        x_t, cols_t, col_ok_t, mask_t = _piece(X, rows, row_ok, stride_x, BLOCK_N, N, TAIL_N)
    shift = tl.load(X + rows.to(tl.int64) * stride_x, mask=row_ok, other=0.0).to(tl.float32)
    if PRELOAD_AFFINE:
        # In flight with x: their L2 latency no longer follows the statistics, at the cost of
        # holding them in registers through the reductions.
        w, b = _affine_params(W, B, cols, col_ok, HAS_WEIGHT, HAS_BIAS)
        if TAIL_N > 0:
            w_t, b_t = _affine_params(W, B, cols_t, col_ok_t, HAS_WEIGHT, HAS_BIAS)

    # Statistics of the shifted row.
    xs, total, squares = _shifted_sums(x, mask, shift, SINGLE_REDUCTION)
    if TAIL_N > 0:
        xs_t, total_t, squares_t = _shifted_sums(x_t, mask_t, shift, SINGLE_REDUCTION)
        total += total_t
        squares += squares_t
    mean_s = _div(total, N)
    xc = tl.where(mask, xs - mean_s[:, None], 0.0)
    if TAIL_N > 0:
        xc_t = tl.where(mask_t, xs_t - mean_s[:, None], 0.0)
    if SINGLE_REDUCTION:
        # E[xs^2] - mean_s^2 cancels a few bits (|mean_s| is of the order of the row's spread):
        # far below a 16-bit output's rounding, not below fp32's ~1e-6.
        var = tl.maximum(_div(squares, N) - mean_s * mean_s, 0.0)
    else:
        squares = tl.sum(xc * xc, axis=1)
        if TAIL_N > 0:
            squares += tl.sum(xc_t * xc_t, axis=1)
        var = _div(squares, N)
    rstd = tl.rsqrt(var + eps)

    if not PRELOAD_AFFINE:
        w, b = _affine_params(W, B, cols, col_ok, HAS_WEIGHT, HAS_BIAS)
        if TAIL_N > 0:
            w_t, b_t = _affine_params(W, B, cols_t, col_ok_t, HAS_WEIGHT, HAS_BIAS)
    _store_affine(Y, rows, stride_y, cols, mask, xc * rstd[:, None], w, b)
    if TAIL_N > 0:
        _store_affine(Y, rows, stride_y, cols_t, mask_t, xc_t * rstd[:, None], w_t, b_t)
    if STORE_STATS:
        tl.store(Mean + rows, shift + mean_s, mask=row_ok)
        tl.store(Rstd + rows, rstd, mask=row_ok)
        if EXCHANGE_WORDS > 0:
            words = _words_after_rstd(Rstd, M).to(tl.pointer_type(tl.int64))
            offsets = rows.to(tl.int64)[:, None] * EXCHANGE_WORDS + tl.arange(0, EXCHANGE_WORDS)[None, :]
            tl.store(words + offsets, tl.zeros([BLOCK_M, EXCHANGE_WORDS], dtype=tl.int64), mask=row_ok[:, None])


@triton.jit
def _words_after_rstd(Rstd, M):
    # Where the row slices' words follow the statistics: Rstd's M floats, rounded up to 16 bytes.
    return Rstd + (M + 3) // 4 * 4


@triton.jit
def two_pass_fwd_kernel(
    X,  # input, [M, N], row stride stride_x, unit column stride
    Y,  # output, [M, N], row stride stride_y
    W,  # weight [N] (unused unless HAS_WEIGHT)
    B,  # bias [N] (unused unless HAS_BIAS)
    Mean,  # fp32 [M], written if STORE_STATS
    Rstd,  # fp32 [M], written if STORE_STATS
    stride_x,
    stride_y,
    M,
    N,
    eps,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    STORE_STATS: tl.constexpr,  # False for inference: nothing will read them
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    VEC: tl.constexpr,
):
    N, stride_x, stride_y = _aligned(N, VEC), _aligned(stride_x, VEC), _aligned(stride_y, VEC)
    rows = tl.program_id(0) * BLOCK_M + tl.arange(0, BLOCK_M)
    row_ok = rows < M
    shift = tl.load(X + rows.to(tl.int64) * stride_x, mask=row_ok, other=0.0).to(tl.float32)

    # Pass 1: per-chunk mean and centered sum of squares, merged with Chan's
    # formula so no step subtracts two large, nearly equal sums.
    mean_s = tl.zeros([BLOCK_M], dtype=tl.float32)
    m2 = tl.zeros([BLOCK_M], dtype=tl.float32)
    for start in range(0, N, BLOCK_N):
        x, _, _, mask = _piece(X, rows, row_ok, stride_x, start, N, BLOCK_N)
        xs = tl.where(mask, x - shift[:, None], 0.0)
        n_seen = start * 1.0  # as fp32
        n_chunk = tl.minimum(N - start, BLOCK_N) * 1.0
        n_total = n_seen + n_chunk
        chunk_mean = _div(tl.sum(xs, axis=1), n_chunk)
        d = tl.where(mask, xs - chunk_mean[:, None], 0.0)
        delta = chunk_mean - mean_s
        mean_s += delta * _div(n_chunk, n_total)
        m2 += tl.sum(d * d, axis=1) + delta * delta * _div(n_seen * n_chunk, n_total)
    rstd = tl.rsqrt(_div(m2, N) + eps)

    # Pass 2: normalize and apply the affine transform.
    for start in range(0, N, BLOCK_N):
        x, cols, col_ok, mask = _piece(X, rows, row_ok, stride_x, start, N, BLOCK_N)
        xhat = ((x - shift[:, None]) - mean_s[:, None]) * rstd[:, None]
        _store_affine(Y, rows, stride_y, cols, mask, xhat, *_affine_params(W, B, cols, col_ok, HAS_WEIGHT, HAS_BIAS))
    if STORE_STATS:
        tl.store(Mean + rows, shift + mean_s, mask=row_ok)
        tl.store(Rstd + rows, rstd, mask=row_ok)


@triton.jit
def _store_dx(DX, rows, stride, cols, mask, g, xhat, c1, c2, rstd):
    dx = (g - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
    tl.store(DX + _row_offsets(rows, stride) + cols[None, :], dx.to(DX.dtype.element_ty), mask=mask)


@triton.jit
def _store_partials(dw_row, db_row, cols, col_ok, dw, db, HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr):
    if HAS_WEIGHT:
        tl.store(dw_row + cols, dw, mask=col_ok)
    if HAS_BIAS:
        tl.store(db_row + cols, db, mask=col_ok)


@triton.jit
def _slice_sums(x, dy, w, mean, SINGLE_REDUCTION: tl.constexpr):
    # One slice's share of c1's and c2's row sums: sum((x - mean) * g) and sum(g), g = dy * w.
    g = dy.to(tl.float32) * w
    xc_g = (x.to(tl.float32) - mean) * g
    if SINGLE_REDUCTION:
        return tl.reduce((xc_g, g), 0, _sum_pair)
    return tl.sum(xc_g), tl.sum(g)


@triton.jit
def _backward_in_slices(X, DY, DX, Mean, Rstd, Exchange, stride_x, stride_dy, stride_dx, M, N, cols, col_ok, w,
                        group, groups, slice, first, prefetch_rows, SLICES: tl.constexpr, NUM_STAGES: tl.constexpr,
                        SINGLE_REDUCTION: tl.constexpr, FINISH_LATE: tl.constexpr, PREFETCH: tl.constexpr,
                        EXCHANGE_AFTER_RSTD: tl.constexpr, BLOCK_N: tl.constexpr):  # fmt: skip
    # Rows group, group + groups, ..., each split over SLICES programs; returns this slice's dw and db sums.
    # A step loads its row's slice and publishes its sums, then finishes a row once every slice's sums are
    # in: its dx, and its terms of dw and db. FINISH_LATE: the previous row, loaded again, whose other
    # slices' sums had this step's loads and sums to arrive, so that the exchange's latency no longer adds
    # to every step. The pipeliner issues a row's second load a step after its first, while the row is still
    # in L2: it costs shared memory (twice the pipeline's), not DRAM traffic; kept in registers, it would spill.
    dw = tl.zeros_like(w)
    db = tl.zeros_like(w)
    first_row = group
    if FINISH_LATE:
        x, dy, mean, _ = _slice_of_row(X, DY, Mean, Rstd, group, stride_x, stride_dy, cols, col_ok)
        _publish_slice_sums(Exchange, group, *_slice_sums(x, dy, w, mean, SINGLE_REDUCTION), slice, SLICES)
        first_row += groups
    for row in tl.range(first_row, M, groups, num_stages=NUM_STAGES):
        if PREFETCH:  # this slice of x and dy prefetch_rows rows on, a row this group reaches later
            ahead = row + prefetch_rows + tl.zeros([1], dtype=tl.int32)
            width = tl.minimum(N - first, BLOCK_N)
            _prefetch_rows_into_l2(X + first, ahead, ahead < M, stride_x, width)
            _prefetch_rows_into_l2(DY + first, ahead, ahead < M, stride_dy, width)
        if EXCHANGE_AFTER_RSTD and not FINISH_LATE:
            # Words the forward zeroed have left L2, and this step polls its row's right after publishing:
            # the next row's words into L2 now.
            words, ahead = 2 if SLICES == 2 else 4, row + groups + tl.zeros([1], dtype=tl.int32)
            issue = (ahead < M) & (slice == 0)
            _prefetch_rows_into_l2(Exchange.to(tl.pointer_type(tl.int64)), ahead, issue, words, words)
        x, dy, mean, rstd = _slice_of_row(X, DY, Mean, Rstd, row, stride_x, stride_dy, cols, col_ok)
        _publish_slice_sums(Exchange, row, *_slice_sums(x, dy, w, mean, SINGLE_REDUCTION), slice, SLICES)
        finished = row
        if FINISH_LATE:
            finished -= groups
            x, dy, mean, rstd = _slice_of_row(X, DY, Mean, Rstd, finished, stride_x, stride_dy, cols, col_ok)
        dw, db = _finish_sliced_row(
            DX, Exchange, finished, stride_dx, N, cols, col_ok, x, dy, w, mean, rstd, dw, db, SLICES
        )
    if FINISH_LATE:
        last = group + (M - 1 - group) // groups * groups
        x, dy, mean, rstd = _slice_of_row(X, DY, Mean, Rstd, last, stride_x, stride_dy, cols, col_ok)
        dw, db = _finish_sliced_row(
            DX, Exchange, last, stride_dx, N, cols, col_ok, x, dy, w, mean, rstd, dw, db, SLICES
        )
    return dw, db


@triton.jit
def _slice_of_row(X, DY, Mean, Rstd, row, stride_x, stride_dy, cols, col_ok):
    # x and dy over this slice's columns of the row, as stored, and the row's statistics.
    x = tl.load(X + row.to(tl.int64) * stride_x + cols, mask=col_ok, other=0.0)
    dy = tl.load(DY + row.to(tl.int64) * stride_dy + cols, mask=col_ok, other=0.0)
    return x, dy, tl.load(Mean + row), tl.load(Rstd + row)


@triton.jit
def _finish_sliced_row(DX, Exchange, row, stride_dx, N, cols, col_ok, x, dy, w, mean, rstd, dw, db,
                       SLICES: tl.constexpr):  # fmt: skip
    # Once every slice's sums of the row are in: its slice of dx, and dw and db with its terms added.
    sum_xc_g, sum_g = _row_sums_of_slices(Exchange, row, SLICES)
    dy = dy.to(tl.float32)
    g = dy * w
    xhat = (x.to(tl.float32) - mean) * rstd
    dx = (g - (xhat * _div(sum_xc_g * rstd, N) + _div(sum_g, N))) * rstd
    tl.store(DX + row.to(tl.int64) * stride_dx + cols, dx.to(DX.dtype.element_ty), mask=col_ok)
    return dw + dy * xhat, db + dy


@triton.jit(do_not_specialize=["prefetch_rows"])
def fused_bwd_kernel(
    X,  # forward input, [M, N], row stride stride_x
    DY,  # output gradient, [M, N], row stride stride_dy
    DX,  # input gradient, [M, N], row stride stride_dx, written
    W,  # weight [N] (unused unless HAS_WEIGHT)
    Mean,  # fp32 [M], from the forward
    Rstd,  # fp32 [M], from the forward
    Partial,  # fp32 [HAS_WEIGHT + HAS_BIAS, groups, N]: per group, sums of dy * xhat and of dy; then, with
    # SLICES > 1 and not EXCHANGE_AFTER_RSTD, the slices' words (_exchange_words)
    stride_x,
    stride_dy,
    stride_dx,
    M,
    N,
    prefetch_rows,  # with PREFETCH: the distance, in rows, to the x and dy rows each step pulls into L2
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,  # columns [0, BLOCK_N)
    TAIL_N: tl.constexpr,  # 0, or columns [BLOCK_N, BLOCK_N + TAIL_N), as in the forward
    VEC: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # > 1: the next row blocks' x, dy load (cp.async) during this one's math
    SINGLE_REDUCTION: tl.constexpr,  # c1's and c2's row sums in one cross-warp exchange per piece
    PREFETCH: tl.constexpr,  # sm_90+, 16-byte aligned rows: pull later rows into L2 first
    SLICES: tl.constexpr,  # > 1 (TAIL_N = 0): each row's columns split over SLICES programs of BLOCK_N
    FINISH_LATE: tl.constexpr,  # SLICES > 1: a step finishes the previous row (_backward_in_slices)
    EXCHANGE_AFTER_RSTD: tl.constexpr,  # SLICES > 1: the words follow Rstd, zeroed by the forward
):
    N, stride_x = _aligned(N, VEC), _aligned(stride_x, VEC)
    stride_dy, stride_dx = _aligned(stride_dy, VEC), _aligned(stride_dx, VEC)
    # Persistent: the programs form groups of SLICES, one per slice of columns; group g handles row
    # blocks g, g + groups, ...
    pid = tl.program_id(0)
    group, groups, first = pid, tl.num_programs(0), 0
    if SLICES > 1:
        group, groups, first = pid // SLICES, tl.num_programs(0) // SLICES, pid % SLICES * BLOCK_N
        if EXCHANGE_AFTER_RSTD:
            exchange = _words_after_rstd(Rstd, M)
        else:
            exchange = Partial + ((HAS_WEIGHT + HAS_BIAS) * groups.to(tl.int64) * N + 3) // 4 * 4  # 16-byte aligned
    blocks = tl.cdiv(M, BLOCK_M)
    cols = first + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    w = _param_piece(W, cols, col_ok, HAS_WEIGHT, 1.0).to(tl.float32)  # ones: g = dy exactly
    dw = tl.zeros([BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_N], dtype=tl.float32)
    if TAIL_N > 0:
        cols_t = BLOCK_N + tl.arange(0, TAIL_N)
        col_ok_t = cols_t < N
        w_t = _param_piece(W, cols_t, col_ok_t, HAS_WEIGHT, 1.0).to(tl.float32)
        dw_t = tl.zeros([TAIL_N], dtype=tl.float32)
        db_t = tl.zeros([TAIL_N], dtype=tl.float32)
    if SLICES > 1:  # one row a step (BLOCK_M = 1)
        dw, db = _backward_in_slices(X, DY, DX, Mean, Rstd, exchange, stride_x, stride_dy, stride_dx, M, N, cols,
                                     col_ok, w, group, groups, pid % SLICES, first, prefetch_rows, SLICES, NUM_STAGES,
                                     SINGLE_REDUCTION, FINISH_LATE, PREFETCH, EXCHANGE_AFTER_RSTD, BLOCK_N)  # fmt: skip
    else:
        for block in tl.range(group, blocks, groups, num_stages=NUM_STAGES):
            rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
            row_ok = rows < M
            if PREFETCH:
                ahead = rows + prefetch_rows
                _prefetch_rows_into_l2(X, ahead, ahead < M, stride_x, N)
                _prefetch_rows_into_l2(DY, ahead, ahead < M, stride_dy, N)
            x, _, _, mask = _piece(X, rows, row_ok, stride_x, first, N, BLOCK_N)
            dy, _, _, _ = _piece(DY, rows, row_ok, stride_dy, first, N, BLOCK_N)
            if TAIL_N > 0:
                x_t, _, _, mask_t = _piece(X, rows, row_ok, stride_x, BLOCK_N, N, TAIL_N)
                dy_t, _, _, _ = _piece(DY, rows, row_ok, stride_dy, BLOCK_N, N, TAIL_N)
            mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
            rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
            # Masked lanes load x = dy = 0, so g = 0 there and need no masking of their own, as long
            # as what multiplies g stays finite: x - mean does, while xhat = -mean * rstd overflows
            # past |mean| ~ 1e36. So c1 takes rstd after the row sum; where xhat is inf, dx and dw
            # lanes are past N and never stored.
            xc = x - mean[:, None]
            g = dy * w[None, :]
            sum_xc_g, sum_g = _row_sum_pair(xc * g, g, SINGLE_REDUCTION)
            if TAIL_N > 0:
                xc_t = x_t - mean[:, None]
                g_t = dy_t * w_t[None, :]
                sum_xc_g_t, sum_g_t = _row_sum_pair(xc_t * g_t, g_t, SINGLE_REDUCTION)
                sum_xc_g += sum_xc_g_t
                sum_g += sum_g_t
            xhat = xc * rstd[:, None]
            c1 = _div(sum_xc_g * rstd, N)
            c2 = _div(sum_g, N)
            _store_dx(DX, rows, stride_dx, cols, mask, g, xhat, c1, c2, rstd)
            dw += tl.sum(dy * xhat, axis=0)
            db += tl.sum(dy, axis=0)
            if TAIL_N > 0:
                xhat_t = xc_t * rstd[:, None]
                _store_dx(DX, rows, stride_dx, cols_t, mask_t, g_t, xhat_t, c1, c2, rstd)
                dw_t += tl.sum(dy_t * xhat_t, axis=0)
                db_t += tl.sum(dy_t, axis=0)
    dw_row, db_row = _partial_rows(Partial, N, group, groups, HAS_WEIGHT)
    _store_partials(dw_row, db_row, cols, col_ok, dw, db, HAS_WEIGHT, HAS_BIAS)
    if TAIL_N > 0:
        _store_partials(dw_row, db_row, cols_t, col_ok_t, dw_t, db_t, HAS_WEIGHT, HAS_BIAS)


@triton.jit
def two_pass_bwd_kernel(
    X,  # forward input, [M, N], row stride stride_x
    DY,  # output gradient, [M, N], row stride stride_dy
    DX,  # input gradient, [M, N], row stride stride_dx, written
    W,  # weight [N] (unused unless HAS_WEIGHT)
    Mean,  # fp32 [M], from the forward
    Rstd,  # fp32 [M], from the forward
    Partial,  # fp32 [HAS_WEIGHT + HAS_BIAS, programs, N]: per program, sums of dy * xhat and of dy
    stride_x,
    stride_dy,
    stride_dx,
    M,
    N,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
    VEC: tl.constexpr,
    NUM_STAGES: tl.constexpr,  # > 1: the next chunks' x and dy load (cp.async) during this one's math
    PARTIAL_SUMS: tl.constexpr,  # False: dx only (column_grads_kernel sums dw and db)
):
    N, stride_x = _aligned(N, VEC), _aligned(stride_x, VEC)
    stride_dy, stride_dx = _aligned(stride_dy, VEC), _aligned(stride_dx, VEC)
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    dw_row, db_row = _partial_rows(Partial, N, pid, programs, HAS_WEIGHT)
    # dx only: pass 1 asks L2 to keep the row block's x and dy, pass 2 reads them there once more and
    # lets them go. With partial sums, those rows share L2 with the program's partial rows.
    keep: tl.constexpr = "" if PARTIAL_SUMS else "evict_last"
    release: tl.constexpr = "" if PARTIAL_SUMS else "evict_first"
    for block in range(pid, tl.cdiv(M, BLOCK_M), programs):
        rows = block * BLOCK_M + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        x_rows = X + _row_offsets(rows, stride_x)
        dy_rows = DY + _row_offsets(rows, stride_dy)
        mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
        rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)

        # Pass 1: the two row reductions c1 and c2.
        sum_xhat_g = tl.zeros([BLOCK_M], dtype=tl.float32)
        sum_g = tl.zeros([BLOCK_M], dtype=tl.float32)
        for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
            col_ok = start + cols < N
            mask = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_rows + start + cols[None, :], mask=mask, other=0.0, eviction_policy=keep).to(tl.float32)
            g = tl.load(dy_rows + start + cols[None, :], mask=mask, other=0.0, eviction_policy=keep).to(tl.float32)
            if HAS_WEIGHT:
                g = g * tl.load(W + start + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            sum_xhat_g += tl.sum(xhat * g, axis=1)
            sum_g += tl.sum(g, axis=1)
        c1 = _div(sum_xhat_g, N)
        c2 = _div(sum_g, N)

        # Pass 2: dx, and this block's share of dw and db.
        for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
            col_ok = start + cols < N
            mask = row_ok[:, None] & col_ok[None, :]
            x = tl.load(x_rows + start + cols[None, :], mask=mask, other=0.0, eviction_policy=release).to(tl.float32)
            dy = tl.load(dy_rows + start + cols[None, :], mask=mask, other=0.0, eviction_policy=release).to(tl.float32)
            g = dy
            if HAS_WEIGHT:
                g = dy * tl.load(W + start + cols, mask=col_ok, other=0.0).to(tl.float32)[None, :]
            xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            _store_dx(DX, rows, stride_dx, start + cols, mask, g, xhat, c1, c2, rstd)
            # Each program owns its partial row, so plain read-modify-write is safe. Its first
            # row block writes the row without reading it: the buffer needs no zeroing.
            if HAS_WEIGHT and PARTIAL_SUMS:
                dw = tl.load(dw_row + start + cols, mask=col_ok & (block != pid), other=0.0)
                tl.store(dw_row + start + cols, dw + tl.sum(dy * xhat, axis=0), mask=col_ok)
            if HAS_BIAS and PARTIAL_SUMS:
                db = tl.load(db_row + start + cols, mask=col_ok & (block != pid), other=0.0)
                tl.store(db_row + start + cols, db + tl.sum(dy, axis=0), mask=col_ok)


@triton.jit
def column_grads_kernel(
    X,  # forward input, [M, N], row stride stride_x
    DY,  # output gradient, [M, N], row stride stride_dy
    Mean,  # fp32 [M], from the forward
    Rstd,  # fp32 [M], from the forward
    DW,  # [N], written in its own dtype (unused unless HAS_WEIGHT)
    DB,  # [N], written in its own dtype (unused unless HAS_BIAS)
    stride_x,
    stride_dy,
    M,
    N,
    HAS_WEIGHT: tl.constexpr,
    HAS_BIAS: tl.constexpr,
    BLOCK_M: tl.constexpr,
    BLOCK_N: tl.constexpr,
):
    # dw = sum over rows of dy * xhat and db = sum of dy, for BLOCK_N columns, reading x and dy once
    # more: the two_pass backward's alternative to per-program partial rows (PARTIAL_SUMS=False).
    # Nothing reads them after it: L2 may let them go.
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    dw = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    db = tl.zeros([BLOCK_M, BLOCK_N], dtype=tl.float32)
    for start in range(0, M, BLOCK_M):
        rows = start + tl.arange(0, BLOCK_M)
        row_ok = rows < M
        mask = row_ok[:, None] & col_ok[None, :]
        dy_at = DY + _row_offsets(rows, stride_dy) + cols[None, :]
        dy = tl.load(dy_at, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
        if HAS_WEIGHT:
            x_at = X + _row_offsets(rows, stride_x) + cols[None, :]
            x = tl.load(x_at, mask=mask, other=0.0, eviction_policy="evict_first").to(tl.float32)
            mean = tl.load(Mean + rows, mask=row_ok, other=0.0)
            rstd = tl.load(Rstd + rows, mask=row_ok, other=0.0)
            dw += dy * tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
        db += dy
    if HAS_WEIGHT:
        tl.store(DW + cols, tl.sum(dw, axis=0).to(DW.dtype.element_ty), mask=col_ok)
    if HAS_BIAS:
        tl.store(DB + cols, tl.sum(db, axis=0).to(DB.dtype.element_ty), mask=col_ok)


@triton.jit
def column_sum_kernel(
    Partial,  # fp32 [slabs, G, N]; slab s is summed over G into Out<s> (grid axis 1: the slab)
    Out0,  # [N], written in its own dtype
    Out1,  # [N], written in its own dtype (unused with one slab)
    Rstd,  # with EXCHANGE_WORDS: the statistics the row kernel read, its row slices' words after them
    G,
    N,
    M,
    BLOCK_G: tl.constexpr,
    BLOCK_N: tl.constexpr,
    PDL: tl.constexpr,  # launched with launch_pdl (sm_90+): see _await_previous_kernel
    EXCHANGE_WORDS: tl.constexpr,  # > 0: zero the row kernel's words, that many a row, for the next launch
):
    _await_previous_kernel(PDL)
    if EXCHANGE_WORDS > 0:  # the row kernel has finished with them
        words = _words_after_rstd(Rstd, M).to(tl.pointer_type(tl.int64))
        program = tl.program_id(1) * tl.num_programs(0) + tl.program_id(0)
        programs = tl.num_programs(0) * tl.num_programs(1)
        for start in range(program * 256, M * EXCHANGE_WORDS, programs * 256):
            offsets = start + tl.arange(0, 256)
            tl.store(words + offsets, tl.zeros([256], dtype=tl.int64), mask=offsets < M * EXCHANGE_WORDS)
    slab = tl.program_id(1)
    cols = tl.program_id(0) * BLOCK_N + tl.arange(0, BLOCK_N)
    col_ok = cols < N
    rows = Partial + slab.to(tl.int64) * G * N
    acc = tl.zeros([BLOCK_N], dtype=tl.float32)
    for start in range(0, G, BLOCK_G):
        g = start + tl.arange(0, BLOCK_G)
        mask = (g < G)[:, None] & col_ok[None, :]
        # int64: G * N passes 2**31 for rows of millions of elements.
        acc += tl.sum(tl.load(rows + _row_offsets(g, N) + cols[None, :], mask=mask, other=0.0), axis=0)
    if slab == 0:
        tl.store(Out0 + cols, acc.to(Out0.dtype.element_ty), mask=col_ok)
    else:
        tl.store(Out1 + cols, acc.to(Out1.dtype.element_ty), mask=col_ok)
