"""PyTorch-facing RMSNorm: input validation, launchers and autograd.

``rms_norm`` normalizes over the trailing ``normalized_shape`` dimensions of an input of any
leading shape, with ``torch.nn.functional.rms_norm``'s signature and defaults. The launch
configuration (``config.heuristic_config``) picks the kernel: the row in registers, in row slices
(backward), or looped.
"""

import math
from collections.abc import Sequence

import torch
from torch.autograd.function import once_differentiable

from kernelgate.kernels.device import interpreter_mode
from kernelgate.kernels.launch import Launch
from kernelgate.kernels.layer_norm.config import cdiv, next_power_of_2, persistent_programs

# Launch helpers the LayerNorm's launchers use: rows as a 2-D view, the 16-byte vector width of a launch's
# tensors, programmatic dependent launch and the target's generation (sm_90+), the SM count, the deterministic
# column sum of per-program partial rows (one slab here: dw), and the words a row's slices exchange through.
from kernelgate.kernels.layer_norm.ops import (
    _on_sm90,
    _rows,
    _shaped,
    _sms,
    column_sum_launch,
    pdl_of,
    row_words,
    vector_width,
)
from kernelgate.kernels.norm_inputs import check_tensor, normalized_shape_of
from kernelgate.kernels.rms_norm import triton_kernels as tk
from kernelgate.kernels.rms_norm.config import MAX_ROW_SLICES, RMSNormConfig, heuristic_config


def default_eps(dtype: torch.dtype) -> float:
    """What ``eps=None`` means, as torch's ``rms_norm`` does it: the machine epsilon of the type it
    computes in, fp32 for every dtype these kernels take (2**-23, for fp16 and bf16 inputs too)."""
    return torch.finfo(torch.float32).eps


def _check_inputs(x, normalized_shape: tuple[int, ...], weight, eps) -> tuple[int, float]:
    """Validate everything a launch depends on; return N, the row length, and eps resolved."""
    check_tensor("rms_norm", "x", x)
    if eps is None:
        eps = default_eps(x.dtype)
    elif isinstance(eps, bool) or not isinstance(eps, (int, float)):
        raise TypeError(f"rms_norm: eps must be a float or None, got {type(eps).__name__}")
    if not 0 <= eps < math.inf:  # a negative eps turns rows of small values to NaN
        raise ValueError(f"rms_norm: eps must be finite and at least 0, got {eps}")
    if x.dim() < len(normalized_shape) or tuple(x.shape[x.dim() - len(normalized_shape) :]) != normalized_shape:
        raise ValueError(f"rms_norm: x of shape {tuple(x.shape)} does not end in normalized_shape {normalized_shape}")
    n = math.prod(normalized_shape)
    if n == 0:
        raise ValueError(f"rms_norm: normalized_shape {normalized_shape} has zero elements (N = 0)")
    if weight is not None:
        check_tensor("rms_norm", "weight", weight, like=x)
        if weight.shape != normalized_shape:
            raise ValueError(f"rms_norm: weight has shape {tuple(weight.shape)}, expected {normalized_shape}")
    return n, float(eps)


def _flat(weight: torch.Tensor | None) -> torch.Tensor | None:
    """The weight as one contiguous row of N elements (strided or expanded ones are copied)."""
    return weight if weight is None or weight.is_contiguous() else weight.contiguous()


def _config(cfg: RMSNormConfig | None, direction: str, x2: torch.Tensor) -> RMSNormConfig:
    return cfg or heuristic_config(direction, x2.dtype, x2.shape[1])


def forward_launch(x2, weight, eps: float, y, rstd, cfg: RMSNormConfig | None = None) -> Launch:
    """The forward's launch on a validated [M, N] view; ``rstd`` None: not stored (inference). ``cfg``
    overrides the heuristic's configuration (tests, the ahead-of-time code checks)."""
    m, n = x2.shape
    cfg = _config(cfg, "fwd", x2)
    looped = cfg.looped(n)
    constexprs = dict(HAS_WEIGHT=weight is not None, STORE_RSTD=rstd is not None, BLOCK_M=cfg.block_m,
                      BLOCK_N=cfg.block_n, VEC=vector_width(n, x2, y, weight))  # fmt: skip
    if not looped:
        constexprs["PDL"] = pdl_of(x2)
    absent = lambda t: t if t is not None else x2  # never read
    return Launch(
        kernel=tk.looped_fwd_kernel if looped else tk.fwd_kernel,
        grid=(cdiv(m, cfg.block_m),),
        args=(x2, y, absent(weight), absent(rstd), x2.stride(0), y.stride(0), m, n, eps),
        constexprs=constexprs,
        num_warps=cfg.num_warps,
    )


def backward_launch(dy2, x2, weight, rstd, dx, cfg: RMSNormConfig | None = None) -> tuple[Launch, torch.Tensor | None]:
    """The backward's row kernel, and the fp32 buffer it writes besides dx (None where nothing needs one):
    the partial sums of dw, [groups, N], then for rows in slices the slices' words (zeroed here). Persistent:
    as many programs as the SMs hold (``programs_per_sm`` each), at most one group per row block, so every
    group writes its partial row and the partial sums need no zeroing. A group is one program, or the
    ``row_slices`` programs that share each of its rows."""
    m, n = x2.shape
    cfg = _config(cfg, "bwd", x2)
    if cfg.row_slices > 1:
        _check_row_slices(cfg, n)
        if interpreter_mode():
            # Slices wait for each other, and the interpreter runs programs one after another: a row in one.
            cfg = RMSNormConfig(1, next_power_of_2(n), cfg.num_warps)
    slices = cfg.row_slices
    groups = persistent_programs(cdiv(m, cfg.block_m), _sms(x2) * cfg.programs_per_sm // slices,
                                 cfg.programs_per_sm > 1)  # fmt: skip
    partial = _partial_sums(groups, slices, weight is not None, x2)
    vec = vector_width(n, x2, dy2, dx, weight)
    args = (x2, dy2, dx, weight if weight is not None else x2, rstd, partial if partial is not None else rstd,
            x2.stride(0), dy2.stride(0), dx.stride(0), m, n)  # fmt: skip
    constexprs = dict(HAS_WEIGHT=weight is not None, BLOCK_N=cfg.block_n, VEC=vec, NUM_STAGES=cfg.num_stages)
    if slices == 1:
        kernel = tk.looped_bwd_kernel if cfg.looped(n) else tk.bwd_kernel
        return Launch(kernel, (groups,), args, dict(BLOCK_M=cfg.block_m, **constexprs), cfg.num_warps), partial
    # The bulk prefetch (sm_90+) takes whole 16-byte aligned rows.
    prefetch = cfg.prefetch_steps > 0 and _on_sm90(x2) and vec * x2.element_size() == 16
    constexprs.update(SLICES=slices, FINISH_LATE=cfg.finish_late, PREFETCH=prefetch)
    args = (*args, cfg.prefetch_steps * groups if prefetch else 0)
    return Launch(tk.sliced_bwd_kernel, (groups * slices,), args, constexprs, cfg.num_warps, cooperative=True), partial


def _check_row_slices(cfg: RMSNormConfig, n: int) -> None:
    if not (cfg.block_m == cfg.programs_per_sm == 1 and cfg.row_slices <= MAX_ROW_SLICES
            and cfg.block_n * (cfg.row_slices - 1) < n <= cfg.block_n * cfg.row_slices):  # fmt: skip
        raise ValueError(
            f"rms_norm: {cfg} splits rows of {n} into {cfg.row_slices} slices; the backward splits a row into 2 to "
            f"{MAX_ROW_SLICES} slices of block_n columns, each holding some, one row a step, one program an SM"
        )


def _partial_sums(groups: int, slices: int, weight: bool, x2) -> torch.Tensor | None:
    """The backward's fp32 buffer: dw's partial sums, [groups, N], then for rows in slices the slices' words,
    ``row_words`` 64-bit words a row, zeroed (16-byte aligned: a fresh allocation of PyTorch's caching
    allocator is at least 512-byte aligned)."""
    m, n = x2.shape
    if slices == 1:
        return torch.empty((groups, n), dtype=torch.float32, device=x2.device) if weight else None
    start = cdiv(groups * n, 4) * 4 if weight else 0
    buffer = torch.empty(start + 2 * row_words(slices) * m, dtype=torch.float32, device=x2.device)
    buffer[start:].zero_()
    return buffer


def rms_norm_fwd(x2, weight, eps: float, out=None, cfg: RMSNormConfig | None = None, stats: bool = True):
    """Run the forward on a validated [M, N] view (unit column stride); returns (y, rstd).

    ``out`` optionally supplies (y, rstd) to write into (tests pass NaN-filled ones); ``stats=False``
    (inference) neither allocates nor stores rstd, and returns None for it.
    """
    if out is None:
        y = torch.empty_like(x2, memory_format=torch.contiguous_format)
        out = y, torch.empty(x2.shape[0], dtype=torch.float32, device=x2.device) if stats else None
    if x2.shape[0] > 0:
        forward_launch(x2, weight, eps, *out, cfg)()
    return out


def rms_norm_bwd(dy2, x2, weight, rstd, out=None, cfg: RMSNormConfig | None = None):
    """Run the backward; returns (dx, dw or None). ``out`` optionally supplies (dx, dw) to write into."""
    dx, dw = out if out is not None else (torch.empty_like(x2, memory_format=torch.contiguous_format), None)
    if weight is not None and dw is None:
        dw = torch.empty_like(weight)
    if x2.shape[0] == 0:
        return dx, None if dw is None else dw.zero_()
    launch, partial = backward_launch(dy2, x2, weight, rstd, dx, cfg)
    launch()
    if weight is not None:
        column_sum_launch(partial, groups_of(launch), [dw])()
    return dx, dw


def groups_of(launch: Launch) -> int:
    """The rows of a backward launch's partial sums: its programs, or its groups of row slices."""
    return launch.grid[0] // launch.constexprs.get("SLICES", 1)


def _forward(x, normalized_shape, weight, eps, stats: bool):
    """y shaped as x, and what the backward reads: (x2, weight, rstd)."""
    n, eps = _check_inputs(x, normalized_shape, weight, eps)
    x2, weight = _rows(x, n), _flat(weight)
    y, rstd = rms_norm_fwd(x2, weight, eps, stats=stats)
    return _shaped(y, x.shape), (x2, weight, rstd)


class RMSNormFunction(torch.autograd.Function):
    @staticmethod
    def forward(ctx, x, normalized_shape, weight, eps):
        y, saved = _forward(x, normalized_shape, weight, eps, stats=True)
        ctx.save_for_backward(*saved)
        ctx.x_shape = x.shape
        return y

    @staticmethod
    @once_differentiable  # a second-order gradient through it raises rather than reading 0
    def backward(ctx, dy):
        x2, weight, rstd = ctx.saved_tensors
        dx, dw = rms_norm_bwd(_rows(dy, x2.shape[1]), x2, weight, rstd)
        return _shaped(dx, ctx.x_shape), None, dw, None


def rms_norm(
    input: torch.Tensor,
    normalized_shape: int | Sequence[int],
    weight: torch.Tensor | None = None,
    eps: float | None = None,
) -> torch.Tensor:
    """Drop-in for ``torch.nn.functional.rms_norm`` backed by the Triton kernels: the same arguments and
    defaults (``eps=None``: ``default_eps``); fp32, fp16 and bf16 inputs, the weight in x's dtype."""
    x = input
    normalized_shape = normalized_shape_of("rms_norm", normalized_shape)
    needs_grad = torch.is_grad_enabled() and (
        getattr(x, "requires_grad", False) or getattr(weight, "requires_grad", False)
    )
    if not needs_grad:
        # Inference: no autograd.Function and no rstd kept for a backward.
        return _forward(x, normalized_shape, weight, eps, stats=False)[0]
    return RMSNormFunction.apply(x, normalized_shape, weight, eps)
