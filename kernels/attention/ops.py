"""PyTorch-facing GQA varlen attention: validation, compile cache, launchers and autograd.

``flash_attn_varlen_func`` follows flash-attn's varlen interface. ``accum``
selects how the backward sums dQ/dK/dV tiles ("elem", "region", "tma"; see
``tilelang_kernels``). ``check_inputs`` validates everything on the host before
any launch; the launchers ``attention_forward`` and ``attention_backward`` trust
their inputs, so benchmarks can time them alone (e.g. the backward only, from
saved forward outputs).
"""

import dataclasses
import functools
import math

import tilelang
import torch
from torch.autograd.function import once_differentiable
from tvm.target import Target

from kernelgate.kernels.attention import tilelang_kernels as tk

SUPPORTED_DTYPES = {torch.float16: "float16", torch.bfloat16: "bfloat16"}
# (dim_qk, dim_v) pairs whose tiles are sized to fit shared memory (checked at 227 KiB on sm_90).
SUPPORTED_HEAD_DIMS = ((64, 64), (128, 128), (192, 128))
MIN_CAPABILITY = (8, 0)  # bf16 tensor cores
TMA_MIN_CAPABILITY = (9, 0)  # TMA bulk tensor reductions
MAX_BATCH = 65535  # sequences run along gridDim.z, whose CUDA limit this is


@dataclasses.dataclass(frozen=True)
class AttentionShape:
    """Everything a compiled kernel depends on (token counts and batch size are symbolic)."""

    heads: int
    heads_kv: int
    dim_qk: int
    dim_v: int
    dtype: str  # "float16" or "bfloat16"
    causal: bool


@dataclasses.dataclass(frozen=True)
class Tiles:
    block_m: int  # forward: query rows per program; backward: key rows per program
    block_n: int  # forward: key rows per step; backward: query rows per step
    num_stages: int
    threads: int

    @property
    def pad(self) -> int:
        """Spare rows after each sequence in the backward accumulators: one whole tile."""
        return max(self.block_m, self.block_n)


# Tiles: 128 rows on two warpgroups. The backward keeps dK and dV of its 128 key rows in
# registers (160 floats per thread at 192/128, 128 at 128/128), which leaves room for 32
# query rows per step; below 192/128 also for double-buffered Q/dO (one spill store in the
# causal 128/128 kernel, none in the others). More query rows per step (48, 64) compile, but
# ran slower on an H200 at every head dim: kernelgate.tune.attention times the alternatives.
def forward_tiles(dim_qk: int) -> Tiles:
    return Tiles(block_m=128, block_n=64 if dim_qk > 128 else 128, num_stages=2, threads=256)


def backward_tiles(dim_qk: int) -> Tiles:
    return Tiles(block_m=128, block_n=32, num_stages=1 if dim_qk > 128 else 2, threads=256)


PREPROCESS_BLOCK = 64  # tokens per Delta program
POSTPROCESS_BLOCK = 64  # tokens per cast program
SMALL_KERNEL_THREADS = 128


def cuda_arch(capability: tuple[int, int]) -> str:
    """TileLang's arch name: sm_90 and later need the "a" suffix for wgmma and TMA."""
    major, minor = capability
    return f"sm_{major}{minor}{'a' if major >= 9 else ''}"


@functools.cache
def compile_kernel(builder, arch: str, **config) -> tilelang.JITKernel:
    """Compile ``builder(**config)`` for ``arch`` once per process (and on disk, TILELANG_CACHE_DIR)."""
    return tilelang.compile(
        builder(**config),
        target=Target({"kind": "cuda", "arch": arch}),
        execution_backend="tvm_ffi",  # works without libcuda at build time (codegen tests)
        pass_configs=tk.PASS_CONFIGS,
    )


def forward_kernel(shape: AttentionShape, arch: str) -> tilelang.JITKernel:
    t = forward_tiles(shape.dim_qk)
    return compile_kernel(tk.forward_kernel, arch, **dataclasses.asdict(shape), **dataclasses.asdict(t))


def preprocess_kernel(shape: AttentionShape, arch: str) -> tilelang.JITKernel:
    return compile_kernel(
        tk.backward_preprocess_kernel,
        arch,
        heads=shape.heads,
        dim_v=shape.dim_v,
        dtype=shape.dtype,
        block=PREPROCESS_BLOCK,
        threads=SMALL_KERNEL_THREADS,
    )


def backward_kernel(shape: AttentionShape, accum: str, arch: str, tiles: Tiles | None = None) -> tilelang.JITKernel:
    """The main backward kernel; ``tiles`` overrides ``backward_tiles`` (the tuner's candidates)."""
    t = tiles or backward_tiles(shape.dim_qk)
    config = dataclasses.asdict(shape) | dataclasses.asdict(t)
    return compile_kernel(tk.backward_kernel, arch, **config, accum=accum, pad=t.pad, wgmma=arch.startswith("sm_90"))


def postprocess_kernel(
    heads: int, dim: int, shape: AttentionShape, arch: str, pad: int | None = None
) -> tilelang.JITKernel:
    """The cast out of an accumulator padded by ``pad`` rows per sequence (default: ``backward_tiles``)."""
    return compile_kernel(
        tk.backward_postprocess_kernel,
        arch,
        heads=heads,
        dim=dim,
        dtype=shape.dtype,
        pad=pad if pad is not None else backward_tiles(shape.dim_qk).pad,
        block=POSTPROCESS_BLOCK,
        threads=SMALL_KERNEL_THREADS,
    )


# ----------------------------------------------------------------------------- validation


def check_capability(accum: str, capability: tuple[int, int]) -> None:
    """Refuse GPUs the kernels cannot run on: sm_80+ for all, sm_90+ for TMA reductions."""
    arch = f"sm_{capability[0]}{capability[1]}"
    if tuple(capability) < MIN_CAPABILITY:
        raise ValueError(f"flash_attn_varlen_func: needs an sm_80 or newer GPU, got {arch}")
    if accum == "tma" and tuple(capability) < TMA_MIN_CAPABILITY:
        raise ValueError(
            f"flash_attn_varlen_func: accum='tma' needs TMA reductions (sm_90 or newer), got {arch}; use accum='region'"
        )


def _check_tensor(name: str, t, ndim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"flash_attn_varlen_func: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dim() != ndim:
        raise ValueError(f"flash_attn_varlen_func: {name} must have {ndim} dims, got shape {tuple(t.shape)}")


def _check_max_seqlen(name: str, value, lengths: torch.Tensor) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise TypeError(f"flash_attn_varlen_func: {name} must be an int, got {type(value).__name__}")
    longest = int(lengths.max()) if lengths.numel() else 0
    if value < longest:
        raise ValueError(f"flash_attn_varlen_func: {name} = {value} is smaller than the longest sequence ({longest})")


def _check_cu_seqlens(name: str, cu: torch.Tensor, total: int) -> torch.Tensor:
    """Validate host values of cu_seqlens; return the sequence lengths."""
    if cu[0] != 0:
        raise ValueError(f"flash_attn_varlen_func: {name} must start at 0, got {int(cu[0])}")
    lengths = cu[1:] - cu[:-1]
    if (lengths < 0).any():
        first = int((lengths < 0).nonzero()[0, 0])
        raise ValueError(
            f"flash_attn_varlen_func: {name} must be non-decreasing, but {name}[{first + 1}] = {int(cu[first + 1])} "
            f"< {name}[{first}] = {int(cu[first])}"
        )
    if cu[-1] != total:
        raise ValueError(
            f"flash_attn_varlen_func: {name}[-1] = {int(cu[-1])} must equal the number of tokens ({total})"
        )
    return lengths


def check_inputs(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, accum
) -> AttentionShape:
    """Validate every argument on the host, before any device work; return the kernel shape.

    Reads cu_seqlens values with one device-to-host copy (a sync). The device and
    GPU generation are checked last, so shape and value errors show on CPU tensors.
    """
    for name, t in (("q", q), ("k", k), ("v", v)):
        _check_tensor(name, t, 3)
        if t.dtype not in SUPPORTED_DTYPES:
            raise TypeError(f"flash_attn_varlen_func: {name} has dtype {t.dtype}; supported: float16, bfloat16")
        if t.dtype != q.dtype:
            raise TypeError(f"flash_attn_varlen_func: {name} has dtype {t.dtype} but q has {q.dtype}")
        if t.device != q.device:
            raise ValueError(f"flash_attn_varlen_func: {name} is on {t.device} but q is on {q.device}")
    (total_q, heads, dim_qk), (total_k, heads_kv, dim_qk_k), dim_v = q.shape, k.shape, v.shape[2]
    if dim_qk_k != dim_qk:
        raise ValueError(f"flash_attn_varlen_func: k has head dim {dim_qk_k} but q has {dim_qk}")
    if tuple(v.shape[:2]) != (total_k, heads_kv):
        raise ValueError(f"flash_attn_varlen_func: v of shape {tuple(v.shape)} does not match k {tuple(k.shape)}")
    if heads == 0 or heads_kv == 0 or heads % heads_kv:
        raise ValueError(
            f"flash_attn_varlen_func: heads of q ({heads}) must be a multiple of heads of k/v ({heads_kv})"
        )
    if (dim_qk, dim_v) not in SUPPORTED_HEAD_DIMS:
        raise ValueError(
            f"flash_attn_varlen_func: head dims (dim_qk={dim_qk}, dim_v={dim_v}) are not supported; "
            f"supported (dim_qk, dim_v): {SUPPORTED_HEAD_DIMS}"
        )
    for name, cu in (("cu_seqlens_q", cu_seqlens_q), ("cu_seqlens_k", cu_seqlens_k)):
        _check_tensor(name, cu, 1)
        if cu.dtype != torch.int32:
            raise TypeError(f"flash_attn_varlen_func: {name} must be int32, got {cu.dtype}")
        if cu.device != q.device:
            raise ValueError(f"flash_attn_varlen_func: {name} is on {cu.device} but q is on {q.device}")
        if cu.numel() < 2:
            raise ValueError(f"flash_attn_varlen_func: {name} needs at least 2 entries (batch + 1), got {cu.numel()}")
    if cu_seqlens_q.numel() - 1 > MAX_BATCH:
        raise ValueError(
            f"flash_attn_varlen_func: {cu_seqlens_q.numel() - 1} sequences; the kernels take at most {MAX_BATCH}"
        )
    if cu_seqlens_q.numel() != cu_seqlens_k.numel():
        raise ValueError(
            f"flash_attn_varlen_func: cu_seqlens_q has {cu_seqlens_q.numel()} entries but cu_seqlens_k has "
            f"{cu_seqlens_k.numel()}; both are batch + 1"
        )
    if not isinstance(causal, bool):
        raise TypeError(f"flash_attn_varlen_func: causal must be a bool, got {type(causal).__name__}")
    if softmax_scale is not None and (
        isinstance(softmax_scale, bool)
        or not isinstance(softmax_scale, (int, float))
        or not (math.isfinite(softmax_scale) and softmax_scale > 0)
    ):
        raise ValueError(f"flash_attn_varlen_func: softmax_scale must be a finite positive number, got {softmax_scale}")
    if accum not in tk.ACCUM_MODES:
        raise ValueError(f"flash_attn_varlen_func: accum must be one of {tk.ACCUM_MODES}, got {accum!r}")

    host_cu_q, host_cu_k = torch.stack((cu_seqlens_q, cu_seqlens_k)).cpu()  # the one sync
    _check_max_seqlen("max_seqlen_q", max_seqlen_q, _check_cu_seqlens("cu_seqlens_q", host_cu_q, total_q))
    _check_max_seqlen("max_seqlen_k", max_seqlen_k, _check_cu_seqlens("cu_seqlens_k", host_cu_k, total_k))

    if q.device.type != "cuda":
        raise ValueError(f"flash_attn_varlen_func: q is on {q.device}; the TileLang kernels need a CUDA tensor")
    check_capability(accum, torch.cuda.get_device_capability(q.device))
    return AttentionShape(heads, heads_kv, dim_qk, dim_v, SUPPORTED_DTYPES[q.dtype], causal)


# ----------------------------------------------------------------------------- launchers


def _shape(q: torch.Tensor, k: torch.Tensor, v: torch.Tensor, causal: bool) -> AttentionShape:
    return AttentionShape(q.shape[1], k.shape[1], q.shape[2], v.shape[2], SUPPORTED_DTYPES[q.dtype], causal)


def _arch(t: torch.Tensor) -> str:
    return cuda_arch(torch.cuda.get_device_capability(t.device))


def _scale(softmax_scale: float | None, dim_qk: int) -> float:
    return softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(dim_qk)


def attention_forward(
    q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, causal: bool, softmax_scale=None, out=None
):
    """Launch the forward on validated inputs; returns (o, lse).

    ``out`` optionally supplies (o, lse) to write into: o like q but with v's head dim,
    lse float32 (heads, total_q).
    """
    q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
    shape = _shape(q, k, v, causal)
    total_q = q.shape[0]
    if out is None:
        out = (
            q.new_empty(total_q, shape.heads, shape.dim_v),
            torch.empty(shape.heads, total_q, dtype=torch.float32, device=q.device),
        )
    o, lse = out
    if total_q == 0:
        return o, lse
    if k.shape[0] == 0:  # no keys anywhere: every row attends to nothing (a kernel cannot map an empty K)
        return o.zero_(), lse.fill_(float("inf"))
    forward_kernel(shape, _arch(q))(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, _scale(softmax_scale, shape.dim_qk), o, lse
    )
    return o, lse


def attention_backward(
    do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q: int, max_seqlen_k: int, causal: bool,
    softmax_scale=None, accum: str = "tma", out=None, tiles: Tiles | None = None,
):  # fmt: skip
    """Launch preprocess (Delta), the main kernel and postprocess (casts) on validated inputs.

    Returns (dq, dk, dv) in q's dtype; ``out`` optionally supplies them. Needs only
    the forward's saved o and lse, so it can be timed on its own. ``tiles`` overrides
    the main kernel's ``backward_tiles`` (``kernelgate.tune.attention`` sweeps them).
    """
    do, q, k, v, o, lse = (t.contiguous() for t in (do, q, k, v, o, lse))
    shape = _shape(q, k, v, causal)
    dq, dk, dv = out if out is not None else (torch.empty_like(q), torch.empty_like(k), torch.empty_like(v))
    (total_q, total_k), batch = (q.shape[0], k.shape[0]), cu_seqlens_q.numel() - 1
    if total_q == 0 or total_k == 0:  # no query sees any key: all gradients vanish
        return dq.zero_(), dk.zero_(), dv.zero_()
    arch = _arch(q)
    tiles = tiles or backward_tiles(shape.dim_qk)
    pad = tiles.pad

    delta = torch.empty(shape.heads, total_q, dtype=torch.float32, device=q.device)
    preprocess_kernel(shape, arch)(o, do, delta)

    def accumulator(total: int, heads: int, dim: int) -> torch.Tensor:
        return torch.zeros(tk.accumulator_rows(total, batch, pad), heads, dim, dtype=torch.float32, device=q.device)

    dq_acc = accumulator(total_q, shape.heads, shape.dim_qk)
    dk_acc = accumulator(total_k, shape.heads_kv, shape.dim_qk)
    dv_acc = accumulator(total_k, shape.heads_kv, shape.dim_v)
    backward_kernel(shape, accum, arch, tiles)(
        q, k, v, do, lse, delta, cu_seqlens_q, cu_seqlens_k, max_seqlen_k, _scale(softmax_scale, shape.dim_qk),
        dq_acc, dk_acc, dv_acc,
    )  # fmt: skip
    postprocess_kernel(shape.heads, shape.dim_qk, shape, arch, pad)(dq, cu_seqlens_q, max_seqlen_q, dq_acc)
    postprocess_kernel(shape.heads_kv, shape.dim_qk, shape, arch, pad)(dk, cu_seqlens_k, max_seqlen_k, dk_acc)
    postprocess_kernel(shape.heads_kv, shape.dim_v, shape, arch, pad)(dv, cu_seqlens_k, max_seqlen_k, dv_acc)
    return dq, dk, dv


# ----------------------------------------------------------------------------- autograd


class FlashAttnVarlenFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, accum):
        check_inputs(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, accum)
        q, k, v = q.contiguous(), k.contiguous(), v.contiguous()
        o, lse = attention_forward(q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, causal, softmax_scale)
        ctx.save_for_backward(q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k)
        ctx.mark_non_differentiable(lse)
        ctx.args = (max_seqlen_q, max_seqlen_k, causal, softmax_scale, accum)
        return o, lse

    @staticmethod
    @once_differentiable  # dq, dk, dv are not differentiable again: a second-order gradient raises
    def backward(ctx, do, _dlse):
        q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k = ctx.saved_tensors
        max_seqlen_q, max_seqlen_k, causal, softmax_scale, accum = ctx.args
        dq, dk, dv = attention_backward(
            do, q, k, v, o, lse, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, accum
        )
        return dq, dk, dv, None, None, None, None, None, None, None


def flash_attn_varlen_func(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    max_seqlen_q: int,
    max_seqlen_k: int,
    causal: bool = False,
    softmax_scale: float | None = None,
    accum: str = "tma",
    return_lse: bool = False,
):
    """GQA attention over packed variable-length sequences, flash-attn's varlen interface.

    q (total_q, heads, dim_qk), k (total_k, heads_kv, dim_qk), v (total_k, heads_kv, dim_v),
    fp16 or bf16; cu_seqlens int32 (batch + 1). Returns o (total_q, heads, dim_v), and with
    ``return_lse`` also the float32 log-sum-exp (heads, total_q) (+inf where a query sees no key).
    ``softmax_scale`` defaults to 1 / sqrt(dim_qk); causal masks are aligned bottom-right.
    """
    o, lse = FlashAttnVarlenFunction.apply(
        q, k, v, cu_seqlens_q, cu_seqlens_k, max_seqlen_q, max_seqlen_k, causal, softmax_scale, accum
    )
    return (o, lse) if return_lse else o
