"""How a benchmark case's calls are run for timing, whatever the kernel: warmed up, captured in CUDA graphs of
back-to-back calls, on input sets rotated so that no call reads what the last one left in L2. A kernel's cases
module builds its workloads on these (``kernelgate.cases.<op>``); asv, pytest-benchmark and the tuners time
the same callables.
"""

import contextlib
import itertools
import math
from collections.abc import Callable

import torch

from kernelgate.measure import timing


def warmed(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` after one call and a device sync: JIT compiles (Triton, TileLang, torch.compile)
    and first-call set-up are done, so none lands inside a timed sample."""
    fn()
    timing.sync()
    return fn


@contextlib.contextmanager
def side_stream():
    """Run the block on a fresh stream (no-op without a GPU); the current stream waits for it."""
    if not torch.cuda.is_available():
        yield
        return
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        yield
    torch.cuda.current_stream().wait_stream(side)


BATCH_CALLS = 8  # calls per timed graph (batched), at least


def in_cuda_graphs(fn: Callable[[], object], graphs: int = 1, calls: int = 1) -> Callable[[], None]:
    """``fn`` captured into ``graphs`` CUDA graphs of ``calls`` back-to-back calls each, replayed in turn.

    A replay costs the host one launch however many kernels the call runs, so
    back-to-back replays keep the GPU busy and time the device, not Python and
    the launch path (``kernelgate.measure.timing.enqueue_us`` measures those). Each capture
    calls ``fn`` ``calls`` times: a workload that rotates input sets captures the
    next sets. The returned callable's ``calls`` says how many calls of ``fn`` one
    replay makes (``kernelgate.measure.timing.median_ms`` reports time per call). Without a GPU
    (interpreter smoke runs), ``fn`` itself.

    The graphs read the tensors ``fn`` holds, so the returned callable holds ``fn``: a
    workload dropped after capture would free its inputs, and the next capture's
    ``empty_cache`` would unmap them under the graphs (an illegal address on replay).
    """
    if not torch.cuda.is_available():
        return fn
    with side_stream():  # torch's recipe: a few calls on a side stream before capturing
        for _ in range(3):
            fn()
    captured = []
    for _ in range(graphs):
        graph = torch.cuda.CUDAGraph()
        with torch.cuda.graph(graph):
            for _ in range(calls):
                fn()
        captured.append(graph)
    cycle = itertools.cycle(captured)

    def replay():
        next(cycle).replay()

    replay.captured_from = fn
    replay.calls = calls
    return replay


def batched(fn: Callable[[], object], rotate: int) -> Callable[[], None]:
    """``fn``, a workload cycling through ``rotate`` input sets, as the suite times a call's
    device time: one CUDA graph of ``max(rotate, BATCH_CALLS)`` back-to-back calls.

    One graph replay of one call timed by CUDA events also times its launch: 2.1-10 us
    beyond the kernels' own durations (CUPTI) on an H200, ~10% of a kernel that moves 64-128 MiB;
    batched, 0.2-1.8 us. Within a graph, kernels follow each other as in a model's step.
    Rotated inputs keep later calls from reading what earlier ones left in L2.
    """
    return in_cuda_graphs(fn, calls=max(rotate, BATCH_CALLS))


def bench_device() -> torch.device:
    """The GPU, or the CPU for interpreter smoke runs."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


PLACEMENTS = 4  # input sets a timed call averages over, at least, where PLACEMENT_BYTES allows
PLACEMENT_BYTES = 2 << 30


def rotations(nbytes: int) -> int:
    """Input sets to cycle through: enough that three L2s' worth of data separates two uses of the
    same set (for timers that cannot flush L2), and at least ``PLACEMENTS`` while their bytes fit in
    ``PLACEMENT_BYTES``.

    A kernel's speed depends on where its buffers land in device memory: on an H100 a 16-bit
    4096x8192 normalization backward runs at 77 or at 80-82 us depending on the allocation, the same data in new
    buffers included. One input set draws one placement per process, so base and head could read
    5% apart on identical code; several sets average over placements in every process.
    """
    if not torch.cuda.is_available():
        return 1
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    clear_l2 = math.ceil(3 * l2 / nbytes)
    placements = min(PLACEMENTS, PLACEMENT_BYTES // nbytes)
    return max(1, min(16, max(clear_l2, placements)))


def autograd_workload(
    sets: list[tuple[tuple[torch.Tensor, ...], torch.Tensor | None]], run: Callable[..., torch.Tensor], direction: str
) -> Callable[[], object]:
    """``run(*inputs)`` as a benchmark calls it, cycling through ``sets`` of (inputs, dy): one forward
    (``fwd``), one backward of a forward run here, once, outside any timed call (``bwd``), or a forward plus its
    backward (``fwd+bwd``). Each set holds its own tensors, dy included: its own allocation (``rotations``)."""
    if direction == "bwd":
        # Autograd runs each backward kernel on its forward's stream. Not the legacy default stream: a CUDA
        # graph capture (in_cuda_graphs) may not make that one wait on it.
        with side_stream():
            saved = itertools.cycle([(inputs, run(*inputs), dy) for inputs, dy in sets])

        def backward():
            inputs, y, dy = next(saved)
            return torch.autograd.grad(y, inputs, dy, retain_graph=True)

        return backward
    cycle = itertools.cycle(sets)

    def forward():
        inputs, _ = next(cycle)
        return run(*inputs)

    def forward_backward():
        inputs, dy = next(cycle)
        # autograd.grad returns fresh gradients: no accumulation kernels into .grad
        return torch.autograd.grad(run(*inputs), inputs, dy)

    if direction not in ("fwd", "fwd+bwd"):
        raise ValueError(f"unknown direction {direction!r}: fwd, bwd or fwd+bwd")
    return forward_backward if direction == "fwd+bwd" else forward


def tensor_copy_workload(shape: tuple[int, ...], dtype: torch.dtype, rotate: int = 1) -> Callable[[], torch.Tensor]:
    """A device copy of a random tensor of ``shape`` and ``dtype`` into another, cycling through ``rotate`` pairs as
    a case's workload cycles its input sets: tensors as the allocator places a case's, so the copy meets the
    memory system as the kernel does at that size."""
    device = bench_device()
    pairs = [(torch.randn(shape, device=device, dtype=dtype), torch.empty(shape, device=device, dtype=dtype))
             for _ in range(rotate)]  # fmt: skip
    cycle = itertools.cycle(pairs)

    def copy():
        source, target = next(cycle)
        return target.copy_(source)

    return copy
