"""GQA varlen attention backward: the three dQ/dK/dV accumulation modes
against torch's varlen_attn (FA2) and cuDNN SDPA.

Only the backward is timed: preprocess (Delta) + main kernel + postprocess,
on saved forward outputs; our kernels work on the packed varlen batch (no
pad/unpad), cuDNN on the batch padded to its longest sequence. Cases come
from harness.cases.attention. TileLang has no interpreter: without a GPU
every benchmark here is skipped.
"""

from harness import timing
from harness.cases.attention import ATTENTION_BASELINE, ATTENTION_REFERENCES, BENCH_CONFIGS
from harness.workloads import attention_backward_workload
from kernels.attention import ACCUM_MODES


def _workload(config: str, impl: str):
    if not timing.gpu_timing():
        raise NotImplementedError("TileLang kernels need a GPU")
    fn = attention_backward_workload(BENCH_CONFIGS[config], impl)
    fn()  # TileLang JIT (disk-cached) and first-call set-up outside any sample
    timing.sync()
    return fn


class AttentionBackward:
    params = [list(BENCH_CONFIGS), [*ACCUM_MODES, *ATTENTION_REFERENCES]]
    param_names = ["config", "impl"]
    timer = staticmethod(timing.device_clock)
    repeat = (3, 10, 2.0)
    timeout = 600

    def setup(self, config, impl):
        # Each backward reads and writes ~100 MB or more: far past L2, no rotation needed.
        self.fn = _workload(config, impl)

    def time_backward(self, config, impl):
        self.fn()


class AttentionBackwardMetrics:
    params = [list(BENCH_CONFIGS), list(ACCUM_MODES)]
    param_names = ["config", "accum"]
    rounds = 1  # each value is already a median over interleaved rounds
    timeout = 600

    def setup(self, config, accum):
        self.case = BENCH_CONFIGS[config]
        self.fn = _workload(config, accum)

    def track_tflops(self, config, accum):
        return timing.tflops(self.case.flops_backward(), timing.median_ms(self.fn))

    track_tflops.unit = "TFLOP/s"

    def track_pct_matmul_peak(self, config, accum):
        """Achieved TFLOP/s over a bf16 8192^3 matmul's, measured interleaved."""
        matmul, flops = timing.matmul()
        return 100 * self.case.flops_backward() / flops * timing.ratio(matmul, self.fn)

    track_pct_matmul_peak.unit = "%"


class AttentionBackwardVsFa2:
    """Skipped where FA2 cannot run the case (d_qk != d_v)."""

    params = [list(BENCH_CONFIGS), list(ACCUM_MODES)]
    param_names = ["config", "accum"]
    rounds = 1
    timeout = 600

    def setup(self, config, accum):
        self.fa2 = _workload(config, ATTENTION_BASELINE)
        self.fn = _workload(config, accum)

    def track_speedup_vs_fa2(self, config, accum):
        return timing.ratio(self.fa2, self.fn)

    track_speedup_vs_fa2.unit = "x"
