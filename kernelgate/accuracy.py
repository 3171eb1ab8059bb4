"""A LayerNorm kernel against the float64 reference: ``run_layer_norm`` for the tests,
``python -m kernelgate.accuracy`` (``nox -s accuracy``) for the error table per case and
variant, on the GPU or, without one, in Triton's interpreter on few rows.

Outputs are poisoned with NaN before every launch, so an element a kernel
fails to write shows up as a NaN error.
"""

import argparse

import torch

from kernelgate.cases.layer_norm import CORRECTNESS_CASES, LAYER_NORM_VARIANTS, LayerNormCase, interpreted
from kernelgate.kernels.device import interpreter_mode
from kernelgate.kernels.layer_norm.config import FUSED_MAX_N, LaunchConfig
from kernelgate.kernels.layer_norm.ops import gpu_of, layer_norm_bwd, layer_norm_fwd, select_variant
from kernelgate.kernels.layer_norm.reference import layer_norm_ref


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


QUANTITIES = ("y", "dx", "dw", "db")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--variants", nargs="+", default=LAYER_NORM_VARIANTS[:2], choices=LAYER_NORM_VARIANTS)
    args = parser.parse_args()
    device = torch.device("cpu" if interpreter_mode() else "cuda")
    where = "Triton interpreter (rows capped)" if interpreter_mode() else torch.cuda.get_device_name(0)
    print(f"LayerNorm vs float64 reference on {where}; cell = max abs error / relative to max |ref|\n")
    header = ["case", "variant", *QUANTITIES, "within tolerance"]
    print("| " + " | ".join(header) + " |\n|" + "---|" * len(header))
    failures = 0
    for case in CORRECTNESS_CASES:
        case = interpreted(case) if interpreter_mode() else case
        for variant in args.variants:
            if variant == "fused" and case.n > FUSED_MAX_N:
                continue
            results = run_layer_norm(case, variant, device)
            cells, ok = [], True
            for q in QUANTITIES:
                got, ref = results[q]
                abs_err, rel_err = errors(got, ref)
                atol, rtol = case.tolerance(q)
                ok &= bool(torch.allclose(got.double(), ref, atol=atol, rtol=rtol))
                cells.append(f"{abs_err:.1e} / {rel_err:.1e}")
            failures += not ok
            print(f"| {case.name} | {variant} | " + " | ".join(cells) + f" | {'yes' if ok else 'NO'} |")
    raise SystemExit(1 if failures else 0)


if __name__ == "__main__":
    main()
