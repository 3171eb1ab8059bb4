"""GQA varlen attention backward under pytest-benchmark: every benchmark config of
kernelgate.cases.attention, the three accumulation modes beside FA2 and cuDNN, one
group per config. Only the backward is timed (see kernelgate.measure.workloads).

The asv twin is benchmarks/bench_attention.py. TileLang has no interpreter:
without a GPU these skip, saying so.
"""

import pytest

from kernelgate.cases.attention import (
    ATTENTION_BASELINE,
    ATTENTION_REFERENCES,
    BENCH_CONFIGS,
    attention_backward_workload,
)
from kernelgate.kernels.attention import ACCUM_MODES
from kernelgate.measure import timing
from kernelgate.measure.workloads import warmed

pytestmark = [
    pytest.mark.benchmark(timer=timing.device_clock, warmup=True),
    pytest.mark.usefixtures("cuda_device"),
]


def ready(case, impl):
    try:
        return warmed(attention_backward_workload(case, impl))  # TileLang JIT before any round
    except NotImplementedError as exc:
        pytest.skip(str(exc))


@pytest.mark.parametrize("impl", [*ACCUM_MODES, *ATTENTION_REFERENCES])
@pytest.mark.parametrize("config", list(BENCH_CONFIGS))
def test_attention_backward(benchmark, record_perf, record_kernels, config, impl):
    case = BENCH_CONFIGS[config]
    benchmark.group = f"attention backward {config}"
    fn = ready(case, impl)
    benchmark(fn)  # each call moves >100 MB: no L2 reuse between rounds
    fa2_runs = case.dim_qk == case.dim_v
    baseline = ready(case, ATTENTION_BASELINE) if fa2_runs and impl != ATTENTION_BASELINE else None
    record_perf(fn, flops=case.flops_backward(), baseline=baseline)
    if impl in ACCUM_MODES:  # this project's kernels: profiled on a GPU (TileLang's are not compiled here)
        record_kernels(f"bench_attention.AttentionBackward.time_backward{(config, impl)!r}")
