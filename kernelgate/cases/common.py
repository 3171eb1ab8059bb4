"""What every kernel's cases share: dtypes by the names cases give them, and the elementwise tolerance."""

import dataclasses

import torch

DTYPES = {"float32": torch.float32, "bfloat16": torch.bfloat16, "float16": torch.float16}

FP32_HALF_ULP = 2.0**-24  # relative rounding error of one fp32 rounding


@dataclasses.dataclass(frozen=True)
class Tolerance:
    """|got - ref| <= atol * scale + rtol * |ref|, elementwise, against a float64 reference."""

    atol: float
    rtol: float
