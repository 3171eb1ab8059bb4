"""``nox -s accuracy``: the LayerNorm error table against float64, per case and
variant (on the GPU; without one, in Triton's interpreter on few rows).

Columns are max abs error / max error relative to max |ref| for each output.
"""

import argparse

import torch

from harness.accuracy import errors, run_layer_norm
from harness.cases.layer_norm import CORRECTNESS_CASES, LAYER_NORM_VARIANTS, interpreted
from kernels.device import interpreter_mode
from kernels.layer_norm.config import FUSED_MAX_N

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
