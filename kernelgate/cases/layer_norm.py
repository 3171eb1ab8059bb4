"""LayerNorm cases: shapes, dtypes, tolerances and byte models (append only); the workloads that time them,
the metrics measured on them, and the suite the harness drives them by (``SUITE``).
"""

import dataclasses
import math
from collections.abc import Callable

import torch

from kernelgate import cli
from kernelgate.cases.common import DTYPES, FP32_HALF_ULP, Tolerance
from kernelgate.measure import bandwidth
from kernelgate.suite import Grid, Suite

# Forward output and dx: one rounding to the output dtype after fp32 math.
# fp32: ~1e-6 is typical (statistics in fp32, rsqrt.approx is 2 ulp); 1e-5 bounds it.
# fp16: 11-bit mantissa, one rounding is 2**-11 relative; 2e-3 leaves 4 ulp.
# bf16: 8-bit mantissa, 2**-8 relative per rounding; Triton's interpreter truncates
#       instead of rounding (1 ulp = 2**-7), so 1.6e-2 (2 ulp) covers both.
TOLERANCES = {
    "float32": Tolerance(atol=1e-5, rtol=0.0),
    "float16": Tolerance(atol=1e-3, rtol=2e-3),
    "bfloat16": Tolerance(atol=1e-2, rtol=1.6e-2),
}


@dataclasses.dataclass(frozen=True)
class LayerNormCase:
    m: int  # rows
    n: int  # row length (normalized size)
    dtype: str = "float32"
    offset: float = 0.0  # added to randn inputs; large values break E[x^2] - E[x]^2
    eps: float = 1e-5

    @property
    def name(self) -> str:
        mean = f"-mean{self.offset:g}" if self.offset else ""
        return f"{self.m}x{self.n}-{self.dtype}{mean}"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def make_inputs(self, device, requires_grad: bool = False, generator: torch.Generator | None = None):
        """Fresh random x, weight, bias (never zeros, never ones)."""
        dt = self.torch_dtype
        kw = dict(device=device, dtype=torch.float32, generator=generator)
        x = (torch.randn(self.m, self.n, **kw) + self.offset).to(dt)
        w = (1 + 0.5 * torch.randn(self.n, **kw)).to(dt)
        b = (0.5 * torch.randn(self.n, **kw)).to(dt)
        return tuple(t.requires_grad_(requires_grad) for t in (x, w, b))

    @property
    def tensor_bytes(self) -> int:
        """Bytes of one [M, N] tensor of the case: x, y, dy or dx."""
        return self.m * self.n * self.torch_dtype.itemsize

    def bytes_moved(self, direction: str) -> int:
        """The fewest bytes a kernel must move: each input read once, each output written once.

        fwd: read x, w, b; write y. The suite's fwd case is inference (no input needs a
        gradient), so nothing writes mean and rstd.
        bwd: read x, dy, w, mean, rstd; write dx, dw, db.
        fwd+bwd: the training forward (fwd, plus mean and rstd written in fp32), then bwd.
        """
        rows, params, stats = self.tensor_bytes, self.n * self.torch_dtype.itemsize, self.m * 4
        fwd = 2 * rows + 2 * params
        bwd = 3 * rows + 3 * params + 2 * stats
        return {"fwd": fwd, "bwd": bwd, "fwd+bwd": fwd + 2 * stats + bwd}[direction]

    def tolerance(self, quantity: str) -> tuple[float, float]:
        """(atol, rtol) for y, mean, rstd, dx, dw or db of this case.

        dw and db sum M rows, so their absolute error grows like sqrt(M). The
        backward recomputes xhat from the saved fp32 mean, which is rounded by
        up to half an fp32 ulp of |mean|: large-mean rows carry that into dx
        and dw (4 sigma of it, times sqrt(M) for the sum over rows).
        """
        mean_rounding = 4 * FP32_HALF_ULP * abs(self.offset)
        if quantity in ("mean", "rstd"):  # fp32 statistics whatever the input dtype
            return 1e-6 + mean_rounding, 1e-5
        tol = TOLERANCES[self.dtype]
        scale = math.sqrt(self.m) if quantity in ("dw", "db") else 1.0
        atol = tol.atol * scale
        if quantity == "dx":
            # dx = (g - (xhat * c1 + c2)) * rstd multiplies every rounding in the
            # bracket by rstd; with N = 1 the variance is 0 and rstd = 1/sqrt(eps).
            atol = atol * (self.eps**-0.5 if self.n == 1 else 1.0) + mean_rounding
        if quantity == "dw":
            atol += mean_rounding * scale
        return atol, tol.rtol

    def smoke(self) -> "LayerNormCase":
        """A tiny stand-in for Triton's CPU interpreter that keeps N's shape class
        (a non-power-of-two N stays one)."""
        return dataclasses.replace(self, m=min(self.m, 4), n=max(1, self.n // 16))


# Correctness cases (tests). Under the interpreter M is capped (see interpreted()).
CORRECTNESS_CASES = [
    LayerNormCase(m, n, dtype, offset)
    for dtype in DTYPES
    for m, n, offset in [
        (1024, 1024, 0.0),
        (4096, 1024, 0.0),
        (4096, 4096, 0.0),
        (4096, 8192, 0.0),
        (4096, 5000, 0.0),  # non-power-of-two N
        (37, 1000, 0.0),  # odd M
        (17, 1, 0.0),  # N = 1: y = b, dx = 0
        (63, 1023, 0.0),  # just below / above the two-pass backward chunk
        (63, 1025, 0.0),
        (63, 2047, 0.0),  # just below / above the two-pass forward chunk
        (63, 2049, 0.0),
        (7, 12287, 0.0),  # two_pass backward past 8192: 4-row tiles, three pipelined chunks, the last masked
        (7, 12288, 0.0),  # 16-bit: dx alone, two chunks of 8192 (the second half masked), dw and db by columns
        (9, 16384, 0.0),
        (5, 16385, 0.0),  # a fused head of 16384 and a tail of 1
        (9, 32768, 0.0),  # the largest fused row
        (5, 32769, 0.0),  # just past it: two_pass only
        (3, 65536, 0.0),  # far larger than one block
        (256, 4096, 1e3),  # large mean
        (255, 5000, 1e3),
    ]
]

INTERPRETER_MAX_ROWS = 7  # ~3 ms per interpreted program: keep runs short


def interpreted(case: LayerNormCase) -> LayerNormCase:
    """The same row length on few rows, for Triton's interpreter."""
    return dataclasses.replace(case, m=min(case.m, INTERPRETER_MAX_ROWS))


# Benchmark cases (asv, pytest-benchmark, the gate).
BENCH_SHAPES = [(4096, 1024), (4096, 4096), (4096, 5000), (4096, 8192), (16384, 4096), (32768, 1024), (8192, 8192)]
BENCH_DTYPES = ["float32", "bfloat16", "float16"]
BENCH_DIRECTIONS = ["fwd", "bwd", "fwd+bwd"]  # bwd: the backward alone, of a saved forward
LAYER_NORM_VARIANTS = ["fused", "two_pass", "auto"]

# The row widths models use (hidden sizes from 768 to 32768), each at MODEL_ROWS rows, a batch of
# tokens: the broad set that launch-config selection must be fast on without an entry per width.
MODEL_WIDTHS = [768, 1024, 1600, 2048, 3072, 4096, 6144, 8192, 16384, 32768]
MODEL_ROWS = 8192
MODEL_DIRECTIONS = ["fwd", "fwd+bwd"]


def bench_case(shape: str, dtype: str) -> LayerNormCase:
    m, n = (int(v) for v in shape.split("x"))
    return LayerNormCase(m, n, dtype)


def shape_names() -> list[str]:
    return [f"{m}x{n}" for m, n in BENCH_SHAPES]


def model_width_shape_names() -> list[str]:
    return [f"{MODEL_ROWS}x{n}" for n in MODEL_WIDTHS]


# --- the suite: what the harness drives (kernelgate.suite) ---------------------------------------------


def layer_norm_call(case: LayerNormCase, impl: str) -> Callable[..., torch.Tensor]:
    """``(x, weight, bias) -> y`` for a kernel variant or a reference (``bandwidth.REFERENCES``)."""
    eps = case.eps
    if impl in LAYER_NORM_VARIANTS:
        from kernelgate import kernels  # here: the harness reads the cases without compiling the kernels

        return lambda x, w, b: kernels.layer_norm(x, x.shape[-1], w, b, eps, variant=impl)
    if impl == "torch":
        return lambda x, w, b: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)
    if impl == "torch_compile":
        compiled = bandwidth.compiled(torch.nn.functional.layer_norm)
        return lambda x, w, b: compiled(x, (x.shape[-1],), w, b, eps)
    if impl == "liger":
        from liger_kernel.transformers.functional import liger_layer_norm  # the runner's lock pins it

        return lambda x, w, b: liger_layer_norm(x, w, b, eps)
    raise ValueError(f"unknown LayerNorm implementation {impl!r}")


LAYER_NORM = bandwidth.RowOp(bench_case, layer_norm_call)


def launches(shape: str, dtype: str, direction: str, impl: str, gpu: str | None = None) -> list:
    """The kernels one call of ``impl`` launches for the case on a ``gpu``-class device (its tuned configurations),
    on meta tensors (``Suite.launches``): the inference forward (fwd); the backward's row kernel and column kernel
    (bwd); the training forward, then those (fwd+bwd)."""
    if impl not in LAYER_NORM_VARIANTS:
        return []
    from kernelgate.kernels.layer_norm import ops
    from kernelgate.kernels.layer_norm.config import launch_config

    case = bench_case(shape, dtype)
    dt, m, n = case.torch_dtype, case.m, case.n
    x = torch.empty(m, n, dtype=dt, device="meta")
    w = torch.empty(n, dtype=dt, device="meta")
    stats = torch.empty(m, dtype=torch.float32, device="meta")
    backward = ops.select_variant(impl, "bwd", dt, n, gpu)
    bwd_cfg = launch_config(backward, "bwd", dt, n, gpu)
    # The row slices' words, which the eager training forward zeroes after rstd (ops.backward_exchange_words).
    words = ops.row_words(bwd_cfg.row_slices) if backward == "fused" and bwd_cfg.row_slices > 1 else 0
    made = []
    if direction != "bwd":
        forward = ops.select_variant(impl, "fwd", dt, n, gpu)
        training = direction == "fwd+bwd"
        outputs = (stats, stats) if training else (None, None)
        fwd_cfg = launch_config(forward, "fwd", dt, n, gpu)
        zeroed = words if training and forward == "fused" else 0
        made.append(ops.forward_launch(x, w, w, case.eps, forward, x, *outputs, fwd_cfg, exchange_words=zeroed))
    if direction != "fwd":
        row, partial = ops.backward_launch(x, x, w, w, stats, stats, backward, x, bwd_cfg, exchange_words=words)
        if partial is None:
            column = ops.column_grads_launch(x, x, stats, stats, w, w)
        else:
            groups = row.grid[0] // row.constexprs.get("SLICES", 1)
            again = words if row.constexprs.get("EXCHANGE_AFTER_RSTD") else 0  # the column sum zeroes them again
            column = ops.column_sum_launch(partial, groups, [w, w], stats, m, again)
        made += [row, column]
    return made


NOTES = "- cases 8192xN at N from 768 to 32768 are the model widths, measured for `auto` alone.\n" + bandwidth.NOTES

# The benchmark shapes, every variant beside every reference; then ``auto``, what a user calls, at the
# widths models use.
SHAPES_GRID = Grid(
    name="LayerNorm",
    time_method="time_layer_norm",
    params={"shape": shape_names(), "dtype": BENCH_DTYPES, "direction": BENCH_DIRECTIONS},
    variants=LAYER_NORM_VARIANTS,
    references=bandwidth.REFERENCES,
    variant_name="variant",
    timed=LAYER_NORM.timed,
    measure=LAYER_NORM.measure,
    metrics=bandwidth.METRICS,
    label="layer_norm",
    open_params={"shape": cli.shape},
)
WIDTHS_GRID = dataclasses.replace(
    SHAPES_GRID,
    name="LayerNormWidths",
    params={"shape": model_width_shape_names(), "dtype": BENCH_DTYPES, "direction": MODEL_DIRECTIONS},
    variants=["auto"],
)

SUITE = Suite(
    name="layer_norm",
    title="LayerNorm",
    grids=(SHAPES_GRID, WIDTHS_GRID),
    workload=LAYER_NORM.warm_call,
    jit_references=bandwidth.JIT_REFERENCES,
    seconds=LAYER_NORM.seconds,
    smoke_label=LAYER_NORM.smoke_label,
    notes=NOTES,
    launches=launches,
)
