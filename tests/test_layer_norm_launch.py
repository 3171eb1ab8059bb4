"""kernels/layer_norm/launch.py without a GPU: what a bound kernel hands Triton's launcher."""

import types

import pytest
import torch
from triton import knobs

from kernelgate.kernels.layer_norm import launch


class RecordedKernel:
    """The parts of a compiled Triton kernel that ``Bound`` uses, recording each launch."""

    function, packed_metadata = "function", "metadata"

    def __init__(self):
        self.runs, self.dispatched = [], []

    def __getitem__(self, grid):
        return lambda *args, stream: self.dispatched.append((grid, args, stream))

    def run(self, *args):
        self.runs.append(args)


@pytest.fixture
def bound_kernel(monkeypatch):
    """A kernel of two pointers, a stride, a float and a constexpr, bound with the two leading arguments."""
    stream = types.SimpleNamespace(get_current_stream=lambda device: 7)
    monkeypatch.setattr(launch, "driver", types.SimpleNamespace(active=stream))
    kernel = types.SimpleNamespace(__name__="kernel", arg_names=["x_ptr", "y_ptr", "stride", "eps", "BLOCK"])
    x, y = torch.zeros(4), torch.zeros(4)
    spec = launch.Launch(kernel, grid=(3,), args=(x, y, 4, 1e-5), constexprs={"BLOCK": 64}, num_warps=4)
    compiled = RecordedKernel()
    return launch.Bound(spec, compiled, leading=2), compiled


def test_a_bound_launch_passes_addresses_for_tensors(bound_kernel):
    bound, compiled = bound_kernel
    x, y = torch.randn(8), torch.randn(8)
    bound((x, y))
    (args,) = compiled.runs
    grid, stream, (x_ptr, y_ptr, stride, eps, block) = args[:3], args[3], args[-5:]
    assert grid == (3, 1, 1) and stream == 7
    assert (x_ptr, y_ptr) == (x.data_ptr(), y.data_ptr())
    assert (stride, eps, block) == (4, 1e-5, 64)  # the bound launch's own trailing arguments


def test_a_listening_profiler_gets_the_tensors_through_triton(bound_kernel):
    bound, compiled = bound_kernel
    x, y = torch.randn(8), torch.randn(8)
    hook = lambda metadata: None
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        bound((x, y))
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert compiled.runs == []
    ((grid, args, stream),) = compiled.dispatched
    assert grid == (3, 1, 1) and stream == 7
    assert args[0] is x and args[1] is y
