"""Run a LayerNorm kernel against the float64 reference; shared by the tests and
``nox -s accuracy``.

Outputs are poisoned with NaN before every launch, so an element a kernel
fails to write shows up as a NaN error.
"""

import torch

from harness.cases.layer_norm import LayerNormCase
from kernels.layer_norm.config import LaunchConfig
from kernels.layer_norm.ops import gpu_of, layer_norm_bwd, layer_norm_fwd, select_variant
from kernels.layer_norm.reference import layer_norm_ref


def _poisoned(*shape_like):
    return tuple(torch.full_like(t, float("nan")) for t in shape_like)


def run_layer_norm(
    case: LayerNormCase, variant: str, device, cfgs: dict[str, LaunchConfig] | None = None
) -> dict[str, tuple[torch.Tensor, torch.Tensor]]:
    """{quantity: (kernel result, float64 reference)} on fresh random inputs; ``cfgs``
    ({"fwd": ..., "bwd": ...}) overrides the launch configurations."""
    cfgs = cfgs or {}
    x, w, b = case.make_inputs(device)
    dy = torch.randn_like(x)
    fwd, bwd = (select_variant(variant, direction, x.dtype, case.n, gpu_of(x)) for direction in ("fwd", "bwd"))
    mean_out = torch.empty(case.m, dtype=torch.float32, device=device)
    y, mean, rstd = layer_norm_fwd(x, w, b, case.eps, fwd, out=_poisoned(x, mean_out, mean_out), cfg=cfgs.get("fwd"))
    dx, dw, db = layer_norm_bwd(dy, x, w, b, mean, rstd, bwd, out=_poisoned(x, w, b), cfg=cfgs.get("bwd"))
    y_ref, dx_ref, dw_ref, db_ref, mean_ref, rstd_ref = layer_norm_ref(x, w, b, case.eps, dy)
    return {
        "y": (y, y_ref),
        "mean": (mean, mean_ref),
        "rstd": (rstd, rstd_ref),
        "dx": (dx, dx_ref),
        "dw": (dw, dw_ref),
        "db": (db, db_ref),
    }


def errors(got: torch.Tensor, ref: torch.Tensor) -> tuple[float, float]:
    """(max abs error, max error relative to max |ref|); NaN anywhere gives inf."""
    diff = (got.double() - ref).abs()
    if not torch.isfinite(diff).all():
        return float("inf"), float("inf")
    abs_err = diff.max().item() if diff.numel() else 0.0
    scale = ref.abs().max().item() if ref.numel() else 0.0
    return abs_err, abs_err / scale if scale else abs_err
