"""RMSNorm cases: shapes, dtypes, tolerances and byte models (append only); the workloads that time them, the
metrics measured on them, and the suite the harness drives them by (``SUITE``).
"""

import dataclasses
import math
from collections.abc import Callable

import torch

from kernelgate import cli
from kernelgate.cases.common import DTYPES, Tolerance
from kernelgate.measure import bandwidth
from kernelgate.suite import Grid, Suite

# y and dx: one rounding to the output dtype after fp32 math (measured against the float64
# reference: fp32 max abs error 1e-6 on unit-scale rows; bf16 in Triton's interpreter 1 ulp of |y|).
# fp32: rstd is correctly rounded, y = x * rstd * w two roundings more, so a few ulp of |y| (~5e-7 at
#       |y| ~ 4); dx = (g - xhat * c1) * rstd loses a few more bits to the difference. 1e-5 bounds both,
#       as the LayerNorm's; rtol 1e-5 for the rare values past 10.
# fp16: 11-bit mantissa, one rounding is 2**-11 relative; 2e-3 leaves 4 ulp.
# bf16: 8-bit mantissa, 2**-8 relative per rounding; Triton's interpreter truncates instead of
#       rounding (1 ulp = 2**-7), so 1.6e-2 (2 ulp) covers both.
TOLERANCES = {
    "float32": Tolerance(atol=1e-5, rtol=1e-5),
    "float16": Tolerance(atol=1e-3, rtol=2e-3),
    "bfloat16": Tolerance(atol=1e-2, rtol=1.6e-2),
}

# What torch's rms_norm takes for eps=None with these dtypes: fp32's machine epsilon (ops.default_eps).
TORCH_DEFAULT_EPS = torch.finfo(torch.float32).eps


@dataclasses.dataclass(frozen=True)
class RMSNormCase:
    m: int  # rows
    n: int  # row length (normalized size)
    dtype: str = "float32"
    offset: float = 0.0  # added to randn inputs: rows of large mean square
    eps: float | None = None  # None: torch's default (TORCH_DEFAULT_EPS)

    @property
    def name(self) -> str:
        mean = f"-mean{self.offset:g}" if self.offset else ""
        eps = f"-eps{self.eps:g}" if self.eps is not None else ""
        return f"{self.m}x{self.n}-{self.dtype}{mean}{eps}"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    @property
    def resolved_eps(self) -> float:
        return TORCH_DEFAULT_EPS if self.eps is None else self.eps

    def make_inputs(self, device, requires_grad: bool = False, generator: torch.Generator | None = None):
        """Fresh random x and weight (never zeros, never ones)."""
        kw = dict(device=device, dtype=torch.float32, generator=generator)
        x = (torch.randn(self.m, self.n, **kw) + self.offset).to(self.torch_dtype)
        w = (1 + 0.5 * torch.randn(self.n, **kw)).to(self.torch_dtype)
        return tuple(t.requires_grad_(requires_grad) for t in (x, w))

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one [M, N] tensor of the case: x, y, dy or dx."""
        return self.m * self.n * self.torch_dtype.itemsize

    def bytes_moved(self, direction: str) -> int:
        """The fewest bytes a kernel must move: each input read once, each output written once.

        fwd: read x, w; write y. The suite's fwd case is inference (no input needs a gradient), so
        nothing writes rstd.
        bwd: read x, dy, w, rstd; write dx, dw.
        fwd+bwd: the training forward (fwd, plus rstd written in fp32), then bwd.
        """
        rows, params, stats = self.tensor_bytes, self.n * self.torch_dtype.itemsize, self.m * 4
        fwd = 2 * rows + params
        bwd = 3 * rows + 2 * params + stats
        return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + stats + bwd}[direction]

    def smoke(self) -> "RMSNormCase":
        """A tiny stand-in for Triton's CPU interpreter that keeps N's shape class (a non-power-of-two N
        stays one)."""
        return dataclasses.replace(self, m=min(self.m, 4), n=max(1, self.n // 16))

    def tolerance(self, quantity: str) -> tuple[float, float]:
        """(atol, rtol) for y, rstd, dx or dw of this case.

        dw sums M rows, so its absolute error grows like sqrt(M). With N = 1, dx = g * eps * rstd**3
        is what is left of g - xhat**2 * g, where xhat**2 = x**2 / (x**2 + eps) is 1 to within eps:
        the kernel's roundings of that difference, a few ulp of g, are multiplied by rstd, up to
        1/sqrt(eps).
        """
        if quantity == "rstd":  # fp32 whatever the input dtype; correctly rounded steps
            return 0.0, 1e-5
        tol = TOLERANCES[self.dtype]
        atol = tol.atol * (math.sqrt(self.m) if quantity == "dw" else 1.0)
        if quantity == "dx" and self.n == 1:
            atol *= self.resolved_eps**-0.5
        return atol, tol.rtol


# Correctness cases (tests). Under the interpreter M is capped (see interpreted()).
CORRECTNESS_CASES = [
    RMSNormCase(m, n, dtype, offset, eps)
    for dtype in DTYPES
    for m, n, offset, eps in [
        (1024, 1024, 0.0, None),
        (4096, 4096, 0.0, None),
        (4096, 5000, 0.0, None),  # non-power-of-two N
        (37, 1000, 0.0, None),  # odd M
        (37, 1000, 0.0, 1e-6),  # an explicit eps, as models set it
        (1, 4096, 0.0, None),  # M = 1: one program, one partial row
        (17, 1, 0.0, None),  # N = 1: y = x / sqrt(x^2 + eps) ~ sign(x), dx ~ 0
        (1, 1, 0.0, 1e-5),
        (63, 1023, 0.0, None),
        (63, 8191, 0.0, None),  # the widest backward row held in registers (8192 lanes)...
        (63, 8193, 0.0, None),  # ...and just past it: the looped backward, its last chunk one column
        (37, 12287, 0.0, None),  # the last looped backward row before the row slices...
        (37, 12288, 0.0, None),  # ...and the narrowest in row slices (two of 8192 lanes)
        (9, 16384, 0.0, None),
        (1001, 20000, 1e3, None),  # three row slices, their words padded to four; large mean, several rows a group
        (5, 32768, 0.0, None),  # the widest forward row held in registers (the backward: four slices)...
        (5, 32769, 0.0, None),  # ...and just past it: the looped forward
        (3, 65536, 0.0, None),
        (3, 100003, 0.0, None),  # a prime, far past one chunk
        (256, 4096, 1e3, None),  # large mean: sum(x^2) ~ 4e9 per row
        (255, 5000, 1e3, None),
    ]
]

INTERPRETER_MAX_ROWS = 7  # ~3 ms per interpreted program: keep runs short


def interpreted(case: RMSNormCase) -> RMSNormCase:
    """The same row length on few rows, for Triton's interpreter."""
    return dataclasses.replace(case, m=min(case.m, INTERPRETER_MAX_ROWS))


# Benchmark cases: the row widths models use (hidden sizes from 768 to 32768), each at MODEL_ROWS rows,
# a batch of tokens, in every dtype and direction (bwd: the backward alone, of a saved forward).
MODEL_WIDTHS = [768, 1024, 1600, 2048, 3072, 4096, 6144, 8192, 16384, 32768]
MODEL_ROWS = 8192
BENCH_SHAPES = [(MODEL_ROWS, n) for n in MODEL_WIDTHS]
BENCH_DTYPES = ["float32", "bfloat16", "float16"]
BENCH_DIRECTIONS = ["fwd", "bwd", "fwd+bwd"]
# The kernel the launch heuristic picks for the row width (kernels/rms_norm/config.py): what a user calls.
RMS_NORM_VARIANTS = ["auto"]


def bench_case(shape: str, dtype: str) -> RMSNormCase:
    m, n = (int(v) for v in shape.split("x"))
    return RMSNormCase(m, n, dtype)


def shape_names() -> list[str]:
    return [f"{m}x{n}" for m, n in BENCH_SHAPES]


# --- the suite: what the harness drives (kernelgate.suite) ---------------------------------------------


def rms_norm_call(case: RMSNormCase, impl: str) -> Callable[..., torch.Tensor]:
    """``(x, weight) -> y`` for the kernel (RMS_NORM_VARIANTS) or a reference (``bandwidth.REFERENCES``)."""
    eps = case.resolved_eps
    if impl in RMS_NORM_VARIANTS:
        from kernelgate import kernels  # here: the harness reads the cases without compiling the kernels

        return lambda x, w: kernels.rms_norm(x, (x.shape[-1],), w, eps)
    if impl == "torch":
        return lambda x, w: torch.nn.functional.rms_norm(x, (x.shape[-1],), w, eps)
    if impl == "torch_compile":
        compiled = bandwidth.compiled(torch.nn.functional.rms_norm)
        return lambda x, w: compiled(x, (x.shape[-1],), w, eps)
    if impl == "liger":
        from liger_kernel.transformers.functional import liger_rms_norm  # the runner's lock pins it

        # Its defaults but in_place: the backward would write dx over dy, which every replay reads again.
        return lambda x, w: liger_rms_norm(x, w, eps, in_place=False)
    raise ValueError(f"unknown RMSNorm implementation {impl!r}")


RMS_NORM = bandwidth.RowOp(bench_case, rms_norm_call)


def launches(shape: str, dtype: str, direction: str, impl: str, gpu: str | None = None) -> list:
    """The kernels one call of ``impl`` launches for the case, on meta tensors (``Suite.launches``): the inference
    forward (fwd); the backward's row kernel and column sum (bwd); the training forward, then those (fwd+bwd)."""
    if impl not in RMS_NORM_VARIANTS:
        return []
    from kernelgate.kernels.layer_norm.ops import column_sum_launch
    from kernelgate.kernels.rms_norm.ops import backward_launch, forward_launch, groups_of

    case = bench_case(shape, dtype)
    x = torch.empty(case.m, case.n, dtype=case.torch_dtype, device="meta")
    w = torch.empty(case.n, dtype=case.torch_dtype, device="meta")
    rstd = torch.empty(case.m, dtype=torch.float32, device="meta")
    made = []
    if direction != "bwd":
        made.append(forward_launch(x, w, case.resolved_eps, x, rstd if direction == "fwd+bwd" else None))
    if direction != "fwd":
        row, partial = backward_launch(x, x, w, rstd, x)
        made += [row, column_sum_launch(partial, groups_of(row), [w])]
    return made


GRID = Grid(
    name="RMSNorm",
    time_method="time_rms_norm",
    params={"shape": shape_names(), "dtype": BENCH_DTYPES, "direction": BENCH_DIRECTIONS},
    variants=RMS_NORM_VARIANTS,
    references=bandwidth.REFERENCES,
    variant_name="variant",
    timed=RMS_NORM.timed,
    measure=RMS_NORM.measure,
    metrics=bandwidth.METRICS,
    label="rms_norm",
    open_params={"shape": cli.shape},
)

SUITE = Suite(
    name="rms_norm",
    title="RMSNorm",
    grids=(GRID,),
    workload=RMS_NORM.warm_call,
    jit_references=bandwidth.JIT_REFERENCES,
    seconds=RMS_NORM.seconds,
    smoke_label=RMS_NORM.smoke_label,
    launches=launches,
    notes="- cases 8192xN at N from 768 to 32768 are the model widths.\n" + bandwidth.NOTES,
)
