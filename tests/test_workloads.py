"""harness.workloads: what the benchmarks replay is what they captured."""

import gc
import weakref

import torch

from harness.workloads import in_cuda_graphs


def _doubling(device):
    """A workload that holds its own tensors, as the benchmark workloads do: y = 2 x."""
    x = torch.randn(1 << 20, device=device)
    y = torch.full_like(x, float("nan"))
    return (lambda: torch.mul(x, 2, out=y)), weakref.ref(x), y


def test_graphs_keep_the_workloads_tensors_alive(cuda_device):
    workload, x_alive, y = _doubling(cuda_device)
    replay = in_cuda_graphs(workload)
    del workload  # as timed_layer_norm drops its workload once captured
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
