"""The norms under pytest-benchmark: every benchmark case of kernelgate.cases.layer_norm and
kernelgate.cases.rms_norm, this project's kernels beside eager PyTorch, torch.compile and Liger-Kernel,
one group per case (``-k rms_norm``, ``-k two_pass``).

The asv twins are benchmarks/bench_layer_norm.py and bench_rms_norm.py. All time the same sample:
``RowOp.replayed`` (calls replayed from CUDA graphs: device time, not the launch path), run back to back
and counted per call (``timing.back_to_back``, ``timing.sample_clock``).
"""

import itertools

import pytest

from kernelgate.cases import layer_norm, rms_norm
from kernelgate.measure import bandwidth, timing

ROW_OPS = {
    "layer_norm": (layer_norm.LAYER_NORM, layer_norm.SHAPES_GRID),
    "rms_norm": (rms_norm.RMS_NORM, rms_norm.GRID),
}

pytestmark = [
    # Device time per call: the clock is read after a device sync and counted in the sample's calls.
    # Warm-up rounds (GPU clocks, caches) precede the measured ones; the interpreter has nothing to warm.
    pytest.mark.benchmark(timer=timing.sample_clock, warmup=timing.gpu_timing()),
    pytest.mark.usefixtures("kernel_device"),  # a GPU, or the interpreter; else skip (or fail with --require-gpu)
]


def _cases():
    for kernel, (_, grid) in ROW_OPS.items():
        for (shape, dtype, direction), impl in itertools.product(itertools.product(*grid.params.values()), grid.impls):
            yield pytest.param(kernel, shape, dtype, direction, impl, id=f"{kernel}-{shape}-{dtype}-{direction}-{impl}")


@pytest.mark.parametrize(("kernel", "shape", "dtype", "direction", "impl"), _cases())
def test_norm(benchmark, record_perf, record_kernels, kernel, shape, dtype, direction, impl):
    op, grid = ROW_OPS[kernel]
    if impl in bandwidth.GPU_ONLY_REFERENCES and not timing.gpu_timing():
        pytest.skip(f"{impl} is a GPU reference; not run in interpreter smoke mode")
    table_case = op.bench_case(shape, dtype)
    benchmark.group = f"{kernel} {table_case.name} {direction}"  # named by the table's case, not its smoke size
    case = op.sized(shape, dtype)
    replayed = op.replayed(case, impl, direction)
    benchmark(timing.back_to_back(replayed))
    baseline = op.replayed(case, bandwidth.BASELINE, direction) if impl != bandwidth.BASELINE else None
    record_perf(replayed, nbytes=case.bytes_moved(direction), baseline=baseline)
    if impl in grid.variants:  # this project's kernels; the references' are not compiled here
        record_kernels(f"bench_{kernel}.{grid.name}.{grid.time_method}{(shape, dtype, direction, impl)!r}")
