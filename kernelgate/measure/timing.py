"""GPU timing shared by the asv suite, pytest-benchmark, the tuner and the gate.

* Kernel times are medians of CUDA-event timings by ``triton.testing.do_bench``
  after warm-up, with L2 flushed before every run. Callers that must not time
  the host's launch path replay the call from a CUDA graph, a batch of calls
  on rotated inputs (``kernelgate.measure.workloads.batched``); ``enqueue_us`` times that path itself.
* Ratios (kernel vs baseline, kernel vs copy) are measured interleaved in
  one process: round after round alternates the two, so clock and thermal
  drift hit both alike; the ratio reported is the median of per-round ratios.
  Host times are the exception: their ratio is of the least loops (``least_ratio``).
* Peaks are measured on the device, not read off a datasheet: a large
  device-to-device copy (bytes read + written) and a large bf16 matmul.

Without a GPU (Triton's interpreter) the same functions time with the wall
clock, and ``gpu_timing()`` says so: such numbers are for smoke runs only.
"""

import functools
import gc
import math
import statistics
import time
from collections.abc import Callable

import torch

WARMUP_MS = 10
REP_MS = 50
ROUNDS = 3
COPY_BYTES = 1 << 30  # 1 GiB each way: far past any L2


def gpu_timing() -> bool:
    return torch.cuda.is_available()


def sync() -> None:
    if gpu_timing():
        torch.cuda.synchronize()


def median_ms(fn: Callable[[], object], warmup_ms: float = WARMUP_MS, rep_ms: float = REP_MS) -> float:
    """Median time of one call in milliseconds (device events; L2 flushed per run). A callable
    that makes several calls per run says how many in ``fn.calls`` (kernelgate.measure.workloads.in_cuda_graphs)."""
    if gpu_timing():
        import triton.testing

        return triton.testing.do_bench(fn, warmup=warmup_ms, rep=rep_ms, return_mode="median") / getattr(fn, "calls", 1)
    fn()  # interpreter smoke: one warm-up, then one wall-clock run (it says the code runs, no more)
    start = time.perf_counter()
    fn()
    return (time.perf_counter() - start) * 1e3


def interleaved_ms(fns: dict[str, Callable[[], object]], rounds: int = ROUNDS) -> dict[str, list[float]]:
    """Per-round median times of several callables, measured alternately (one round in smoke runs)."""
    times: dict[str, list[float]] = {name: [] for name in fns}
    for _ in range(rounds if gpu_timing() else 1):
        for name, fn in fns.items():
            times[name].append(median_ms(fn))
    return times


def median_ratio(numerator_ms: list[float], denominator_ms: list[float]) -> float:
    """Median of per-round ratios of two interleaved series (drift cancels within a round)."""
    return statistics.median(a / b for a, b in zip(numerator_ms, denominator_ms, strict=True))


def pct_of_reference(work: float, reference_work: float, reference_ms: list[float], ms: list[float]) -> float:
    """A series' rate (``work`` per call) as % of an interleaved reference's (``reference_work`` per
    call): e.g. a kernel's bytes against the copy peak's, its FLOPs against a matmul's."""
    return 100 * work / reference_work * median_ratio(reference_ms, ms)


def ratio(numerator: Callable[[], object], denominator: Callable[[], object], rounds: int = ROUNDS) -> float:
    """Median over interleaved rounds of time(numerator) / time(denominator).

    ``ratio(baseline, kernel)`` is the kernel's speedup over the baseline.
    """
    t = interleaved_ms({"num": numerator, "den": denominator}, rounds)
    return median_ratio(t["num"], t["den"])


@functools.cache
def _copy_buffers() -> tuple[torch.Tensor, torch.Tensor]:
    src = torch.randn(COPY_BYTES // 4, device="cuda")
    return src, torch.empty_like(src)


def copy() -> Callable[[], object]:
    """A device-to-device copy of ``COPY_BYTES`` (a reused 1 GiB buffer pair): the copy peak's workload."""
    src, dst = _copy_buffers()
    return lambda: dst.copy_(src)


@functools.cache
def copy_peak_gbps() -> float:
    """Device copy bandwidth in GB/s, counting bytes read plus bytes written."""
    return 2 * COPY_BYTES / median_ms(copy()) / 1e6


def matmul(n: int = 8192) -> tuple[Callable[[], object], float]:
    """A bf16 n^3 matmul on random data (zeros run faster and would flatter it), and its FLOPs."""
    a = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    b = torch.randn(n, n, device="cuda", dtype=torch.bfloat16)
    return (lambda: a @ b), 2 * n**3


@functools.cache
def matmul_peak_tflops() -> float:
    fn, flops = matmul()
    return tflops(flops, median_ms(fn))


def gbps(nbytes: int, ms: float) -> float:
    return nbytes / ms / 1e6


def tflops(flops: float, ms: float) -> float:
    return flops / ms / 1e9


def enqueue_us(fn: Callable[[], object], calls: int = 100, repeats: int = 20) -> tuple[float, float]:
    """Per call, in us, medians over ``repeats`` loops of ``calls`` back-to-back calls:
    (host time to enqueue them, time until the device has finished them).

    The first is what an eager caller pays on the CPU (Python, checks, launches);
    the second is launch throughput, max(host, device) when the two overlap. Keep
    ``calls`` small enough that the launch queue never fills and blocks the host.
    """
    host, wall = [], []
    for _ in range(repeats):
        sync()
        start = time.perf_counter()
        for _ in range(calls):
            fn()
        enqueued = time.perf_counter()
        sync()
        done = time.perf_counter()
        host.append((enqueued - start) / calls * 1e6)
        wall.append((done - start) / calls * 1e6)
    return statistics.median(host), statistics.median(wall)


def interleaved_enqueue_us(fns: dict[str, Callable[[], object]], calls: int, rounds: int) -> dict[str, list[float]]:
    """Per-round host time to enqueue one call (``enqueue_us``) of several callables, measured
    alternately (``least_ratio`` compares two of them). A loop's host time moves with what ran just
    before it (caches, the allocator's state), so each timed loop follows ``calls`` untimed calls of
    its own, as a caller's back-to-back calls do, and each round starts one callable further on.
    Python's garbage collector is off meanwhile, as in timeit: a collection would land in whichever
    loop allocated the object that set it off."""
    host: dict[str, list[float]] = {name: [] for name in fns}
    names = list(fns)
    collecting = gc.isenabled()
    gc.collect()
    gc.disable()
    try:
        for r in range(rounds):
            for name in names[r % len(names) :] + names[: r % len(names)]:
                for _ in range(calls):
                    fns[name]()
                host[name].append(enqueue_us(fns[name], calls=calls, repeats=1)[0])
    finally:
        if collecting:
            gc.enable()
    return host


def least_ratio(numerator_us: list[float], denominator_us: list[float]) -> float:
    """The least of one series of host times over the least of another's. Interference (other
    processes, a thread's wake-up) only adds to a loop's host time, so the least of many short loops
    is the steadiest estimate of the cost itself, timeit's rule."""
    return min(numerator_us) / min(denominator_us)


def device_clock() -> float:
    """A wall clock read only once the device has finished the queued work
    (pytest-benchmark's timer: a round then spans its kernels, not their launches)."""
    sync()
    return time.perf_counter()


SAMPLE_CALLS = 50  # back-to-back calls in a time_* sample, at most
# A call of more than 1/50 of this much work gets fewer calls, as many as hold it: samples of
# 0.2 s or more at our backward's rate. Ten-call samples of the long-sequence backward (0.23 s) read
# as fifty-call ones, where ten calls of a 1-3 ms backward read 0.7-1.9% slower (docs/measuring.md).
SAMPLE_TFLOP = 60.0


def sample_calls(tflop_per_call: float = 0.0) -> int:
    """Back-to-back calls in one asv time_* sample on a GPU: ``SAMPLE_CALLS``, or as few as hold
    ``SAMPLE_TFLOP`` of work. Counted from a case's work model, not timed, so that base and head
    (and every run of the history) take the same count."""
    if tflop_per_call * SAMPLE_CALLS <= SAMPLE_TFLOP:
        return SAMPLE_CALLS
    return math.ceil(SAMPLE_TFLOP / tflop_per_call)


_calls_counted = 1  # the calls of the sample built last: what sample_clock counts in


def back_to_back(fn: Callable[[], object], tflop_per_call: float = 0.0) -> Callable[[], None]:
    """One asv time_* sample: ``sample_calls(tflop_per_call)`` calls in a row on a GPU, one run of ``fn``
    in interpreter smoke runs (where a call takes milliseconds). A run of ``fn`` that makes several calls
    says how many in ``fn.calls`` (a CUDA graph of back-to-back calls, ``workloads.in_cuda_graphs``): the
    sample then runs it as often as makes as many calls. ``sample_clock`` counts in units of the calls: asv
    (and the PR check's worker) sets a case up, then samples it, one at a time."""
    global _calls_counted
    per_run = getattr(fn, "calls", 1)
    runs = max(1, round(sample_calls(tflop_per_call) / per_run)) if gpu_timing() else 1
    _calls_counted = runs * per_run

    def run():
        for _ in range(runs):
            fn()

    return run


def sample_clock() -> float:
    """asv's timer for time_* benchmarks whose body is ``back_to_back(fn)``: the device
    clock counted in units of that sample's calls, so asv records time per call.

    asv times one invocation per sample whenever a benchmark has a setup
    (asv_runner, asv#966). A single call from an idle device measures the
    launch latency and the host's jitter with the kernel: 50 us instead of
    37 us for a normalization kernel on an H200, and 10% apart between processes.
    Back-to-back calls keep the device busy, so a sample times the device.
    """
    return device_clock() / _calls_counted
