"""LayerNorm: Triton kernels against eager PyTorch and torch.compile.

``LayerNorm.time_layer_norm`` is timed by asv with a device-synchronizing
timer over rotated inputs, launch cost included. ``LayerNormMetrics`` tracks
what the gate and the history need, from kernel times (do_bench, L2 flushed)
measured interleaved in one process per case (harness.metrics): speedups over
eager torch and torch.compile, GB/s and % of the measured copy peak. Shapes
and dtypes come from harness.cases.layer_norm.
"""

from asv_runner.benchmarks.mark import SkipNotImplemented

from harness import timing
from harness.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    LAYER_NORM_REFERENCES,
    LAYER_NORM_VARIANTS,
    bench_case,
    shape_names,
)
from harness.metrics import layer_norm_metrics, per_run
from harness.workloads import layer_norm_workload, rotations, sized_for_device, warmed


class LayerNorm:
    params = [shape_names(), BENCH_DTYPES, BENCH_DIRECTIONS, LAYER_NORM_VARIANTS + LAYER_NORM_REFERENCES]
    param_names = ["shape", "dtype", "direction", "impl"]
    timer = staticmethod(timing.device_clock)  # reads the clock once the device is idle
    rounds = 1
    repeat = (10, 20, 1.0)  # (min samples, max samples, seconds): the gate tests on these samples
    timeout = 600  # a cold torch.compile can take minutes

    def setup(self, shape, dtype, direction, impl):
        if impl == "torch_compile" and not timing.gpu_timing():
            raise NotImplementedError("torch.compile is a GPU reference; not run in interpreter smoke mode")
        case = sized_for_device(bench_case(shape, dtype))
        rotate = rotations(case.bytes_moved(direction))
        self.fn = warmed(layer_norm_workload(case, impl, direction, rotate))

    def time_layer_norm(self, shape, dtype, direction, impl):
        self.fn()


class LayerNormMetrics:
    params = [shape_names(), BENCH_DTYPES, BENCH_DIRECTIONS, LAYER_NORM_VARIANTS]
    param_names = ["shape", "dtype", "direction", "variant"]
    rounds = 1  # each value is already a median over interleaved rounds
    timeout = 600

    def setup_cache(self):
        """Gives the class's benchmarks one working directory for the run (harness.metrics.per_run)."""

    def setup(self, shape, dtype, direction, variant):
        case = sized_for_device(bench_case(shape, dtype))
        measured = per_run(f"layer_norm-{shape}-{dtype}-{direction}", lambda: layer_norm_metrics(case, direction))
        self.metrics = measured[variant]

    def _metric(self, name: str) -> float:
        if name not in self.metrics:
            raise SkipNotImplemented(f"{name} is a GPU metric; not measured in interpreter smoke mode")
        return self.metrics[name]

    def track_speedup_vs_torch(self, shape, dtype, direction, variant):
        return self._metric("speedup_vs_torch")

    track_speedup_vs_torch.unit = "x"

    def track_speedup_vs_compile(self, shape, dtype, direction, variant):
        return self._metric("speedup_vs_compile")

    track_speedup_vs_compile.unit = "x"

    def track_gbps(self, shape, dtype, direction, variant):
        return self._metric("gbps")

    track_gbps.unit = "GB/s"

    def track_pct_peak(self, shape, dtype, direction, variant):
        """Achieved bandwidth over the device's copy bandwidth (a 1 GiB copy, bytes read + written)."""
        return self._metric("pct_peak")

    track_pct_peak.unit = "%"
