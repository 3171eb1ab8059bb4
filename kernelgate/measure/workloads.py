"""Callables that run one benchmark case, shared by asv, pytest-benchmark and
the tuner, so every consumer times exactly the same work.
"""

import contextlib
import functools
import itertools
import math
from collections.abc import Callable

import torch

from kernelgate import kernels
from kernelgate.cases.layer_norm import LAYER_NORM_VARIANTS, LayerNormCase
from kernelgate.measure import timing


def warmed(fn: Callable[[], object]) -> Callable[[], object]:
    """``fn`` after one call and a device sync: JIT compiles (Triton, TileLang, torch.compile)
    and first-call set-up are done, so none lands inside a timed sample."""
    fn()
    timing.sync()
    return fn


@contextlib.contextmanager
def _side_stream():
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
    with _side_stream():  # torch's recipe: a few calls on a side stream before capturing
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
    beyond the kernels' own durations (CUPTI) on an H200, ~10% of a 64-128 MiB LayerNorm;
    batched, 0.2-1.8 us. Within a graph, kernels follow each other as in a model's step.
    Rotated inputs keep later calls from reading what earlier ones left in L2.
    """
    return in_cuda_graphs(fn, calls=max(rotate, BATCH_CALLS))


def bench_device() -> torch.device:
    """The GPU, or the CPU for interpreter smoke runs."""
    return torch.device("cuda" if torch.cuda.is_available() else "cpu")


def sized_for_device(case: LayerNormCase) -> LayerNormCase:
    """The case itself on a GPU, its tiny smoke stand-in under the interpreter."""
    return case if torch.cuda.is_available() else case.smoke()


@functools.cache
def compiled_layer_norm():
    # One process may build every case (python -m kernelgate.measure.metrics, warm-up workers): one
    # specialization per shape, dtype and grad mode. Past dynamo's default limit of 8 it
    # would silently run eager torch under the torch_compile name.
    torch._dynamo.config.recompile_limit = 256
    # The bwd case replays one backward (retain_graph=True), which a backward compiled with donated
    # buffers refuses. Which kind a process loads depends on what filled the on-disk cache first (a
    # training step's compile donates), so after a fwd+bwd case the bwd one failed on a warm cache.
    torch._functorch.config.donated_buffer = False
    return torch.compile(torch.nn.functional.layer_norm, dynamic=False)


def layer_norm_impl(impl: str) -> Callable:
    """``(x, weight, bias, eps) -> y`` for a kernel variant or a reference (LAYER_NORM_REFERENCES)."""
    if impl in LAYER_NORM_VARIANTS:
        return lambda x, w, b, eps: kernels.layer_norm(x, x.shape[-1], w, b, eps, variant=impl)
    if impl == "torch":
        return lambda x, w, b, eps: torch.nn.functional.layer_norm(x, (x.shape[-1],), w, b, eps)
    if impl == "torch_compile":
        compiled = compiled_layer_norm()
        return lambda x, w, b, eps: compiled(x, (x.shape[-1],), w, b, eps)
    if impl == "liger":
        from liger_kernel.transformers.functional import liger_layer_norm  # the runner's lock pins it

        return liger_layer_norm
    raise ValueError(f"unknown LayerNorm implementation {impl!r}")


PLACEMENTS = 4  # input sets a timed call averages over, at least, where PLACEMENT_BYTES allows
PLACEMENT_BYTES = 2 << 30


def rotations(nbytes: int) -> int:
    """Input sets to cycle through: enough that three L2s' worth of data separates two uses of the
    same set (for timers that cannot flush L2), and at least ``PLACEMENTS`` while their bytes fit in
    ``PLACEMENT_BYTES``.

    A kernel's speed depends on where its buffers land in device memory: on an H100 the 16-bit
    4096x8192 backward runs at 77 or at 80-82 us depending on the allocation, the same data in new
    buffers included. One input set draws one placement per process, so base and head could read
    5% apart on identical code; several sets average over placements in every process.
    """
    if not torch.cuda.is_available():
        return 1
    l2 = torch.cuda.get_device_properties(0).L2_cache_size
    clear_l2 = math.ceil(3 * l2 / nbytes)
    placements = min(PLACEMENTS, PLACEMENT_BYTES // nbytes)
    return max(1, min(16, max(clear_l2, placements)))


def layer_norm_workload(case: LayerNormCase, impl: str, direction: str, rotate: int = 1) -> Callable[[], object]:
    """One forward (``fwd``), one backward of a forward run here, once, outside any
    timed call (``bwd``), or a forward plus its backward (``fwd+bwd``) of ``case``."""
    run_impl = layer_norm_impl(impl)
    device = bench_device()
    grads = direction != "fwd"

    def output_grad():  # each set its own dy: its own allocation (see ``rotations``)
        return torch.randn(case.m, case.n, device=device, dtype=case.torch_dtype) if grads else None

    sets = [(case.make_inputs(device, requires_grad=grads), output_grad()) for _ in range(rotate)]
    if direction == "bwd":
        # Autograd runs each backward kernel on its forward's stream. Not the legacy default
        # stream: a CUDA graph capture (in_cuda_graphs) may not make that one wait on it.
        with _side_stream():
            saved = itertools.cycle([(inputs, run_impl(*inputs, case.eps), dy) for inputs, dy in sets])

        def backward():
            inputs, y, dy = next(saved)
            return torch.autograd.grad(y, inputs, dy, retain_graph=True)

        return backward
    cycle = itertools.cycle(sets)

    def forward():
        (x, w, b), _ = next(cycle)
        return run_impl(x, w, b, case.eps)

    def forward_backward():
        (x, w, b), dy = next(cycle)
        # autograd.grad returns fresh gradients: no accumulation kernels into .grad
        return torch.autograd.grad(run_impl(x, w, b, case.eps), (x, w, b), dy)

    return forward_backward if direction == "fwd+bwd" else forward


def tensor_copy_workload(case: LayerNormCase, rotate: int = 1) -> Callable[[], torch.Tensor]:
    """A device copy of one [M, N] tensor of the case's dtype into another, cycling through
    ``rotate`` pairs as ``layer_norm_workload`` cycles through input sets: tensors as the
    allocator places them, so the copy meets the memory system as the kernels do at this size."""
    device = bench_device()
    pairs = [(case.make_inputs(device)[0], torch.empty(case.m, case.n, device=device, dtype=case.torch_dtype))
             for _ in range(rotate)]  # fmt: skip
    cycle = itertools.cycle(pairs)

    def copy():
        source, target = next(cycle)
        return target.copy_(source)

    return copy


def timed_layer_norm(case: LayerNormCase, impl: str, direction: str) -> Callable[[], None]:
    """What the time_* benchmarks (asv, pytest-benchmark) call back to back: one
    ``layer_norm_workload`` call replayed from a CUDA graph, on rotated input sets
    (back-to-back calls leave no room for an L2 flush)."""
    rotate = rotations(case.bytes_moved(direction))
    return in_cuda_graphs(warmed(layer_norm_workload(case, impl, direction, rotate)), rotate)


def attention_shape(case):
    """The compiled-kernel shape of an attention case (what kernelgate.kernels.attention.ops caches kernels by)."""
    from kernelgate.kernels.attention.ops import AttentionShape

    return AttentionShape(case.heads, case.heads_kv, case.dim_qk, case.dim_v, case.dtype, case.causal)


def attention_backward_workload(case, impl: str) -> Callable[[], object]:
    """The backward of one attention case, on saved forward outputs.

    Ours (``elem``/``region``/``tma``): preprocess + main + postprocess, varlen
    natively (no pad/unpad). ``fa2_varlen``: torch's varlen_attn backward (FA2),
    d_qk == d_v only. ``cudnn_sdpa``: cuDNN SDPA backward on the batch padded to
    the longest sequence (padding is outside the timed call, and its extra
    FLOPs are inside it). Unsupported combinations raise NotImplementedError.
    """
    from kernelgate.kernels.attention import ACCUM_MODES
    from kernelgate.kernels.attention.ops import attention_backward, attention_forward

    inp = case.make_inputs("cuda")
    q, k, v, do = inp["q"], inp["k"], inp["v"], inp["do"]
    cu_q, cu_k, max_q, max_k = inp["cu_seqlens_q"], inp["cu_seqlens_k"], inp["max_seqlen_q"], inp["max_seqlen_k"]
    if impl in ACCUM_MODES:
        o, lse = attention_forward(q, k, v, cu_q, cu_k, max_q, case.causal)
        return lambda: attention_backward(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, case.causal, accum=impl)
    if impl == "fa2_varlen":
        if case.dim_qk != case.dim_v:
            raise NotImplementedError("torch's varlen_attn (FA2) needs d_qk == d_v")
        from torch.nn.attention.varlen import varlen_attn

        q, k, v = (t.requires_grad_() for t in (q, k, v))
        window = (-1, 0) if case.causal else (-1, -1)
        out = varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, window_size=window)
        return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    if impl == "cudnn_sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def padded(t, cu, heads, max_len):  # (total, H, d) -> (batch, H, max_len, d)
            batch = cu.numel() - 1
            out = t.new_zeros(batch, max_len, heads, t.shape[-1])
            for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
                out[i, : b - a] = t[a:b]
            return out.transpose(1, 2).contiguous().requires_grad_()

        qp, dop = padded(q, cu_q, case.heads, max_q), padded(do, cu_q, case.heads, max_q).detach()
        kp, vp = padded(k, cu_k, case.heads_kv, max_k), padded(v, cu_k, case.heads_kv, max_k)
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(
                    qp, kp, vp, is_causal=case.causal, enable_gqa=case.heads != case.heads_kv
                )
                torch.autograd.grad(out, (qp, kp, vp), dop, retain_graph=True)
        except RuntimeError as err:
            raise NotImplementedError(f"cuDNN SDPA does not run this case: {err}") from err
        return lambda: torch.autograd.grad(out, (qp, kp, vp), dop, retain_graph=True)
    raise ValueError(f"unknown attention backward implementation {impl!r}")
