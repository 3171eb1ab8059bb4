"""TileLang kernels for GQA flash attention over packed variable-length sequences.

Layout (flash-attn's varlen convention): tokens of all sequences are packed along
dim 0, so Q is ``(total_q, heads, dim_qk)``, K ``(total_k, heads_kv, dim_qk)``,
V ``(total_k, heads_kv, dim_v)`` and O ``(total_q, heads, dim_v)``. Sequence ``b``
owns rows ``cu_seqlens[b]:cu_seqlens[b + 1]``. Query head ``h`` reads key/value
head ``h // groups`` (grouped-query attention, ``groups = heads // heads_kv``).
LSE and Delta are float32 ``(heads, total_q)``; LSE is in natural-log units.

Causal masking is aligned bottom-right, as in flash-attn's varlen kernels: query
``i`` of a sequence sees key ``j`` when ``j <= i + seqlen_k - seqlen_q``. A query
row that sees no key gets O = 0 and LSE = +inf (so its backward terms vanish).

Each builder returns a ``T.prim_func``; token counts and the batch size are
symbolic, so one compiled kernel serves every length mix of a configuration.

Backward (FlashAttention-2, one program per key/value tile and query head):

    P  = exp(scale * Q K^T - LSE)          dV += P^T dO
    dP = dO V^T                            dS  = P * (dP - Delta),  Delta = rowsum(O * dO)
    dK += scale * dS^T Q                   dQ += scale * dS K

dQ gets a contribution from every key tile and dK/dV from every query head of the
group, so all three are summed in float32 accumulators in global memory. The
``accum`` argument selects how a tile is added there; the three modes differ only
in that step (see ``tile_accumulator``):

* ``"elem"``: one scalar atomic add per element.
* ``"region"``: the tile is staged in shared memory and added by one tile-region
  ``T.atomic_add``, which TileLang lowers to 128-bit vector reductions
  (``AtomicAddx4``, SASS ``REDG.E.ADD.F32x4``).
* ``"tma"``: the same staged tile is added by TMA bulk tensor reductions
  (``cp.reduce.async.bulk.tensor``, SASS ``UTMAREDG``; sm_90+), issued by one thread.

A tile may run past the end of its sequence, and a TMA reduction cannot be
predicated per row. The accumulators therefore give every sequence ``pad`` spare
rows after its own (row ``t + b * pad`` holds token ``t`` of sequence ``b``, see
``accumulator_rows``), so a tile's overhang lands in padding that no one reads;
the postprocess kernel drops it while casting to the output dtype.
"""

import tilelang
import tilelang.language as T

ACCUM_MODES = ("elem", "region", "tma")
LOG2E = 1.4426950408889634
LN2 = 0.6931471805599453

# exp2 through the fast hardware approximation (ex2.approx, 2 ulp), as FlashAttention does.
PASS_CONFIGS = {tilelang.PassConfigKey.TL_ENABLE_FAST_MATH: True}

ACCUM_DTYPE = "float32"
FULL_ROW = T.GemmWarpPolicy.FullRow


def accumulator_rows(total_tokens, batch: int, pad: int):
    """Rows of a padded float32 accumulator: every sequence is followed by ``pad`` spare rows."""
    return total_tokens + batch * pad


def _visible(row_q, row_k, len_q, len_k, causal: bool):
    """Whether query ``row_q`` attends to key ``row_k`` (sequence-local indices)."""
    in_bounds = T.And(row_q < len_q, row_k < len_k)
    if causal:
        return T.And(in_bounds, row_k <= row_q + (len_k - len_q))
    return in_bounds


def forward_kernel(
    heads: int,
    heads_kv: int,
    dim_qk: int,
    dim_v: int,
    dtype: str,
    causal: bool,
    block_m: int,
    block_n: int,
    num_stages: int,
    threads: int,
):
    """O = softmax(scale * Q K^T) V and its LSE; one program per (query tile, head, sequence)."""
    groups = heads // heads_kv
    total_q, total_k, batch = T.dynamic("total_q"), T.dynamic("total_k"), T.dynamic("batch")

    @T.prim_func
    def attention_forward(
        Q: T.Tensor([total_q, heads, dim_qk], dtype),
        K: T.Tensor([total_k, heads_kv, dim_qk], dtype),
        V: T.Tensor([total_k, heads_kv, dim_v], dtype),
        cu_seqlens_q: T.Tensor([batch + 1], "int32"),
        cu_seqlens_k: T.Tensor([batch + 1], "int32"),
        max_seqlen_q: T.int32,
        softmax_scale: T.float32,
        Out: T.Tensor([total_q, heads, dim_v], dtype),
        LSE: T.Tensor([heads, total_q], ACCUM_DTYPE),
    ):
        with T.Kernel(T.ceildiv(max_seqlen_q, block_m), heads, batch, threads=threads) as (q_tile, head, seq):
            Q_shared = T.alloc_shared([block_m, dim_qk], dtype)
            K_shared = T.alloc_shared([block_n, dim_qk], dtype)
            V_shared = T.alloc_shared([block_n, dim_v], dtype)
            O_shared = T.alloc_shared([block_m, dim_v], dtype)
            scores = T.alloc_fragment([block_m, block_n], ACCUM_DTYPE)
            probs = T.alloc_fragment([block_m, block_n], dtype)
            acc_o = T.alloc_fragment([block_m, dim_v], ACCUM_DTYPE)
            row_max = T.alloc_fragment([block_m], ACCUM_DTYPE)
            row_max_prev = T.alloc_fragment([block_m], ACCUM_DTYPE)
            row_shift = T.alloc_fragment([block_m], ACCUM_DTYPE)  # scale * log2(e) * running max, 0 if none
            row_rescale = T.alloc_fragment([block_m], ACCUM_DTYPE)
            row_sum = T.alloc_fragment([block_m], ACCUM_DTYPE)
            denom = T.alloc_fragment([block_m], ACCUM_DTYPE)

            q_start = cu_seqlens_q[seq]
            len_q = cu_seqlens_q[seq + 1] - q_start
            k_start = cu_seqlens_k[seq]
            len_k = cu_seqlens_k[seq + 1] - k_start
            m0 = q_tile * block_m
            kv_head = head // groups
            log2_scale = softmax_scale * LOG2E
            # Keys past the diagonal of this tile's last row are masked for all of its rows.
            kv_end = T.min(len_k, m0 + block_m + len_k - len_q) if causal else len_k
            # A tile past the end of its sequence runs no iteration and stores nothing.
            kv_tiles = T.if_then_else(m0 < len_q, T.ceildiv(T.max(kv_end, 0), block_n), 0)

            T.fill(acc_o, 0)
            T.fill(denom, 0)
            T.fill(row_max, -T.infinity(ACCUM_DTYPE))
            T.fill(row_shift, 0)
            T.copy(Q[q_start + m0 : q_start + m0 + block_m, head, :], Q_shared)
            for kv_tile in T.Pipelined(kv_tiles, num_stages=num_stages):
                n0 = kv_tile * block_n
                T.copy(K[k_start + n0 : k_start + n0 + block_n, kv_head, :], K_shared)
                T.copy(V[k_start + n0 : k_start + n0 + block_n, kv_head, :], V_shared)
                T.clear(scores)
                T.gemm(Q_shared, K_shared, scores, transpose_B=True, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_m, block_n):
                    visible = _visible(m0 + i, n0 + j, len_q, len_k, causal)
                    scores[i, j] = T.if_then_else(visible, scores[i, j], -T.infinity(ACCUM_DTYPE))
                # Online softmax. A row with no visible key so far keeps max = -inf; it is
                # shifted by 0 instead so that exp2 gives 0 rather than NaN (-inf + inf).
                T.copy(row_max, row_max_prev)
                T.reduce_max(scores, row_max, dim=1, clear=False)
                for i in T.Parallel(block_m):
                    row_shift[i] = T.if_then_else(row_max[i] == -T.infinity(ACCUM_DTYPE), 0, row_max[i] * log2_scale)
                    row_rescale[i] = T.exp2(row_max_prev[i] * log2_scale - row_shift[i])
                for i, j in T.Parallel(block_m, block_n):
                    scores[i, j] = T.exp2(scores[i, j] * log2_scale - row_shift[i])
                T.reduce_sum(scores, row_sum, dim=1)
                for i in T.Parallel(block_m):
                    denom[i] = denom[i] * row_rescale[i] + row_sum[i]
                for i, j in T.Parallel(block_m, dim_v):
                    acc_o[i, j] *= row_rescale[i]
                T.copy(scores, probs)
                T.gemm(probs, V_shared, acc_o, policy=T.GemmWarpPolicy.FullRow)

            for i, j in T.Parallel(block_m, dim_v):
                acc_o[i, j] = T.if_then_else(denom[i] > 0, acc_o[i, j] / denom[i], 0)
            T.copy(acc_o, O_shared)
            # Rows past the sequence belong to the next one: store only this sequence's rows.
            for i, j in T.Parallel(block_m, dim_v):
                if m0 + i < len_q:
                    Out[q_start + m0 + i, head, j] = O_shared[i, j]
            for i in T.Parallel(block_m):
                if m0 + i < len_q:
                    LSE[head, q_start + m0 + i] = T.if_then_else(
                        denom[i] > 0, (T.log2(denom[i]) + row_shift[i]) * LN2, T.infinity(ACCUM_DTYPE)
                    )

    return attention_forward


def backward_preprocess_kernel(heads: int, dim_v: int, dtype: str, block: int, threads: int):
    """Delta = rowsum(O * dO), float32 (heads, total_q); one program per (token tile, head)."""
    total_q = T.dynamic("total_q")

    @T.prim_func
    def attention_backward_preprocess(
        Out: T.Tensor([total_q, heads, dim_v], dtype),
        dO: T.Tensor([total_q, heads, dim_v], dtype),
        Delta: T.Tensor([heads, total_q], ACCUM_DTYPE),
    ):
        with T.Kernel(T.ceildiv(total_q, block), heads, threads=threads) as (tile, head):
            o = T.alloc_fragment([block, dim_v], dtype)
            do = T.alloc_fragment([block, dim_v], dtype)
            prod = T.alloc_fragment([block, dim_v], ACCUM_DTYPE)
            delta = T.alloc_fragment([block], ACCUM_DTYPE)
            t0 = tile * block
            T.copy(Out[t0 : t0 + block, head, :], o)
            T.copy(dO[t0 : t0 + block, head, :], do)
            for i, j in T.Parallel(block, dim_v):
                prod[i, j] = T.Cast(ACCUM_DTYPE, o[i, j]) * T.Cast(ACCUM_DTYPE, do[i, j])
            T.reduce_sum(prod, delta, dim=1)
            for i in T.Parallel(block):
                if t0 + i < total_q:
                    Delta[head, t0 + i] = delta[i]

    return attention_backward_preprocess


def _staging(accum: str, shape):
    """Shared memory that region and tma modes add a tile from; elem adds straight from registers.

    A register fragment keeps the MMA layout (two adjacent floats per thread), so a region add
    from it is only 64 bits wide; from shared memory TileLang lays it out for 128-bit reductions.
    """
    return T.alloc_shared(shape, ACCUM_DTYPE) if accum in ("region", "tma") else None


def tile_accumulator(accum: str, transposed: bool = False):
    """A macro ``add(acc, row0, head, tile, staging)`` that adds the float32 fragment ``tile``
    into ``acc[row0 : row0 + rows, head, :]``: the one step in which the three modes differ.
    ``staging`` is a shared buffer of the added block's shape (region and tma, see ``_staging``).
    A ``transposed`` tile holds the block as (columns, rows) and is added transposed."""

    def element(tile, i, j):
        return tile[j, i] if transposed else tile[i, j]

    def block_shape(tile):
        return tile.shape[::-1] if transposed else tile.shape

    if accum == "elem":

        @T.macro
        def add_each_element(acc, row0, head, tile, staging):
            # An opaque call to CUDA's scalar atomicAdd: TileLang's loop vectorizer fuses the
            # T.atomic_add element form into AtomicAddx2/x4, which would erase this baseline.
            for i, j in T.Parallel(*block_shape(tile)):
                T.call_extern("handle", "atomicAdd", T.address_of(acc[row0 + i, head, j]), element(tile, i, j))

        return add_each_element
    if accum not in ("region", "tma"):
        raise ValueError(f"accum must be one of {ACCUM_MODES}, got {accum!r}")

    @T.macro
    def add_from_shared(acc, row0, head, tile, staging):
        for i, j in T.Parallel(*block_shape(tile)):
            staging[i, j] = element(tile, i, j)
        # region: 128-bit vector atomics over the staged tile; tma: bulk tensor reductions.
        T.atomic_add(acc[row0 : row0 + staging.shape[0], head, :], staging, use_tma=accum == "tma")

    return add_from_shared


@T.macro
def read_per_query(src, dst, head, q_start, n0, len_q):
    """dst[i, j] = src[head, token of query column n0 + j]: LSE or Delta laid out like S^T.

    Read from global memory (L1-cached) by the threads that use them. Staged in shared
    memory they would be element copies in the producer warps, and TileLang then drops
    the producer/consumer register split (512 threads at 128 registers: heavy spills).
    The query is clamped into the sequence (len_q > 0 where this runs): no branch.
    """
    for i, j in T.Parallel(*dst.shape):
        dst[i, j] = src[head, q_start + T.min(n0 + j, len_q - 1)]


def backward_kernel(
    heads: int,
    heads_kv: int,
    dim_qk: int,
    dim_v: int,
    dtype: str,
    causal: bool,
    accum: str,
    block_m: int,
    block_n: int,
    pad: int,
    num_stages: int,
    threads: int,
    wgmma: bool = False,
):
    """dQ, dK, dV summed into padded float32 accumulators (zeroed by the caller).

    One program per (query head, key tile of ``block_m`` rows, sequence); it walks
    the query tiles of ``block_n`` rows that can see its keys. ``pad`` >= both
    block sizes is the accumulators' per-sequence padding. ``wgmma`` (sm_90 only)
    overlaps the two score products with the softmax through asynchronous wgmma.
    """
    accumulate = tile_accumulator(accum)
    accumulate_transposed = tile_accumulator(accum, transposed=True)
    if pad < max(block_m, block_n):
        raise ValueError(f"pad ({pad}) must cover a whole tile ({max(block_m, block_n)} rows)")
    groups = heads // heads_kv
    total_q, total_k, batch = T.dynamic("total_q"), T.dynamic("total_k"), T.dynamic("batch")

    @T.prim_func
    def attention_backward(
        Q: T.Tensor([total_q, heads, dim_qk], dtype),
        K: T.Tensor([total_k, heads_kv, dim_qk], dtype),
        V: T.Tensor([total_k, heads_kv, dim_v], dtype),
        dO: T.Tensor([total_q, heads, dim_v], dtype),
        LSE: T.Tensor([heads, total_q], ACCUM_DTYPE),
        Delta: T.Tensor([heads, total_q], ACCUM_DTYPE),
        cu_seqlens_q: T.Tensor([batch + 1], "int32"),
        cu_seqlens_k: T.Tensor([batch + 1], "int32"),
        max_seqlen_k: T.int32,
        softmax_scale: T.float32,
        dQ_acc: T.Tensor([accumulator_rows(total_q, batch, pad), heads, dim_qk], ACCUM_DTYPE),
        dK_acc: T.Tensor([accumulator_rows(total_k, batch, pad), heads_kv, dim_qk], ACCUM_DTYPE),
        dV_acc: T.Tensor([accumulator_rows(total_k, batch, pad), heads_kv, dim_v], ACCUM_DTYPE),
    ):
        with T.Kernel(heads, T.ceildiv(max_seqlen_k, block_m), batch, threads=threads) as (head, kv_tile, seq):
            K_shared = T.alloc_shared([block_m, dim_qk], dtype)
            V_shared = T.alloc_shared([block_m, dim_v], dtype)
            Q_shared = T.alloc_shared([block_n, dim_qk], dtype)
            dO_shared = T.alloc_shared([block_n, dim_v], dtype)
            dsT_shared = T.alloc_shared([block_m, block_n], dtype)
            dq_staging = _staging(accum, [block_n, dim_qk])
            dk_staging = _staging(accum, [block_m, dim_qk])
            dv_staging = _staging(accum, [block_m, dim_v])
            scoresT = T.alloc_fragment([block_m, block_n], ACCUM_DTYPE)  # becomes P^T
            dpT = T.alloc_fragment([block_m, block_n], ACCUM_DTYPE)
            pT_cast = T.alloc_fragment([block_m, block_n], dtype)
            dsT_cast = T.alloc_fragment([block_m, block_n], dtype)
            dk = T.alloc_fragment([block_m, dim_qk], ACCUM_DTYPE)
            dv = T.alloc_fragment([block_m, dim_v], ACCUM_DTYPE)
            dqT = T.alloc_fragment([dim_qk, block_n], ACCUM_DTYPE)
            per_query = T.alloc_fragment([block_m, block_n], ACCUM_DTYPE)  # LSE, then Delta, of column j

            q_start = cu_seqlens_q[seq]
            len_q = cu_seqlens_q[seq + 1] - q_start
            k_start = cu_seqlens_k[seq]
            len_k = cu_seqlens_k[seq + 1] - k_start
            m0 = kv_tile * block_m
            kv_head = head // groups
            log2_scale = softmax_scale * LOG2E
            # Causal: the first query that sees key m0 is m0 - (len_k - len_q); earlier tiles are skipped.
            first_q = T.max(m0 - (len_k - len_q), 0) if causal else 0
            q_tile_end = T.if_then_else(m0 < len_k, T.ceildiv(len_q, block_n), 0)
            q_tile_begin = T.min(first_q // block_n, q_tile_end)
            dq_row0 = q_start + seq * pad  # this sequence's first row in the padded accumulators
            dkv_row0 = k_start + seq * pad + m0

            # No `if` around the K/V loads: TileLang's warp specialization mis-scopes the
            # sequence-length lets inside one. A tile past the sequence runs no iteration.
            T.clear(dk)
            T.clear(dv)
            T.copy(K[k_start + m0 : k_start + m0 + block_m, kv_head, :], K_shared)
            T.copy(V[k_start + m0 : k_start + m0 + block_m, kv_head, :], V_shared)
            for q_tile in T.Pipelined(q_tile_begin, q_tile_end, num_stages=num_stages):
                n0 = q_tile * block_n
                T.copy(Q[q_start + n0 : q_start + n0 + block_n, head, :], Q_shared)
                T.copy(dO[q_start + n0 : q_start + n0 + block_n, head, :], dO_shared)
                if wgmma:
                    # S^T = K Q^T and dP^T = V dO^T are issued back to back without waiting
                    # (async wgmma): the tensor cores run them while the threads read LSE.
                    T.wgmma_gemm(K_shared, Q_shared, scoresT, transpose_B=True, policy=FULL_ROW, clear_accum=True)
                    T.wgmma_gemm(V_shared, dO_shared, dpT, transpose_B=True, policy=FULL_ROW, clear_accum=True)
                else:
                    T.gemm(K_shared, Q_shared, scoresT, transpose_B=True, policy=FULL_ROW, clear_accum=True)
                    T.gemm(V_shared, dO_shared, dpT, transpose_B=True, policy=FULL_ROW, clear_accum=True)
                read_per_query(LSE, per_query, head, q_start, n0, len_q)
                if wgmma:
                    T.wait_wgmma(1)  # S^T is done; dP^T may still run
                # A select, not a product, masks: masked entries may hold a neighbour's rows.
                for i, j in T.Parallel(block_m, block_n):
                    visible = _visible(n0 + j, m0 + i, len_q, len_k, causal)
                    scoresT[i, j] = T.if_then_else(
                        visible, T.exp2(scoresT[i, j] * log2_scale - per_query[i, j] * LOG2E), 0
                    )
                T.copy(scoresT, pT_cast)
                read_per_query(Delta, per_query, head, q_start, n0, len_q)  # while dP^T may still run
                if wgmma:
                    T.wait_wgmma(0)  # dP^T is done
                T.gemm(pT_cast, dO_shared, dv, policy=T.GemmWarpPolicy.FullRow)
                for i, j in T.Parallel(block_m, block_n):
                    dsT_cast[i, j] = scoresT[i, j] * (dpT[i, j] - per_query[i, j]) * softmax_scale
                T.gemm(dsT_cast, Q_shared, dk, policy=T.GemmWarpPolicy.FullRow)
                T.copy(dsT_cast, dsT_shared)
                # dQ^T = K^T dS^T: with dim_qk as the MMA's M dimension this runs on wgmma;
                # dQ = dS K has only block_n rows, too few for a warpgroup MMA per warpgroup.
                T.gemm(K_shared, dsT_shared, dqT, transpose_A=True, policy=FULL_ROW, clear_accum=True)
                accumulate_transposed(dQ_acc, dq_row0 + n0, head, dqT, dq_staging)
            if m0 < len_k:
                accumulate(dV_acc, dkv_row0, kv_head, dv, dv_staging)
                accumulate(dK_acc, dkv_row0, kv_head, dk, dk_staging)

    return attention_backward


def backward_postprocess_kernel(heads: int, dim: int, dtype: str, pad: int, block: int, threads: int):
    """out[t] = acc[t + b * pad] cast to ``dtype``: drops the accumulator padding.

    One program per (token tile of a sequence, head, sequence).
    """
    total, batch = T.dynamic("total"), T.dynamic("batch")

    # Parameters are bound in order: total and batch must be known before acc's shape is checked.
    @T.prim_func
    def attention_backward_postprocess(
        out: T.Tensor([total, heads, dim], dtype),
        cu_seqlens: T.Tensor([batch + 1], "int32"),
        max_seqlen: T.int32,
        acc: T.Tensor([accumulator_rows(total, batch, pad), heads, dim], ACCUM_DTYPE),
    ):
        with T.Kernel(T.ceildiv(max_seqlen, block), heads, batch, threads=threads) as (tile, head, seq):
            start = cu_seqlens[seq]
            length = cu_seqlens[seq + 1] - start
            t0 = tile * block
            for i, j in T.Parallel(block, dim):
                if t0 + i < length:
                    out[start + t0 + i, head, j] = T.Cast(dtype, acc[start + seq * pad + t0 + i, head, j])

    return attention_backward_postprocess
