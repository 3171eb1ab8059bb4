"""kernels/launch.py without a GPU: what a bound kernel hands Triton's launcher."""

import types

import pytest
import torch
from triton import knobs

from kernelgate.kernels import launch
from kernelgate.kernels.layer_norm import ops
from kernelgate.kernels.layer_norm.config import tuned_table


class RecordedLauncher:
    """Triton's launcher object for a kernel that asks for no scratch buffers; its C launch function
    records each call."""

    global_scratch_size = profile_scratch_size = 0
    launch_cooperative_grid, launch_pdl = False, True

    def __init__(self):
        self.calls = []

    def launch(self, *args):
        self.calls.append(args)


# The C launch function's arguments before the kernel's: the grid, the stream, the kernel, whether the launch
# is cooperative and programmatic, two scratch buffers, the metadata, the launch metadata and two hooks.
LAUNCH_OPTIONS = 13


class RecordedKernel:
    """The parts of a compiled Triton kernel that ``Bound`` uses, recording each launch."""

    function, packed_metadata = "function", "metadata"

    def __init__(self):
        self.run, self.dispatched = RecordedLauncher(), []

    def __getitem__(self, grid):
        return lambda *args, stream: self.dispatched.append((grid, args, stream))

    @property
    def runs(self) -> list[tuple]:
        """The kernel's arguments in each launch through the C function."""
        return [args[LAUNCH_OPTIONS:] for args in self.run.calls]


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


def test_a_bound_launch_hands_the_c_launcher_its_arguments_then_the_bound_ones(bound_kernel):
    bound, compiled = bound_kernel
    bound((1024, 2048))
    (args,) = compiled.run.calls
    assert args[:LAUNCH_OPTIONS] == (3, 1, 1, 7, "function", False, True, None, None, "metadata", None, None, None)
    assert args[LAUNCH_OPTIONS:] == (1024, 2048, 4, 1e-5, 64)  # the addresses given, then the bound launch's own
    assert compiled.dispatched == []


def test_a_kernel_that_asks_for_scratch_launches_through_triton(monkeypatch):
    stream = types.SimpleNamespace(get_current_stream=lambda device: 7)
    monkeypatch.setattr(launch, "driver", types.SimpleNamespace(active=stream))
    kernel = types.SimpleNamespace(__name__="kernel", arg_names=["x_ptr", "BLOCK"])
    spec = launch.Launch(kernel, grid=(3,), args=(torch.zeros(4),), constexprs={"BLOCK": 64}, num_warps=4)
    compiled = RecordedKernel()
    compiled.run.global_scratch_size = 128  # Triton's launcher allocates it a buffer
    launch.Bound(spec, compiled, leading=1)((1024,))
    assert compiled.runs == [] and compiled.dispatched == [((3, 1, 1), (1024, 64), 7)]


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
        assert args[:6] == tuple(t.data_ptr() for t in tensors)


# The backward's two column kernels: partial sums summed over programs (auto at 32 columns), and dw and db
# summed from x and dy (two_pass at 16-bit 12288 columns, column_grads).
@pytest.mark.parametrize(("variant", "n", "dtype"), [("auto", 32, torch.float32), ("two_pass", 12288, torch.float16)])
def test_a_call_of_a_seen_signature_goes_straight_to_its_bound_launches(variant, n, dtype, recorded_binds, monkeypatch):
    """The first call of a signature checks its arguments and binds its kernels; a later call of the same
    layout launches them on its own tensors without checking again, and one of another layout gets
    its own plan."""
    monkeypatch.setattr(ops, "_PLANS", {})
    monkeypatch.setattr(ops, "interpreter_mode", lambda: True)  # CPU tensors pass the checks
    checked = []
    monkeypatch.setattr(ops, "_check_inputs", lambda *args: checked.append(args) or args[0].shape[-1])
    w, b = (torch.randn(n, dtype=dtype).requires_grad_() for _ in range(2))

    def call(x):
        x.requires_grad_()
        dy = torch.randn_like(x)
        dx, dw, db = torch.autograd.grad(ops.layer_norm(x, n, w, b, variant=variant), (x, w, b), dy)
        return x, dy, dx, dw, db

    call(torch.randn(6, n, dtype=dtype))
    assert len(checked) == 1 and len(recorded_binds) == 3  # forward, backward rows, column sums
    x, dy, dx, dw, db = call(torch.randn(6, n, dtype=dtype))
    assert len(checked) == 1 and len(ops._PLANS) == 1
    forward, rows, columns = recorded_binds.values()
    (args,) = forward.runs
    assert args[0] == x.data_ptr() and args[2:4] == (w.data_ptr(), b.data_ptr())
    (args,) = rows.runs
    assert args[:3] == (x.data_ptr(), dy.data_ptr(), dx.data_ptr())
    (args,) = columns.runs
    assert {dw.data_ptr(), db.data_ptr()} <= set(args[:6])
    call(torch.randn(6 * n + 1, dtype=dtype)[1:].view(6, n))  # off 16-byte alignment
    assert len(checked) == 2 and len(ops._PLANS) == 2 and len(recorded_binds) == 6


def test_calls_share_a_signature_only_where_their_launches_agree(tmp_path):
    """A signature holds what the checks, ``auto`` and the launches read: calls that differ in their
    tensors' data alone share one; any other difference (layout, alignment, dtype, the parameters
    present, eps, the variant asked, statistics stored) parts them. Arguments the checks must see
    every time have none."""
    x, w, b = torch.randn(8, 64), torch.randn(64), torch.randn(64)
    signature = ops._signature(x, (64,), w, b, 1e-5, "auto", True)
    assert ops._signature(torch.randn(8, 64), (64,), torch.randn(64), torch.randn(64), 1e-5, "auto", True) == signature
    misaligned = torch.randn(8 * 64 + 1)[1:].view(8, 64)
    others = {
        "misaligned x": ops._signature(misaligned, (64,), w, b, 1e-5, "auto", True),
        "strided rows": ops._signature(torch.randn(8, 65)[:, :64], (64,), w, b, 1e-5, "auto", True),
        "more rows": ops._signature(torch.randn(9, 64), (64,), w, b, 1e-5, "auto", True),
        "3-D x": ops._signature(x.view(2, 4, 64), (64,), w, b, 1e-5, "auto", True),
        "dtype": ops._signature(x.half(), (64,), w.half(), b.half(), 1e-5, "auto", True),
        "misaligned weight": ops._signature(x, (64,), torch.randn(65)[1:], b, 1e-5, "auto", True),
        "no bias": ops._signature(x, (64,), w, None, 1e-5, "auto", True),
        "eps": ops._signature(x, (64,), w, b, 1e-6, "auto", True),
        "variant": ops._signature(x, (64,), w, b, 1e-5, "fused", True),
        "no statistics": ops._signature(x, (64,), w, b, 1e-5, "auto", False),
    }
    with tuned_table(tmp_path / "other.json"):
        others["another tuned table"] = ops._signature(x, (64,), w, b, 1e-5, "auto", True)
    for name, other in others.items():
        assert other is not None and other != signature, name
    for name, args in {"int eps": (x, (64,), w, b, 0, "auto"), "bool eps": (x, (64,), w, b, True, "auto"),
                       "list x": ([1.0] * 64, (64,), w, b, 1e-5, "auto"),
                       "variant not a string": (x, (64,), w, b, 1e-5, None),
                       "normalized shape a list": (x, [64], w, b, 1e-5, "auto")}.items():  # fmt: skip
        assert ops._signature(*args, True) is None, name


@pytest.mark.parametrize("sm90", [True, False])
@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float32])
def test_a_backward_in_row_slices_exchanges_through_words_its_forward_zeroed(dtype, sm90, recorded_binds, monkeypatch):
    """Where the backward splits rows into slices (16384 columns: two), the eager forward zeroes the slices'
    words after rstd, two a row, the backward reads them there and its column sum zeroes them again: its
    partial sums are all it allocates, with nothing to zero. fp32 slices, which prefetch the words (a bulk
    prefetch), do so from sm_90; before it, and for the functional backward, given statistics without
    words, the words are zeroed with the partial sums."""
    monkeypatch.setattr(ops, "_PLANS", {})
    monkeypatch.setattr(ops, "interpreter_mode", lambda: False)  # on a GPU, rows are split
    monkeypatch.setattr(ops, "_on_sm90", lambda t: sm90)
    monkeypatch.setattr(ops, "_check_inputs", lambda *args: args[0].shape[-1])
    zeroed, partial_sums = [], []
    monkeypatch.setattr(torch.Tensor, "zero_", lambda t: zeroed.append(t.numel()) or t)
    allocate = ops._partial_sums
    monkeypatch.setattr(ops, "_partial_sums", lambda *args: partial_sums.append(allocate(*args)) or partial_sums[-1])
    m, n = 6, 16384
    w, b = (torch.randn(n, dtype=dtype).requires_grad_() for _ in range(2))
    for _ in range(2):  # the first call binds its kernels, the second launches them from its plan
        x = torch.randn(m, n, dtype=dtype, requires_grad=True)
        y = ops.layer_norm(x, n, w, b, variant="fused")
        past_rstd = y.grad_fn.saved_tensors[-1].numel() - m  # the saved rstd's floats past its m rows
        torch.autograd.grad(y, (x, w, b), torch.randn_like(y))
    forward, _, columns = recorded_binds.values()
    groups = launch._BOUND[list(recorded_binds)[1]].grid[0] // 2
    forward_bound, rows_bound, columns_bound = (launch._BOUND[key] for key in recorded_binds)
    assert rows_bound.constexprs["SLICES"] == 2
    (plan,) = ops._PLANS.values()
    if dtype == torch.float32 and not sm90:
        assert past_rstd == 0 and plan.exchange_words == 0 and not rows_bound.constexprs["EXCHANGE_AFTER_RSTD"]
        assert [t.numel() for t in partial_sums] == [2 * groups * n + 2 * 2 * m] * 2 and zeroed == [2 * 2 * m] * 2
        return
    assert past_rstd == 2 + 2 * 2 * m  # rounded up to 16 bytes, then two 64-bit words a row
    assert plan.exchange_words == ops.row_words(2) == 2
    assert forward_bound.constexprs["EXCHANGE_WORDS"] == 2 and columns_bound.constexprs["EXCHANGE_WORDS"] == 2
    assert rows_bound.constexprs["EXCHANGE_AFTER_RSTD"]
    (args,) = columns.runs  # the call from its plan hands the column sum the statistics it zeroes the words of
    assert args[3] == forward.runs[0][5]  # rstd's address
    assert [t.numel() for t in partial_sums] == [2 * groups * n] * 2 and zeroed == []
    x = torch.randn(m, n, dtype=dtype)
    mean, rstd = torch.randn(m), torch.rand(m)
    ops.layer_norm_bwd(torch.randn(m, n, dtype=dtype), x, w.detach(), b.detach(), mean, rstd, "fused")
    assert partial_sums[-1].numel() == 2 * groups * n + 2 * 2 * m and zeroed == [2 * 2 * m]


def test_a_cache_keeps_the_most_recently_used_entries():
    cache = launch.LRU(2)
    cache["a"], cache["b"] = 1, 2
    assert cache.get("a") == 1  # now the most recent
    cache["c"] = 3
    assert list(cache) == ["a", "c"] and cache.get("b") is None


def test_plans_and_bound_kernels_stay_bounded_when_the_rows_vary(recorded_binds, monkeypatch):
    """A training loop whose sequence lengths vary calls with a new row count at each length: the plans and
    bound kernels of the most recent counts are kept, and a count dropped plans and binds again."""
    monkeypatch.setattr(ops, "_PLANS", launch.LRU(3))
    monkeypatch.setattr(launch, "_BOUND", launch.LRU(6))
    monkeypatch.setattr(ops, "interpreter_mode", lambda: True)  # CPU tensors pass the checks
    checked = []
    monkeypatch.setattr(ops, "_check_inputs", lambda *args: checked.append(args) or args[0].shape[-1])
    w, b = torch.randn(32), torch.randn(32)
    for m in range(1, 11):
        ops.layer_norm(torch.randn(m, 32), 32, w, b, variant="fused")
    assert len(ops._PLANS) == 3 and len(launch._BOUND) == 6
    assert [plan.n for plan in ops._PLANS.values()] == [32] * 3 and len(checked) == 10
    ops.layer_norm(torch.randn(10, 32), 32, w, b, variant="fused")  # the most recent: from its plan
    assert len(checked) == 10
    ops.layer_norm(torch.randn(1, 32), 32, w, b, variant="fused")  # dropped: checked and bound again
    assert len(checked) == 11 and len(ops._PLANS) == 3
    y = ops.layer_norm(x := torch.randn(1, 32), 32, w, b, variant="fused")  # then from its new plan
    assert len(checked) == 11
    (args,) = next(reversed(launch._BOUND.values())).compiled.runs
    assert args[0] == x.data_ptr() and args[1] == y.data_ptr()
