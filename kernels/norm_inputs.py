"""Input checks the row-wise norms (LayerNorm, RMSNorm) share; each error names the op and the problem."""

import operator
from collections.abc import Sequence

import torch

from kernelgate.kernels.device import interpreter_mode

SUPPORTED_DTYPES = (torch.float32, torch.float16, torch.bfloat16)


def check_tensor(op: str, name: str, t, like: torch.Tensor | None = None) -> None:
    """``t`` is a tensor the kernels take: x itself, or (``like=x``) a parameter of x's dtype and device."""
    if not isinstance(t, torch.Tensor):
        raise TypeError(f"{op}: {name} must be a torch.Tensor, got {type(t).__name__}")
    if like is not None and t.dtype != like.dtype:  # like's dtype is checked: so is t's when they match
        raise TypeError(f"{op}: {name} has dtype {t.dtype} but x has {like.dtype}")
    if like is None and t.dtype not in SUPPORTED_DTYPES:
        raise TypeError(f"{op}: {name} has dtype {t.dtype}; supported: float32, float16, bfloat16")
    if like is not None and t.device != like.device:
        raise ValueError(f"{op}: {name} is on {t.device} but x is on {like.device}")
    if like is None and not t.is_cuda and not interpreter_mode():
        raise ValueError(
            f"{op}: {name} is on {t.device}; the Triton kernels need a CUDA tensor "
            "(or TRITON_INTERPRET=1 for the CPU interpreter)"
        )


def normalized_shape_of(op: str, normalized_shape: int | Sequence[int]) -> tuple[int, ...]:
    """As a tuple of ints; like torch's, at least one dimension (an empty one would normalize nothing)."""
    if isinstance(normalized_shape, int) and not isinstance(normalized_shape, bool):
        return (normalized_shape,)
    try:
        shape = tuple(operator.index(d) for d in normalized_shape)
    except TypeError:
        raise TypeError(
            f"{op}: normalized_shape must be an int or a sequence of ints, got {normalized_shape!r}"
        ) from None
    if not shape:
        raise ValueError(f"{op}: normalized_shape is empty; it needs at least the last dimension's size")
    return shape
