"""kernels/layer_norm/launch.py without a GPU: what a bound kernel hands Triton's launcher."""

import types

import pytest
import torch
from triton import knobs

from kernelgate.kernels.layer_norm import launch, ops


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


def test_a_bound_launch_hands_the_launcher_its_arguments_then_the_bound_ones(bound_kernel):
    bound, compiled = bound_kernel
    bound((1024, 2048))
    (args,) = compiled.runs
    grid, stream, leading = args[:3], args[3], args[-5:]
    assert grid == (3, 1, 1) and stream == 7
    assert leading == (1024, 2048, 4, 1e-5, 64)  # the addresses given, then the bound launch's own arguments


def test_a_listening_profiler_gets_the_launch_through_triton(bound_kernel):
    bound, compiled = bound_kernel
    hook = lambda metadata: None
    knobs.runtime.launch_enter_hook.add(hook)
    try:
        bound((1024, 2048))
    finally:
        knobs.runtime.launch_enter_hook.remove(hook)
    assert compiled.runs == []
    ((grid, args, stream),) = compiled.dispatched
    assert grid == (3, 1, 1) and stream == 7
    assert args == (1024, 2048, 4, 1e-5, 64)


@pytest.fixture
def recorded_binds(monkeypatch):
    """ops binding its launches to recording kernels instead of compiling them: {key: kernel}."""
    stream = types.SimpleNamespace(get_current_stream=lambda device: 7)
    monkeypatch.setattr(launch, "driver", types.SimpleNamespace(active=stream))
    kernels = {}

    def bind(key, spec, leading):
        kernels[key] = RecordedKernel()
        monkeypatch.setitem(launch._BOUND, key, launch.Bound(spec, kernels[key], leading))

    monkeypatch.setattr(ops, "bind", bind)
    return kernels


def test_a_bound_forward_launches_on_addresses_keyed_by_their_alignment(recorded_binds):
    rows = torch.randn(6, 33)
    w, b = torch.randn(32), torch.randn(32)
    aligned, offset = rows[:, :32], rows[:, 1:]  # the second starts 4 bytes into its row
    for x in (aligned, offset):
        ops.layer_norm_fwd(x, w, b, 1e-5, "fused")  # binds a kernel for each alignment
    assert len(recorded_binds) == 2
    for x, kernel in zip((aligned, offset), recorded_binds.values(), strict=True):
        y, mean, rstd = ops.layer_norm_fwd(x, w, b, 1e-5, "fused")  # launches the bound kernel
        (args,) = kernel.runs
        tensors = (x, y, w, b, mean, rstd)
        assert args[9:15] == tuple(t.data_ptr() for t in tensors)  # after grid, stream, function and metadata
