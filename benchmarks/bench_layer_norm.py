"""LayerNorm: Triton kernels against eager PyTorch, torch.compile and Liger-Kernel.

``LayerNorm.time_layer_norm`` is the device time of one call: each asv sample
replays the call, captured in CUDA graphs on rotated inputs, 50 times back to
back (timing.sample_clock), so the host's launch path, which varies between
processes far more than the kernels do, stays out of the samples the gate
compares. ``LayerNormMetrics`` tracks what the gate and the history need,
measured interleaved, every case in one process (kernelgate.measure.metrics): speedups over
eager torch, torch.compile and Liger-Kernel, GB/s, % of the measured copy peak and of a
copy of one of the case's tensors (device times, do_bench with L2 flushed), and
the host's cost of one eager call, alone and over eager torch's and torch.compile's.
Shapes and dtypes come from kernelgate.cases.layer_norm. ``LayerNormWidths`` and
``LayerNormWidthsMetrics`` measure ``auto``, what a user calls, at the row widths models use.
"""

from asv_runner.benchmarks.mark import SkipNotImplemented

from kernelgate.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    GPU_ONLY_REFERENCES,
    LAYER_NORM_REFERENCES,
    LAYER_NORM_VARIANTS,
    MODEL_DIRECTIONS,
    bench_case,
    model_width_shape_names,
    shape_names,
)
from kernelgate.measure import timing
from kernelgate.measure.metrics import case_key, case_metrics, layer_norm_measures, measure_cases, selected_params
from kernelgate.measure.workloads import sized_for_device, timed_layer_norm

# asv's version of the host-cost benchmarks: results measured another way drop out of their history.
HOST_ESTIMATOR = "least of 50 loops of 10 calls, each after 10 untimed calls of its own, garbage collector off"


def measure_selected(params: list[list]) -> dict:
    """The metrics of a metrics class's selected cases: each case (shape, dtype, direction) once,
    its selected variants side by side."""
    variants: dict[tuple, set] = {}
    for *case, variant in selected_params(params):
        variants.setdefault(tuple(case), set()).add(variant)
    measures = {}
    for case, chosen in sorted(variants.items()):
        measures |= layer_norm_measures([case], variants=[v for v in params[3] if v in chosen])
    return measure_cases(measures)


class LayerNorm:
    params = [shape_names(), BENCH_DTYPES, BENCH_DIRECTIONS, LAYER_NORM_VARIANTS + LAYER_NORM_REFERENCES]
    param_names = ["shape", "dtype", "direction", "impl"]
    timer = staticmethod(timing.sample_clock)  # per call of a back-to-back sample
    rounds = 1
    repeat = (10, 20, 1.0)  # (min samples, max samples, seconds): the gate tests on these samples
    timeout = 600  # a cold torch.compile can take minutes

    def setup(self, shape, dtype, direction, impl):
        if impl in GPU_ONLY_REFERENCES and not timing.gpu_timing():
            raise NotImplementedError(f"{impl} is a GPU reference; not run in interpreter smoke mode")
        self.sample = timing.back_to_back(timed_layer_norm(sized_for_device(bench_case(shape, dtype)), impl, direction))

    def time_layer_norm(self, shape, dtype, direction, impl):
        self.sample()


class LayerNormWidths(LayerNorm):
    params = [model_width_shape_names(), BENCH_DTYPES, MODEL_DIRECTIONS, ["auto", *LAYER_NORM_REFERENCES]]


class LayerNormMetrics:
    params = [shape_names(), BENCH_DTYPES, BENCH_DIRECTIONS, LAYER_NORM_VARIANTS]
    param_names = ["shape", "dtype", "direction", "variant"]
    rounds = 1  # each value is already a median over interleaved rounds
    timeout = 600

    def setup_cache(self):
        """Every case measured once, in this one process; asv hands the result to each benchmark."""
        return measure_selected(self.params)

    setup_cache.timeout = 1800  # ~3 minutes on an H100; a cold torch.compile cache takes longer

    def setup(self, measured, shape, dtype, direction, variant):
        self.metrics = case_metrics(measured, case_key(shape, dtype, direction))[variant]

    def _metric(self, name: str) -> float:
        if name not in self.metrics:
            raise SkipNotImplemented(f"{name} is a GPU metric; not measured in interpreter smoke mode")
        return self.metrics[name]

    def track_speedup_vs_torch(self, measured, shape, dtype, direction, variant):
        return self._metric("speedup_vs_torch")

    track_speedup_vs_torch.unit = "x"

    def track_speedup_vs_compile(self, measured, shape, dtype, direction, variant):
        return self._metric("speedup_vs_compile")

    track_speedup_vs_compile.unit = "x"

    def track_speedup_vs_liger(self, measured, shape, dtype, direction, variant):
        return self._metric("speedup_vs_liger")

    track_speedup_vs_liger.unit = "x"

    def track_gbps(self, measured, shape, dtype, direction, variant):
        return self._metric("gbps")

    track_gbps.unit = "GB/s"

    def track_pct_peak(self, measured, shape, dtype, direction, variant):
        """Achieved bandwidth over the device's copy bandwidth (a 1 GiB copy, bytes read + written)."""
        return self._metric("pct_peak")

    track_pct_peak.unit = "%"

    def track_pct_tensor_copy(self, measured, shape, dtype, direction, variant):
        """Achieved bandwidth over that of a copy of one [M, N] tensor of the case into another, timed
        as the kernels are: near 100 where pct_peak falls short, this size, not the kernel, is why."""
        return self._metric("pct_tensor_copy")

    track_pct_tensor_copy.unit = "%"

    def track_host_us(self, measured, shape, dtype, direction, variant):
        """Host time to enqueue one eager call (checks, launches); the device time is time_layer_norm."""
        return self._metric("host_us")

    track_host_us.unit = "us"
    track_host_us.version = HOST_ESTIMATOR

    def track_host_vs_torch(self, measured, shape, dtype, direction, variant):
        """Host time of one eager call over eager torch's, measured alternately in this process."""
        return self._metric("host_vs_torch")

    track_host_vs_torch.unit = "x"
    track_host_vs_torch.version = HOST_ESTIMATOR

    def track_host_vs_compile(self, measured, shape, dtype, direction, variant):
        """Host time of one eager call over that of the torch.compile'd function's."""
        return self._metric("host_vs_compile")

    track_host_vs_compile.unit = "x"
    track_host_vs_compile.version = HOST_ESTIMATOR


class LayerNormWidthsMetrics(LayerNormMetrics):
    params = [model_width_shape_names(), BENCH_DTYPES, MODEL_DIRECTIONS, ["auto"]]

    def setup_cache(self):  # its own: asv shares a setup_cache's result by the line it starts on
        return measure_selected(self.params)

    setup_cache.timeout = 1800
