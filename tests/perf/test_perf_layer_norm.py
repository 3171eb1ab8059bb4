"""LayerNorm under pytest-benchmark: every case of kernelgate.cases.layer_norm,
the Triton variants beside eager PyTorch, torch.compile and Liger-Kernel, one group per case.

The asv twin is benchmarks/bench_layer_norm.py; both time ``LAYER_NORM.replayed``
(the call replayed from CUDA graphs: device time, not the launch path).
"""

import pytest

from kernelgate.cases.layer_norm import (
    BENCH_DIRECTIONS,
    BENCH_DTYPES,
    LAYER_NORM,
    LAYER_NORM_VARIANTS,
    bench_case,
    shape_names,
)
from kernelgate.measure import bandwidth, timing
from kernelgate.measure.workloads import in_cuda_graphs, warmed

pytestmark = [
    # Device time: the clock is read after a device sync. Warm-up rounds (GPU clocks, caches)
    # precede the measured ones; the interpreter has nothing to warm.
    pytest.mark.benchmark(timer=timing.device_clock, warmup=timing.gpu_timing()),
    pytest.mark.usefixtures("kernel_device"),  # a GPU, or the interpreter; else skip (or fail with --require-gpu)
]


@pytest.mark.parametrize("impl", LAYER_NORM_VARIANTS + bandwidth.REFERENCES)
@pytest.mark.parametrize("direction", BENCH_DIRECTIONS)
@pytest.mark.parametrize("dtype", BENCH_DTYPES)
@pytest.mark.parametrize("shape", shape_names())
def test_layer_norm(benchmark, record_perf, shape, dtype, direction, impl):
    if impl in bandwidth.GPU_ONLY_REFERENCES and not timing.gpu_timing():
        pytest.skip(f"{impl} is a GPU reference; not run in interpreter smoke mode")
    table_case = bench_case(shape, dtype)
    benchmark.group = f"layer_norm {table_case.name} {direction}"  # named by the table's case, not its smoke size
    case = LAYER_NORM.sized(shape, dtype)
    nbytes = case.bytes_moved(direction)
    fn = LAYER_NORM.replayed(case, impl, direction)
    benchmark(fn)
    baseline = None
    if impl != bandwidth.BASELINE:
        baseline = in_cuda_graphs(warmed(LAYER_NORM.workload(case, bandwidth.BASELINE, direction)))
    record_perf(fn, nbytes=nbytes, baseline=baseline)
