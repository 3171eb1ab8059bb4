"""GQA varlen attention backward: the three dQ/dK/dV accumulation modes
against torch's varlen_attn (FA2) and cuDNN SDPA.

Only the backward is timed, back to back (timing.sample_clock; the long configs take fewer calls
a sample, timing.sample_calls): preprocess
(Delta) + main kernel + postprocess, on saved forward outputs; our kernels
work on the packed varlen batch (no pad/unpad), cuDNN on the batch padded to
its longest sequence. Cases come from kernelgate.cases.attention. TileLang has
no interpreter: without a GPU every benchmark here is skipped.
"""

import functools

from asv_runner.benchmarks.mark import SkipNotImplemented

from kernelgate.cases.attention import ATTENTION_REFERENCES, BENCH_CONFIGS
from kernelgate.kernels.attention import ACCUM_MODES
from kernelgate.measure import timing
from kernelgate.measure.metrics import attention_metrics, case_metrics, measure_cases, selected_params
from kernelgate.measure.workloads import attention_backward_workload, warmed


def _require_gpu():
    if not timing.gpu_timing():
        raise NotImplementedError("TileLang kernels need a GPU")


class AttentionBackward:
    params = [list(BENCH_CONFIGS), [*ACCUM_MODES, *ATTENTION_REFERENCES]]
    param_names = ["config", "impl"]
    timer = staticmethod(timing.sample_clock)  # per call of a back-to-back sample
    rounds = 1
    repeat = (10, 20, 2.0)
    timeout = 600

    def setup(self, config, impl):
        _require_gpu()
        # Each backward reads and writes ~100 MB or more: far past L2, no rotation needed.
        case = BENCH_CONFIGS[config]
        self.sample = timing.back_to_back(
            warmed(attention_backward_workload(case, impl)), tflop_per_call=case.flops_backward() / 1e12
        )

    def time_backward(self, config, impl):
        self.sample()


class AttentionBackwardMetrics:
    params = [list(BENCH_CONFIGS), list(ACCUM_MODES)]
    param_names = ["config", "accum"]
    rounds = 1  # each value is already a median over interleaved rounds
    timeout = 600

    def setup_cache(self):
        """Every config measured once, in this one process; asv hands the result to each benchmark."""
        if not timing.gpu_timing():
            return {}  # setup skips every benchmark
        modes = list(ACCUM_MODES)
        configs = sorted({config for config, _ in selected_params(self.params)})
        return measure_cases(
            {config: functools.partial(attention_metrics, BENCH_CONFIGS[config], modes) for config in configs}
        )

    setup_cache.timeout = 1800  # TileLang compiles each kernel on first use

    def setup(self, measured, config, accum):
        _require_gpu()
        self.metrics = case_metrics(measured, config)[accum]

    def track_tflops(self, measured, config, accum):
        return self.metrics["tflops"]

    track_tflops.unit = "TFLOP/s"

    def track_pct_matmul_peak(self, measured, config, accum):
        """Achieved TFLOP/s over a bf16 8192^3 matmul's, measured interleaved."""
        return self.metrics["pct_matmul_peak"]

    track_pct_matmul_peak.unit = "%"

    def track_speedup_vs_fa2(self, measured, config, accum):
        if "speedup_vs_fa2" not in self.metrics:
            raise SkipNotImplemented("torch's varlen_attn (FA2) needs d_qk == d_v")
        return self.metrics["speedup_vs_fa2"]

    track_speedup_vs_fa2.unit = "x"

    def track_speedup_vs_cudnn(self, measured, config, accum):
        """Over cuDNN SDPA's backward on the batch padded to its longest sequence, timed in the same rounds."""
        if "speedup_vs_cudnn" not in self.metrics:
            raise SkipNotImplemented("cuDNN SDPA does not run this config")
        return self.metrics["speedup_vs_cudnn"]

    track_speedup_vs_cudnn.unit = "x"
