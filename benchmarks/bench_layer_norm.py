"""LayerNorm: Triton kernels against eager PyTorch and torch.compile.

``LayerNorm.time_layer_norm`` is timed by asv with a device-synchronizing
timer over rotated inputs. ``LayerNormMetrics`` tracks what the gate and the
history need: speedups (interleaved, in one process), GB/s and % of the
measured copy peak. Shapes and dtypes come from harness.cases.layer_norm.
"""

from harness import timing
from harness.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    LAYER_NORM_BASELINE,
    LAYER_NORM_REFERENCES,
    LAYER_NORM_VARIANTS,
    bench_case,
    shape_names,
)
from harness.workloads import layer_norm_workload, rotations, sized_for_device


def _workload(shape, dtype, direction, impl, rotate=False):
    if impl == "torch_compile" and not timing.gpu_timing():
        raise NotImplementedError("torch.compile is a GPU reference; not run in interpreter smoke mode")
    case = sized_for_device(bench_case(shape, dtype))
    fn = layer_norm_workload(case, impl, direction, rotations(case.bytes_moved(direction)) if rotate else 1)
    fn()  # compile (Triton JIT, torch.compile) outside any sample
    timing.sync()
    return case, fn


class LayerNorm:
    params = [shape_names(), BENCH_DTYPES, BENCH_DIRECTIONS, LAYER_NORM_VARIANTS + LAYER_NORM_REFERENCES]
    param_names = ["shape", "dtype", "direction", "impl"]
    timer = staticmethod(timing.device_clock)  # reads the clock once the device is idle
    repeat = (3, 10, 2.0)  # (min samples, max samples, seconds) per round
    timeout = 600  # torch.compile's first compile can take minutes

    def setup(self, shape, dtype, direction, impl):
        _, self.fn = _workload(shape, dtype, direction, impl, rotate=True)

    def time_layer_norm(self, shape, dtype, direction, impl):
        self.fn()


class _KernelCase:
    """One Triton variant on one case, ready to time."""

    params = [shape_names(), BENCH_DTYPES, BENCH_DIRECTIONS, LAYER_NORM_VARIANTS]
    param_names = ["shape", "dtype", "direction", "variant"]
    rounds = 1  # each value is already a median over interleaved rounds
    timeout = 600

    def setup(self, shape, dtype, direction, variant):
        self.case, self.fn = _workload(shape, dtype, direction, variant)
        self.nbytes = self.case.bytes_moved(direction)


class LayerNormMetrics(_KernelCase):
    def track_speedup_vs_torch(self, shape, dtype, direction, variant):
        _, baseline = _workload(shape, dtype, direction, LAYER_NORM_BASELINE)
        return timing.ratio(baseline, self.fn)

    track_speedup_vs_torch.unit = "x"

    def track_gbps(self, shape, dtype, direction, variant):
        return timing.gbps(self.nbytes, timing.median_ms(self.fn))

    track_gbps.unit = "GB/s"


class LayerNormGpuMetrics(_KernelCase):
    """Metrics with no meaning in interpreter smoke runs: skipped there."""

    def setup(self, shape, dtype, direction, variant):
        if not timing.gpu_timing():
            raise NotImplementedError("GPU-only metric (device copy peak)")
        super().setup(shape, dtype, direction, variant)

    def track_pct_peak(self, shape, dtype, direction, variant):
        """Achieved bandwidth over the device's copy peak (a 1 GiB copy), measured interleaved."""
        copy_over_kernel = timing.ratio(timing.copy(), self.fn)  # t_copy / t_kernel
        return 100 * self.nbytes / (2 * timing.COPY_BYTES) * copy_over_kernel

    track_pct_peak.unit = "%"


class LayerNormVsCompile:
    """auto against torch.compile'd layer_norm, interleaved. Only auto: each
    process pays torch.compile's load, and auto is what users get."""

    params = [shape_names(), BENCH_DTYPES, BENCH_DIRECTIONS]
    param_names = ["shape", "dtype", "direction"]
    rounds = 1
    timeout = 600

    def setup(self, shape, dtype, direction):
        _, self.kernel = _workload(shape, dtype, direction, "auto")
        _, self.compiled = _workload(shape, dtype, direction, "torch_compile")

    def track_speedup_vs_compile(self, shape, dtype, direction):
        return timing.ratio(self.compiled, self.kernel)

    track_speedup_vs_compile.unit = "x"
