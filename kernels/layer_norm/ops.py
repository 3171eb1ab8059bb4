"""PyTorch-facing LayerNorm: input validation, launchers and autograd.

``layer_norm`` normalizes over the trailing ``normalized_shape`` dimensions of
an input of any leading shape. ``variant`` selects the kernel: "fused" (row in
registers, N <= FUSED_MAX_N), "two_pass" (any N) or "auto".
"""

import dataclasses
import functools
import math
import os
from collections.abc import Sequence

import torch
from torch.autograd.function import once_differentiable

from kernelgate.kernels.device import gpu_class, interpreter_mode, is_sm90_or_newer, sm_count
from kernelgate.kernels.launch import LRU, Bound, Launch, bind, bound
from kernelgate.kernels.layer_norm import triton_kernels as tk
from kernelgate.kernels.layer_norm.config import (
    FUSED_MAX_N,
    MAX_ROW_SLICES,
    LaunchConfig,
    cdiv,
    fused_tail_n,
    launch_config,
    next_power_of_2,
    persistent_programs,
    resolve_variant,
    tuned_override,
)
from kernelgate.kernels.norm_inputs import check_tensor, normalized_shape_of

_FWD_KERNELS = {"fused": tk.fused_fwd_kernel, "two_pass": tk.two_pass_fwd_kernel}
_BWD_KERNELS = {"fused": tk.fused_bwd_kernel, "two_pass": tk.two_pass_bwd_kernel}


def _check_inputs(x, normalized_shape, weight, bias, eps) -> int:
    """Validate everything a launch depends on; return N, the row length."""
    check_tensor("layer_norm", "x", x)
    if isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"layer_norm: eps must be a float, got {type(eps).__name__}")
    if not 0 <= eps < math.inf:  # a negative eps turns rows of small variance to NaN
        raise ValueError(f"layer_norm: eps must be finite and at least 0, got {eps}")
    if tuple(x.shape[x.dim() - len(normalized_shape) :]) != normalized_shape or x.dim() < len(normalized_shape):
        raise ValueError(f"layer_norm: x of shape {tuple(x.shape)} does not end in normalized_shape {normalized_shape}")
    n = 1
    for d in normalized_shape:
        n *= d
    if n == 0:
        raise ValueError("layer_norm: normalized_shape has zero elements (N = 0)")
    for name, p in (("weight", weight), ("bias", bias)):
        if p is None:
            continue
        check_tensor("layer_norm", name, p, like=x)
        if p.shape != normalized_shape:
            raise ValueError(f"layer_norm: {name} has shape {tuple(p.shape)}, expected {normalized_shape}")
    return n


def _flat(p: torch.Tensor | None) -> torch.Tensor | None:
    """A parameter the kernels can read as one row of N elements (strided or expanded ones are copied)."""
    return p if p is None or p.is_contiguous() else p.contiguous()


def _rows(t: torch.Tensor, n: int) -> torch.Tensor:
    """A 2-D [M, N] view with unit column stride (copying only if needed). A tensor that already is
    one is returned as it is: on every call's path, a reshape costs more host time than the check."""
    if t.dim() != 2 or t.shape[1] != n:
        t = t.reshape(-1, n)
    return t if t.stride(-1) == 1 or n == 1 else t.contiguous()


def _shaped(t: torch.Tensor, shape: torch.Size) -> torch.Tensor:
    """``t`` viewed as ``shape`` (itself where it has that shape already, the common 2-D call)."""
    return t if t.shape == shape else t.view(shape)


@functools.cache
def _gpu_class_of(device_index: int) -> str:
    return gpu_class(torch.cuda.get_device_name(device_index))


def gpu_of(t: torch.Tensor) -> str | None:
    """The GPU class whose tuned configurations apply to tensors like ``t`` (None on the CPU)."""
    return _gpu_class_of(t.device.index or 0) if t.is_cuda else None


# "0": launch without programmatic dependent launch (to compare, or to rule it out). Read at import.
PDL_ENV = "KERNELGATE_PDL"
_PDL_OFF = os.environ.get(PDL_ENV) == "0"


def _on_sm90(t: torch.Tensor) -> bool:
    """``t``'s GPU is sm_90 or newer. Meta tensors stand for the sm_90 target ``kernelgate.explain.compiled``
    compiles their launches for."""
    return t.is_meta or (t.is_cuda and is_sm90_or_newer(t.device.index or 0))


def pdl_of(t: torch.Tensor) -> bool:
    """Whether launches on ``t``'s device use programmatic dependent launch: each kernel may
    start (and wait) while the previous one in the stream drains, which hides the launch gap
    between back-to-back kernels. sm_90 and newer, unless ``KERNELGATE_PDL=0``."""
    return _on_sm90(t) and not _PDL_OFF


def _sms(t: torch.Tensor) -> int:
    """Streaming multiprocessors of ``t``'s GPU (2 stands in under the interpreter)."""
    return sm_count(t.device.index or 0) if t.is_cuda else 2


def vector_width(n: int, *tensors: torch.Tensor | None) -> int:
    """Elements per 16-byte access that every row of ``tensors`` is aligned to:
    the largest power of two dividing N, each row stride and each base address."""
    present = [t for t in tensors if t is not None]
    elem = present[0].element_size()
    # The lowest set bit of the OR of byte counts is the largest power of two dividing them all.
    bits = 16 | n * elem
    for t in present:
        bits |= t.data_ptr()
        if t.dim() != 1:
            bits |= t.stride(0) * elem
    return max(1, (bits & -bits) // elem)


def _l2_prefetch(cfg: LaunchConfig, x2: torch.Tensor, vec: int) -> tuple[bool, int]:
    """Whether the fused kernels prefetch rows into L2, and how many rows ahead. The bulk prefetch
    (sm_90+) takes whole 16-byte aligned rows: those prefetch_per_sm x SMs row blocks later (a fraction
    of a wave where prefetch_per_sm < 1), at least one."""
    prefetch = cfg.prefetch_per_sm > 0 and _on_sm90(x2) and vec * x2.element_size() == 16
    return prefetch, _rows_ahead(cfg.prefetch_per_sm, _sms(x2) * cfg.block_m) if prefetch else 0


def _rows_ahead(prefetch_per_sm: float, wave: int) -> int:
    """The prefetch distance in rows: ``prefetch_per_sm`` waves of ``wave`` rows, rounded down, at least one."""
    return max(1, int(prefetch_per_sm * wave))


def _forward_args(x2, weight, bias, eps: float, y, mean, rstd) -> tuple:
    """The forward kernels' leading runtime arguments: FORWARD_POINTERS tensors (absent ones passed as
    x2, never read), then the row strides, M, N and eps."""
    m, n = x2.shape
    absent = lambda t: t if t is not None else x2
    return (x2, y, absent(weight), absent(bias), absent(mean), absent(rstd), x2.stride(0), y.stride(0), m, n, eps)


FORWARD_POINTERS = 6  # x, y, weight, bias, mean, rstd
BACKWARD_POINTERS = 7  # x, dy, dx, weight, mean, rstd, partial sums


def _launch(kernel, grid: tuple[int, ...], args: tuple, constexprs: dict, num_warps: int) -> Launch:
    """A launch of one of these kernels: those that take PDL wait for their predecessor when it is set, and
    a backward in row slices (SLICES > 1) has programs that wait for each other, all resident."""
    return Launch(kernel, grid, args, constexprs, num_warps, pdl=constexprs.get("PDL", False),
                  cooperative=constexprs.get("SLICES", 1) > 1)  # fmt: skip


def _addresses(args: tuple, pointers: int) -> tuple:
    """``args`` with each of its first ``pointers`` tensors replaced by its address: how a bound kernel
    takes them (``launch.Bound``), and what a launch key reads their alignment from."""
    return (*[t.data_ptr() for t in args[:pointers]], *args[pointers:])


def forward_launch(
    x2, weight, bias, eps: float, variant: str, y, mean, rstd, cfg: LaunchConfig | None = None, exchange_words=0
) -> Launch:
    """``mean`` and ``rstd`` None: the statistics are not stored. ``cfg`` overrides the
    tuned/heuristic configuration (the tuner sweeps it). ``exchange_words`` > 0 (fused): rstd holds,
    after its M floats rounded up to 16 bytes, the backward's row-slice words, that many a row, which the
    forward zeroes (``backward_exchange_words``)."""
    m, n = x2.shape
    cfg = cfg or launch_config(variant, "fwd", x2.dtype, n, gpu_of(x2))
    if cfg.single_reduction and x2.dtype == torch.float32:
        raise ValueError(f"layer_norm: {cfg} asks for single_reduction, which is for 16-bit inputs only, got float32")
    vec = vector_width(n, x2, y, weight, bias)
    prefetch, prefetch_rows = _l2_prefetch(cfg, x2, vec)
    fused_only = dict(
        TAIL_N=fused_tail_n(n, cfg.block_n),
        PDL=pdl_of(x2),
        PRELOAD_AFFINE=cfg.preload_affine,
        SINGLE_REDUCTION=cfg.single_reduction,
        PREFETCH=prefetch,
        EXCHANGE_WORDS=exchange_words,
    ) if variant == "fused" else {}  # fmt: skip
    return _launch(
        kernel=_FWD_KERNELS[variant],
        grid=(cdiv(m, cfg.block_m),),
        args=(*_forward_args(x2, weight, bias, eps, y, mean, rstd), *((prefetch_rows,) if variant == "fused" else ())),
        constexprs=dict(HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None, STORE_STATS=mean is not None,
                        BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, VEC=vec,
                        **fused_only),
        num_warps=cfg.num_warps,
    )  # fmt: skip


def _partial_sums(programs: int, constexprs: dict, x2) -> torch.Tensor | None:
    """The fp32 buffer a backward launch of ``programs`` programs writes besides dx: the partial sums of
    dw and db, [slabs, groups, N] (a group: the programs that share rows, one per slice of a row), and
    for a row split into slices whose words the forward did not zero, the slices' words (zeroed,
    ``row_words`` 64-bit words a row). One allocation per backward; the partial sums are never zeroed
    (every program writes its rows before it reads them; every program has a row block). Fresh from
    PyTorch's caching allocator, it is at least 512-byte aligned. None where nothing needs it."""
    if not constexprs.get("PARTIAL_SUMS", True):  # a column kernel sums dw and db from x and dy
        return None
    slices, slabs = constexprs.get("SLICES", 1), constexprs["HAS_WEIGHT"] + constexprs["HAS_BIAS"]
    m, n = x2.shape
    if slices == 1 or constexprs["EXCHANGE_AFTER_RSTD"]:
        return torch.empty((slabs, programs // slices, n), dtype=torch.float32, device=x2.device) if slabs else None
    start = cdiv(slabs * (programs // slices) * n, 4) * 4  # 16-byte aligned
    buffer = torch.empty(start + 2 * row_words(slices) * m, dtype=torch.float32, device=x2.device)
    buffer[start:].zero_()
    return buffer


def row_words(slices: int) -> int:
    """64-bit words a row of the fused backward's row slices exchange through: one a slice, four for three."""
    return next_power_of_2(slices)


def _backward_args(dy2, x2, weight, mean, rstd, dx, partial) -> tuple:
    """The backward kernels' leading runtime arguments (absent tensors passed as others, never read)."""
    m, n = x2.shape
    return (x2, dy2, dx, weight if weight is not None else x2, mean, rstd, partial if partial is not None else mean,
            x2.stride(0), dy2.stride(0), dx.stride(0), m, n)  # fmt: skip


def backward_launch(
    dy2, x2, weight, bias, mean, rstd, variant: str, dx, cfg: LaunchConfig | None = None, exchange_words=0
) -> tuple[Launch, torch.Tensor | None]:
    """The backward launch and its fp32 partial sums (``_partial_sums``): [dw slab if weight, db slab if
    bias], each [groups, N], the fused backward's row-slice words after them unless the forward zeroed
    them after rstd (``exchange_words``, as ``forward_launch`` took it, equal to ``row_words``).

    A persistent grid, launched without programmatic dependent launch: started early, onto SMs
    still busy with the previous kernel, its programs can double up on some SMs while others
    idle (the backward measured up to 1.18x slower so on an H200; triton_kernels says which
    kernels take PDL)."""
    m, n = x2.shape
    cfg = cfg or launch_config(variant, "bwd", x2.dtype, n, gpu_of(x2))
    if cfg.column_grads and variant != "two_pass":
        raise ValueError(f"layer_norm: {cfg} asks for column_grads, which only the two_pass backward has")
    slices = cfg.row_slices
    if slices > 1 and not (variant == "fused" and cfg.block_m == cfg.programs_per_sm == 1 and slices <= MAX_ROW_SLICES
                           and cfg.block_n * (slices - 1) < n):  # fmt: skip
        raise ValueError(
            f"layer_norm: {cfg} splits rows of {n} into {slices} slices; the fused backward splits a row into 2 to "
            f"{MAX_ROW_SLICES} slices of block_n columns, one row a step, one program per SM"
        )
    if slices > 1 and interpreter_mode():
        # Slices wait for each other, and the interpreter runs programs one after another: a row in one.
        cfg, slices = dataclasses.replace(cfg, block_n=next_power_of_2(n), row_slices=1), 1
    groups = persistent_programs(cdiv(m, cfg.block_m), _sms(x2) * cfg.programs_per_sm // slices, cfg.balanced_grid)
    vec = vector_width(n, x2, dy2, dx, weight)
    prefetch, prefetch_rows = _l2_prefetch(cfg, x2, vec)
    if slices > 1:  # counted in the groups' steps, a row each, not in row blocks per SM (LaunchConfig)
        prefetch_rows = _rows_ahead(cfg.prefetch_per_sm, groups) if prefetch else 0
    finish_late = _finishes_late(slices, x2)
    # Only where a column sum follows, which zeroes them again (weight or bias).
    zeroed_again = weight is not None or bias is not None
    after_rstd = zeroed_again and exchange_words == row_words(slices) and _reads_forward_words(slices, x2)
    by_variant = dict(TAIL_N=fused_tail_n(n, cfg.block_n) if slices == 1 else 0,
                      SINGLE_REDUCTION=cfg.single_reduction, PREFETCH=prefetch, SLICES=slices, FINISH_LATE=finish_late,
                      EXCHANGE_AFTER_RSTD=after_rstd,
                      ) if variant == "fused" else dict(PARTIAL_SUMS=not cfg.column_grads)  # fmt: skip
    constexprs = dict(HAS_WEIGHT=weight is not None, HAS_BIAS=bias is not None,
                      BLOCK_M=cfg.block_m, BLOCK_N=cfg.block_n, VEC=vec, NUM_STAGES=cfg.num_stages,
                      **by_variant)  # fmt: skip
    partial = _partial_sums(groups * slices, constexprs, x2)
    launch = _launch(
        kernel=_BWD_KERNELS[variant],
        grid=(groups * slices,),
        args=(*_backward_args(dy2, x2, weight, mean, rstd, dx, partial),
              *((prefetch_rows,) if variant == "fused" else ())),
        constexprs=constexprs,
        num_warps=cfg.num_warps,
    )  # fmt: skip
    return launch, partial


def column_sum_launch(
    partial: torch.Tensor, g: int, outs: list[torch.Tensor], rstd=None, m: int = 0, exchange_words: int = 0
) -> Launch:
    """Sum each [G, N] slab at the start of ``partial`` over G into the matching tensor of ``outs`` (one
    launch for all). ``exchange_words`` > 0: then zero the row kernel's row-slice words after the ``m``
    rows' ``rstd`` (``backward_launch``), so that a later backward on the same statistics finds them zero."""
    slabs, n = len(outs), outs[0].numel()
    # Narrow column tiles until every SM has two programs: each walks all G rows serially,
    # so too few of them leave the partials' latency exposed (32 instead of 256 columns:
    # the backward 1.01-1.27x faster on an H200).
    block_n = min(next_power_of_2(n), 256)
    while block_n > 32 and cdiv(n, block_n) * slabs < 2 * _sms(partial):
        block_n //= 2
    # One load for up to 256 partial rows (G is 132-1056 on an H200) rather than a loop of loads
    # of 32: on an H200, 0.85-1.00x the backward's time on 20 of 21 cases, the least at 4096x1024
    # (fp16 16384x4096 1.04x, unexplained).
    return _launch(
        kernel=tk.column_sum_kernel,
        grid=(cdiv(n, block_n), slabs),
        args=(partial, outs[0], outs[-1], rstd if rstd is not None else partial, g, n, m),
        constexprs=dict(
            BLOCK_G=min(next_power_of_2(g), 256), BLOCK_N=block_n, PDL=pdl_of(partial), EXCHANGE_WORDS=exchange_words
        ),
        num_warps=8,
    )


# column_grads_kernel's tile: 64 rows by 64 columns on 4 warps. On an H100 at 16-bit 8192x14336-32768 the
# fastest of [128, 32], [64, 64] and [256, 16] (1.03-1.07x [128, 32]); at 12288 within 1% of it.
COLUMN_GRADS_TILE = (64, 64, 4)


def _column_grads_args(dy2, x2, mean, rstd, dw, db) -> tuple:
    absent = lambda t: t if t is not None else mean
    return (x2, dy2, mean, rstd, absent(dw), absent(db), x2.stride(0), dy2.stride(0), *x2.shape)


def column_grads_launch(dy2, x2, mean, rstd, dw, db) -> Launch:
    """dw and db summed over the rows by column blocks, from x and dy: the second launch of a two_pass
    backward with ``column_grads`` (its first writes dx alone)."""
    block_m, block_n, warps = COLUMN_GRADS_TILE
    return _launch(
        kernel=tk.column_grads_kernel,
        grid=(cdiv(x2.shape[1], block_n),),
        args=_column_grads_args(dy2, x2, mean, rstd, dw, db),
        constexprs=dict(HAS_WEIGHT=dw is not None, HAS_BIAS=db is not None, BLOCK_M=block_m, BLOCK_N=block_n),
        num_warps=warps,
    )


def layer_norm_fwd(
    x2, weight, bias, eps: float, variant: str, out=None, cfg: LaunchConfig | None = None, stats: bool = True
):
    """Run the forward on a validated [M, N] view; returns (y, mean, rstd).

    ``out`` optionally supplies those three tensors (tests pass NaN-filled ones);
    ``cfg`` overrides the launch configuration (the tuner). ``stats=False`` (inference)
    neither allocates nor stores mean and rstd, and returns None for them.
    """
    return _run_forward(x2, weight, bias, eps, variant, out, cfg, stats)[0]


def _run_forward(x2, weight, bias, eps: float, variant: str, out=None, cfg=None, stats=True, exchange_words=0):
    """``layer_norm_fwd``'s outputs, and the compiled kernel bound to its launch (None where none is).
    ``exchange_words``: see ``forward_launch``; fresh outputs make room for them after rstd."""
    out = out if out is not None else _forward_outputs(x2, stats, exchange_words)
    if x2.shape[0] == 0:
        return out, None
    if cfg is not None:
        forward_launch(x2, weight, bias, eps, variant, *out, cfg)()
        return out, None
    args = _addresses(_forward_args(x2, weight, bias, eps, *out), FORWARD_POINTERS)
    key = _forward_key(x2, weight, bias, variant, out[1] is not None, args, exchange_words)
    if (kernel := bound(key)) is not None:
        kernel(args)
        return out, kernel
    bind(key, forward_launch(x2, weight, bias, eps, variant, *out, exchange_words=exchange_words), len(args))
    return out, bound(key)


def _forward_outputs(x2, stats: bool, exchange_words: int = 0) -> tuple:
    """Fresh y, and mean and rstd (None without ``stats``), rstd followed by ``exchange_words`` 64-bit words
    a row from its M floats rounded up to 16 bytes: fresh allocations are 512-byte aligned."""
    m = x2.shape[0]
    y = torch.empty_like(x2, memory_format=torch.contiguous_format)
    if not stats:
        return y, None, None
    floats = cdiv(m, 4) * 4 + 2 * exchange_words * m if exchange_words else m
    mean = torch.empty(m, dtype=torch.float32, device=x2.device)
    return y, mean, torch.empty(floats, dtype=torch.float32, device=x2.device)


def forward_key(x2, weight, bias, variant: str, y, mean, rstd, exchange_words=0) -> tuple:
    """What ``forward_launch`` reads of its arguments but the tensors' data and eps: one bound kernel each."""
    args = _addresses(_forward_args(x2, weight, bias, 0.0, y, mean, rstd), FORWARD_POINTERS)
    return _forward_key(x2, weight, bias, variant, mean is not None, args, exchange_words)


def _forward_key(x2, weight, bias, variant: str, stats: bool, args: tuple, exchange_words: int) -> tuple:
    """``forward_key`` from the launch's arguments with addresses (``_addresses``), which a call computes
    once for both. The parameters share x's dtype (the input checks) and the statistics are float32."""
    return ("fwd", variant, x2.dtype, x2.get_device(), tuned_override(), weight is None, bias is None, stats,
            exchange_words, args[FORWARD_POINTERS:-1],
            tuple([address & 15 for address in args[:FORWARD_POINTERS]]))  # fmt: skip


def backward_key(dy2, x2, weight, bias, mean, rstd, variant: str, dx, exchange_words=0) -> tuple:
    """What ``backward_launch`` reads of its arguments but the tensors' data and the partial sums, whose
    shape follows from the rest and whose address is a fresh allocation's: 512-byte aligned."""
    return ("bwd", variant, x2.shape, x2.stride(0), dy2.stride(0), dx.stride(0), x2.get_device(), tuned_override(),
            bias is not None, exchange_words, _low_bits(x2, dy2, dx, weight, mean, rstd))  # fmt: skip


def layer_norm_bwd(dy2, x2, weight, bias, mean, rstd, variant: str, out=None, cfg: LaunchConfig | None = None):
    """Run the backward; returns (dx, dw or None, db or None).

    ``out`` optionally supplies (dx, dw, db) to write into; ``cfg`` overrides
    the launch configuration (the tuner).
    """
    return _run_backward(dy2, x2, weight, bias, mean, rstd, variant, out, cfg)[:3]


def _run_backward(dy2, x2, weight, bias, mean, rstd, variant: str, out=None, cfg=None, kernels=None, exchange_words=0):
    """``layer_norm_bwd``'s outputs, and the compiled kernels bound to its launches, (row kernel, column
    kernel or None), None where none are. A caller that has them for these arguments' layout passes
    them (autograd's backward, from its call's plan) and skips computing their launch keys.
    ``exchange_words``: the row-slice words the forward zeroed after rstd (``backward_launch``)."""
    m = x2.shape[0]
    dx, dw, db = out if out is not None else (torch.empty_like(x2, memory_format=torch.contiguous_format), None, None)
    dw = None if weight is None else dw if dw is not None else torch.empty_like(weight)
    db = None if bias is None else db if db is not None else torch.empty_like(bias)
    sums = [t for t in (dw, db) if t is not None]
    if m == 0:
        for t in sums:
            t.zero_()
        return dx, dw, db, None
    if cfg is not None:
        _launch_backward(dy2, x2, weight, bias, mean, rstd, variant, dx, dw, db, cfg)
        return dx, dw, db, None
    if kernels is None:
        key = backward_key(dy2, x2, weight, bias, mean, rstd, variant, dx, exchange_words)
        # The column kernel follows from the row kernel's key, and from dw and db where they were given
        # (freshly allocated ones are aligned).
        columns_key = ("columns", key, out is None or _low_bits(*sums))
        row, columns = bound(key), bound(columns_key) if sums else None
        if row is None or (sums and columns is None):  # the first call of this layout: bind its kernels
            _launch_backward(
                dy2, x2, weight, bias, mean, rstd, variant, dx, dw, db, None, (key, columns_key), exchange_words
            )
            row, columns = bound(key), bound(columns_key) if sums else None
            return dx, dw, db, (row, columns) if row is not None else None
        kernels = row, columns
    row, columns = kernels
    partial = _partial_sums(row.grid[0], row.constexprs, x2)
    row(_addresses(_backward_args(dy2, x2, weight, mean, rstd, dx, partial), BACKWARD_POINTERS))
    if columns is not None and partial is not None:
        columns((partial.data_ptr(), sums[0].data_ptr(), sums[-1].data_ptr(), rstd.data_ptr()))
    elif columns is not None:
        columns(_addresses(_column_grads_args(dy2, x2, mean, rstd, dw, db)[:6], 6))
    return dx, dw, db, kernels


def _launch_backward(dy2, x2, weight, bias, mean, rstd, variant: str, dx, dw, db, cfg=None, bind_to=None,
                     exchange_words=0) -> None:  # fmt: skip
    """The backward's launches through Triton: its row kernel, then the column kernel that sums dw and db
    where there are any. ``bind_to``: (row key, column key) to bind the compiled kernels to."""
    launch, partial = backward_launch(dy2, x2, weight, bias, mean, rstd, variant, dx, cfg, exchange_words)
    sums = [t for t in (dw, db) if t is not None]
    columns = None
    if sums and partial is not None:
        words = exchange_words if launch.constexprs.get("EXCHANGE_AFTER_RSTD") else 0  # to zero again
        groups = _groups(launch.grid[0], launch.constexprs)
        columns, leading = column_sum_launch(partial, groups, sums, rstd, x2.shape[0], words), 4
    elif sums:
        columns, leading = column_grads_launch(dy2, x2, mean, rstd, dw, db), 6
    if bind_to is None:
        launch()
        if columns is not None:
            columns()
        return
    bind(bind_to[0], launch, len(_backward_args(dy2, x2, weight, mean, rstd, dx, partial)))
    if columns is not None:
        bind(bind_to[1], columns, leading)


def _groups(programs: int, constexprs: dict) -> int:
    """The partial sums' rows: one per group of programs that share rows (``row_slices``)."""
    return programs // constexprs.get("SLICES", 1)


def _low_bits(*tensors: torch.Tensor | None) -> tuple:
    """Each tensor's dtype and address modulo 16 (None if absent): what a launch reads of where it is
    (vector_width) and what Triton specializes a pointer on (16-byte alignment)."""
    return tuple([None if t is None else (t.dtype, t.data_ptr() & 15) for t in tensors])


def select_variant(variant: str, direction: str, dtype: torch.dtype, n: int, gpu: str | None) -> str:
    """Resolve "auto" for one direction under the tuned table in use, and refuse rows the fused
    kernel cannot hold."""
    return _select_variant(variant, direction, dtype, n, gpu, tuned_override())


@functools.cache  # on every call's path; the table override is in the key, so that changing it takes effect
def _select_variant(variant: str, direction: str, dtype: torch.dtype, n: int, gpu: str | None, tuned) -> str:
    variant = resolve_variant(variant, direction, dtype, n, gpu)
    if variant == "fused" and n > FUSED_MAX_N:
        raise ValueError(
            f"layer_norm: the fused kernel holds a row in registers and supports N <= {FUSED_MAX_N}, "
            f"got N = {n}; use variant='two_pass' or 'auto'"
        )
    return variant


def _forward(x, normalized_shape, weight, bias, eps, variant, stats=True):
    """The forward of ``layer_norm``: y, what the backward reads, the call's plan (None where it has none)
    and the backward's row-slice words it zeroed (``backward_exchange_words``)."""
    signature = _signature(x, normalized_shape, weight, bias, eps, variant, stats)
    if (plan := _PLANS.get(signature)) is not None:
        x2, weight, bias = _rows(x, plan.n), _flat(weight), _flat(bias)
        y, mean, rstd = _forward_outputs(x2, stats, plan.exchange_words)
        plan.forward(_addresses(_forward_args(x2, weight, bias, eps, y, mean, rstd), FORWARD_POINTERS))
        return _shaped(y, x.shape), (x2, weight, bias, mean, rstd), plan, plan.exchange_words
    n = _check_inputs(x, normalized_shape, weight, bias, eps)
    if not isinstance(variant, str):
        raise TypeError(f"layer_norm: variant must be a string, got {type(variant).__name__}")
    x2, weight, bias = _rows(x, n), _flat(weight), _flat(bias)
    forward = select_variant(variant, "fwd", x.dtype, n, gpu_of(x))
    words = backward_exchange_words(x2, weight, bias, variant, forward) if stats else 0
    (y, mean, rstd), kernel = _run_forward(x2, weight, bias, eps, forward, stats=stats, exchange_words=words)
    if signature is not None and kernel is not None:
        plan = _PLANS[signature] = _Plan(n, kernel, words)
    return _shaped(y, x.shape), (x2, weight, bias, mean, rstd), plan, words


def _finishes_late(slices: int, x2) -> bool:
    # 16-bit slices finish each row a step late, loading it again, for twice the pipeline's shared memory
    # (H100: 1.09-1.19x faster at 12288-32768); fp32's would leave room for one stage (0.92x at 32768).
    return slices > 1 and x2.element_size() == 2


def _reads_forward_words(slices: int, x2) -> bool:
    # Row slices can exchange through words the eager forward zeroed: 16-bit ones poll a row's words a step
    # after publishing, when every slice's word is in L2; fp32 ones poll right after, so each step first
    # prefetches the next row's words into L2 (the bulk prefetch: sm_90+).
    return slices > 1 and (_finishes_late(slices, x2) or _on_sm90(x2))


def backward_exchange_words(x2, weight, bias, variant: str, forward: str) -> int:
    """The row-slice words a row (``row_words``) that the backward of ``variant`` on x2's rows will exchange
    through, where the ``forward`` variant can zero them beside its statistics (the fused one) and the
    backward's column sum zeroes them again (there is a weight or a bias), else 0. So an eager backward
    in row slices launches nothing to zero them."""
    if forward != "fused" or x2.shape[0] == 0 or (weight is None and bias is None) or interpreter_mode():
        return 0
    n, gpu = x2.shape[1], gpu_of(x2)
    backward = select_variant(variant, "bwd", x2.dtype, n, gpu)
    slices = launch_config(backward, "bwd", x2.dtype, n, gpu).row_slices if backward == "fused" else 1
    return row_words(slices) if _reads_forward_words(slices, x2) else 0


@dataclasses.dataclass
class _Plan:
    """What the first eager call of a signature (``_signature``) worked out before launching: its
    arguments passed the checks, N, the forward's bound kernel and the backward's row-slice words it
    zeroes; then, per layout of dy, the
    backward's variant and bound kernels. Later calls of that signature go straight to their
    allocations and launches: on an eager call, the checks and launch keys cost about as much host
    time as the launch itself."""

    n: int
    forward: Bound
    exchange_words: int  # backward_exchange_words
    backwards: dict[tuple, tuple[str, tuple]] = dataclasses.field(default_factory=dict)


# One plan per signature, which holds the rows' count: a training loop whose sequence lengths vary makes one per
# length. The most recent thousand are kept; a call of a dropped one plans again, as its first call did.
_PLANS: LRU = LRU(1024)


def _layout(t: torch.Tensor | None) -> tuple | None:
    """What a launch reads of a tensor but its data (None for an absent one)."""
    return None if t is None else (t.shape, t.stride(), t.dtype, t.device, t.data_ptr() & 15)


def _signature(x, normalized_shape, weight, bias, eps, variant, stats: bool) -> tuple | None:
    """Everything the checks, ``auto`` and the launches read of a call's arguments but the tensors' data:
    each tensor's shape, strides, dtype, device and 16-byte alignment, and the other arguments, the
    statistics stored or not and the tuned table. None where the checks must look every time (no float
    eps, no string variant, a normalized shape not yet a tuple, no tensors with data)."""
    if type(eps) is not float or type(variant) is not str or type(normalized_shape) is not tuple:
        return None
    try:
        return (_layout(x), _layout(weight), _layout(bias), normalized_shape, eps, variant, stats, tuned_override())
    except (AttributeError, RuntimeError, TypeError):
        return None


class LayerNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, weight, bias, eps, variant):
        y, saved, ctx.plan, ctx.exchange_words = _forward(x, normalized_shape, weight, bias, eps, variant)
        ctx.save_for_backward(*saved)
        ctx.variant = variant  # as asked: "auto" resolves for the backward on its own
        ctx.x_shape = x.shape
        return y

    @staticmethod
    def backward(ctx, dy):
        # Grad mode is on here only under create_graph=True: then a second-order gradient must raise, never
        # read 0. Otherwise once_differentiable's no_grad wrapper is host time on autograd's thread for nothing.
        if torch.is_grad_enabled():
            return _backward_once_differentiable(ctx, dy)
        return _backward(ctx, dy)


def _backward(ctx, dy):
    x2, weight, bias, mean, rstd = ctx.saved_tensors
    dy2 = _rows(dy, x2.shape[1])
    # With the forward's signature, dy's dtype, row stride and alignment and the tuned table determine the
    # backward's launches (dx, dw, db and the partial sums are its own fresh allocations).
    plan, layout = ctx.plan, (dy2.dtype, dy2.stride(0), dy2.data_ptr() & 15, tuned_override())
    known = plan.backwards.get(layout) if plan is not None else None
    if known is not None:
        variant, kernels = known
    else:
        variant, kernels = select_variant(ctx.variant, "bwd", x2.dtype, x2.shape[1], gpu_of(x2)), None
    dx, dw, db, kernels = _run_backward(dy2, x2, weight, bias, mean, rstd, variant, kernels=kernels,
                                        exchange_words=ctx.exchange_words)  # fmt: skip
    if known is None and plan is not None and kernels is not None:
        plan.backwards[layout] = variant, kernels
    return _shaped(dx, ctx.x_shape), None, dw, db, None, None


_backward_once_differentiable = once_differentiable(_backward)


def _needs_grad(x: torch.Tensor, weight, bias) -> bool:
    # Spelled out, not a generator: this is on every call's path. A weight or bias that is not a
    # tensor reads False here and gets its error from the input checks.
    return torch.is_grad_enabled() and (
        x.requires_grad or getattr(weight, "requires_grad", False) or getattr(bias, "requires_grad", False)
    )


def layer_norm(
    x: torch.Tensor,
    normalized_shape: int | Sequence[int],
    weight: torch.Tensor | None = None,
    bias: torch.Tensor | None = None,
    eps: float = 1e-5,
    variant: str = "auto",
) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.layer_norm`` backed by the Triton kernels."""
    normalized_shape = normalized_shape_of("layer_norm", normalized_shape)
    if isinstance(x, torch.Tensor) and not _needs_grad(x, weight, bias):
        # Inference: no autograd.Function.apply (~6 us a call on the host) and no statistics
        # to keep for a backward (up to 2% of the forward's device time in fp32, measured on an H200).
        return _forward(x, normalized_shape, weight, bias, eps, variant, stats=False)[0]
    return LayerNormFunction.apply(x, normalized_shape, weight, bias, eps, variant)
