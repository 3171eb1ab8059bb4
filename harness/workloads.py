"""Callables that run one benchmark case, shared by asv, pytest-benchmark and
the tuner, so every consumer times exactly the same work.
"""

import functools
import itertools
import math
from collections.abc import Callable

import torch

import kernels
from harness.cases.layer_norm import LAYER_NORM_VARIANTS, LayerNormCase


def bench_device() -> torch.device:
    """The GPU, or the CPU for interpreter smoke runs."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def bench_case(case: LayerNormCase) -> LayerNormCase:
    """The case itself on a GPU, its tiny smoke stand-in under the interpreter."""
    return case if torch.cuda.is_available() else case.smoke()


@functools.cache
def _compiled_layer_norm():
    return torch.compile(torch.nn.functional.layer_norm, dynamic=False)


def layer_norm_impl(impl: str) -> Callable:
    """``(x, weight, bias, eps) -> y`` for a kernel variant, eager torch or torch.compile."""
    if impl in LAYER_NORM_VARIANTS:
        return lambda x, w, b, eps: kernels.layer_norm(x, x.shape[-1], w, b, eps, variant=impl)
    if impl == "torch":
        return lambda x, w, b, eps: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)
    if impl == "torch_compile":
        compiled = _compiled_layer_norm()
        return lambda x, w, b, eps: compiled(x, (x.shape[-1],), w, b, eps)
    raise ValueError(f"unknown LayerNorm implementation {impl!r}")


def rotations(nbytes: int) -> int:
    """Input sets to cycle through so that three L2s' worth of data separates
    two uses of the same set (for timers that cannot flush L2)."""
    if not torch.cuda.is_available():
        return 1
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    return max(1, min(16, math.ceil(3 * l2 / nbytes)))


def layer_norm_workload(case: LayerNormCase, impl: str, direction: str, rotate: int = 1) -> Callable[[], object]:
    """One forward (``fwd``) or forward plus backward (``fwd+bwd``) of ``case``."""
    run_impl = layer_norm_impl(impl)
    device = bench_device()
    backward = direction == "fwd+bwd"
    sets = [case.make_inputs(device, requires_grad=backward) for _ in range(rotate)]
    dy = torch.randn(case.m, case.n, device=device, dtype=case.torch_dtype)
    cycle = itertools.cycle(sets)

    def forward():
        x, w, b = next(cycle)
        return run_impl(x, w, b, case.eps)

    def forward_backward():
        x, w, b = next(cycle)
        # autograd.grad returns fresh gradients: no accumulation kernels into .grad
        return torch.autograd.grad(run_impl(x, w, b, case.eps), (x, w, b), dy)

    return forward_backward if backward else forward
