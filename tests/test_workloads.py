"""kernelgate.measure.workloads and the LayerNorm's workloads: what the benchmarks replay is what they captured,
and the copies they stand beside."""

import gc
import weakref

import pytest
import torch

from kernelgate.cases.layer_norm import (
    LAYER_NORM,
    LayerNormCase,
    layer_norm_call,
)
from kernelgate.kernels.layer_norm.reference import layer_norm_ref
from kernelgate.measure import bandwidth
from kernelgate.measure.workloads import PLACEMENT_BYTES, PLACEMENTS, in_cuda_graphs, rotations, tensor_copy_workload


def _doubling(device):
    """A workload that holds its own tensors, as the benchmark workloads do: y = 2 x."""
    x = torch.randn(1 << 20, device=device)
    y = torch.full_like(x, float("nan"))
    return (lambda: torch.mul(x, 2, out=y)), weakref.ref(x), y


def test_graphs_keep_the_workloads_tensors_alive(cuda_device):
    workload, x_alive, y = _doubling(cuda_device)
    replay = in_cuda_graphs(workload)
    del workload  # as LAYER_NORM.replayed drops its workload once captured
    gc.collect()
    torch.cuda.empty_cache()  # what the next graph capture does: unmaps freed blocks
    assert x_alive() is not None, "the graph reads x: it must outlive the workload that held it"
    in_cuda_graphs(lambda: torch.zeros(1 << 20, device=cuda_device))  # a later capture, as in a benchmark run
    y.fill_(float("nan"))
    replay()
    torch.cuda.synchronize()
    torch.testing.assert_close(y, 2 * x_alive(), rtol=0, atol=0)


def test_a_replay_makes_as_many_calls_as_it_says(cuda_device):
    count = torch.zeros((), device=cuda_device)
    replay = in_cuda_graphs(lambda: count.add_(1), calls=5)
    count.zero_()  # the warm-up calls before capture ran eagerly
    replay()
    torch.cuda.synchronize()
    assert replay.calls == 5 and count.item() == 5, "timing.median_ms divides a replay's time by its calls"


def test_a_timed_case_averages_over_several_placements(cuda_device):
    # Where a case's buffers land changes its speed; one input set per process would draw one
    # placement for base and one for head. Mid-size cases cycle through several sets, each its own
    # allocation (dy too); the largest stay at one, within the memory budget.
    case = LayerNormCase(4096, 8192, "float16")
    assert rotations(case.bytes_moved("bwd")) == PLACEMENTS
    assert rotations(PLACEMENT_BYTES) == 1
    backward = LAYER_NORM.workload(case, "auto", "bwd", rotate=PLACEMENTS)
    grads = [backward() for _ in range(PLACEMENTS + 1)]
    dx, db = [g[0] for g in grads], [g[2] for g in grads]
    assert all(not torch.equal(dx[0], g) for g in dx[1:PLACEMENTS]), "each set has its own x and dy"
    assert all(not torch.equal(db[0], g) for g in db[1:PLACEMENTS]), "db sums dy alone: each set has its own dy"
    torch.testing.assert_close(dx[PLACEMENTS], dx[0], rtol=0, atol=0)


def test_the_tensor_copy_cycles_through_its_own_pairs():
    # The LayerNorm's pct_tensor_copy: a copy of the case's [M, N] tensors, rotated as the inputs
    # are, so that a batch of copies does not read what the previous one left in L2.
    case = LayerNormCase(8, 40, "bfloat16")
    copy = tensor_copy_workload((case.m, case.n), case.torch_dtype, rotate=3)
    targets = [copy() for _ in range(4)]
    assert len({t.data_ptr() for t in targets[:3]}) == 3, "each call copies into another tensor"
    assert targets[3].data_ptr() == targets[0].data_ptr(), "then the cycle starts over"
    for target in targets[:3]:
        assert target.shape == (case.m, case.n) and target.dtype == torch.bfloat16
        assert target.isfinite().all() and target.abs().sum() > 0, "random rows were copied in"


def test_the_compiled_baseline_replays_its_backward_after_a_cached_training_compile(tmp_path, monkeypatch):
    # The torch.compile baseline's bwd case replays one backward; a warm Inductor cache filled by the
    # fwd+bwd case (a self-hosted runner's second run, or asv's processes after kernelgate.measure.warm) must serve it.
    monkeypatch.setenv("TORCHINDUCTOR_CACHE_DIR", str(tmp_path))
    case = LayerNormCase(8, 40, "float32")
    LAYER_NORM.workload(case, "torch_compile", "fwd+bwd")()
    torch._dynamo.reset()  # what a new process starts without; the on-disk cache stays
    bandwidth.compiled.cache_clear()
    backward = LAYER_NORM.workload(case, "torch_compile", "bwd")
    grads = [backward() for _ in range(2)]
    torch.testing.assert_close(grads[0], grads[1], rtol=0, atol=0)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("impl", bandwidth.REFERENCES)
def test_every_reference_computes_the_layer_norm_it_is_compared_with(cuda_device, impl, dtype):
    # A speedup over a reference means something only if the reference does the same work: y and
    # the gradients of x, w and b against the float64 reference, at a non-power-of-two width.
    case = LayerNormCase(37, 1600, dtype)
    x, w, b = case.make_inputs(cuda_device, requires_grad=True)
    dy = torch.randn_like(x)
    y = layer_norm_call(case, impl)(x, w, b)
    grads = torch.autograd.grad(y, (x, w, b), dy)
    want = layer_norm_ref(x, w, b, case.eps, dy)[:4]
    for name, got, expected in zip(("y", "dx", "dw", "db"), (y, *grads), want, strict=True):
        atol, rtol = case.tolerance(name)
        torch.testing.assert_close(got.double(), expected, atol=4 * atol, rtol=4 * rtol, msg=f"{impl} {name}")
