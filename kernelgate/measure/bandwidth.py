"""A memory-bound kernel on the rows of an [M, N] tensor (the norms), as its suite benchmarks it: its time is the
bytes it must move. ``RowOp`` gives a suite its workloads, timed samples, metrics, warm-up calls and costs from
the kernel's cases and calls; the metrics are its speedup over eager torch, torch.compile and Liger-Kernel, the
bandwidth it reaches, as GB/s, as % of the device's copy peak and as % of a copy at the case's own size, and the
host's cost per eager call. ``METRICS`` and ``NOTES`` are the columns of its suite's tables.
"""

import dataclasses
import functools
import statistics
from collections.abc import Callable
from typing import Protocol

import torch

from kernelgate.asv_case import Case
from kernelgate.measure import references, timing
from kernelgate.measure.workloads import (
    autograd_workload,
    batched,
    bench_device,
    rotations,
    tensor_copy_workload,
    warmed,
)
from kernelgate.suite import Metric

# The baseline every speedup is against, and the other references: torch.compile (Inductor's generated Triton)
# and Liger-Kernel (hand-written Triton, as this project's kernels).
BASELINE = "torch"
REFERENCES = ["torch", "torch_compile", "liger"]
GPU_ONLY_REFERENCES = ["torch_compile", "liger"]  # not run in interpreter smoke mode
JIT_REFERENCES = ("torch_compile", "liger")  # the references the warm-up compiles (eager torch has nothing to)
# The metrics that need the host's cost measured (the references they read: METRICS).
HOST_METRICS = {"host_us", "host_vs_torch", "host_vs_compile"}

# The asv version of a row op's time_* benchmarks: how a sample is measured (``RowOp.replayed``). A new way
# starts a new history.
TIME_VERSION = "50 calls a sample, replayed as CUDA graphs of back-to-back calls on rotated inputs"


class RowCase(Protocol):
    """A benchmark case of a row op (its cases module's dataclass)."""

    m: int
    n: int
    torch_dtype: torch.dtype
    tensor_bytes: int  # of one [M, N] tensor of the case

    def make_inputs(self, device, requires_grad: bool = False) -> tuple[torch.Tensor, ...]: ...
    def bytes_moved(self, direction: str) -> int: ...
    def smoke(self) -> "RowCase": ...  # a tiny stand-in for Triton's interpreter


@functools.cache
def compiled(fn: Callable) -> Callable:
    """``torch.compile(fn)``, one per process, the torch_compile reference of the op ``fn`` computes."""
    # One process builds many cases (python -m kernelgate.measure.metrics, the warm-up workers): one
    # specialization per shape, dtype and grad mode, past dynamo's default limit of 8, after which it would
    # silently run eager torch under the torch_compile name.
    torch._dynamo.config.recompile_limit = 256
    # The bwd case replays one backward (retain_graph=True), which a backward compiled with donated buffers
    # refuses. Which kind a process loads depends on what filled the on-disk cache first (a training step's
    # compile donates), so after a fwd+bwd case the bwd one failed on a warm cache.
    torch._functorch.config.donated_buffer = False
    return torch.compile(fn, dynamic=False)


@dataclasses.dataclass(frozen=True)
class RowOp:
    """A row op's suite callables (``kernelgate.suite``) from its cases (``bench_case(shape, dtype)``) and its calls
    (``call(case, impl)``: ``y = f(*case.make_inputs(...))`` for a variant of this project's or a reference)."""

    bench_case: Callable[[str, str], RowCase]
    call: Callable[[RowCase, str], Callable[..., torch.Tensor]]

    def workload(self, case: RowCase, impl: str, direction: str, rotate: int = 1) -> Callable[[], object]:
        """One forward (``fwd``), one backward of a saved forward (``bwd``) or a forward plus its backward
        (``fwd+bwd``) of ``case`` by ``impl``, cycling through ``rotate`` input sets (``autograd_workload``)."""
        device, grads = bench_device(), direction != "fwd"
        dy = lambda: torch.randn(case.m, case.n, device=device, dtype=case.torch_dtype) if grads else None
        sets = [(case.make_inputs(device, requires_grad=grads), dy()) for _ in range(rotate)]
        return autograd_workload(sets, self.call(case, impl), direction)

    def replayed(self, case: RowCase, impl: str, direction: str) -> Callable[[], None]:
        """What the time_* benchmarks (asv, pytest-benchmark) run back to back: the workload's calls on rotated
        input sets (back-to-back calls leave no room for an L2 flush), captured back to back in one CUDA graph
        (``workloads.batched``), as the metrics time them. A graph of one call each left a launch gap of about
        4 us between replays on an H200, 30-45% of a 10 us kernel's time, and wider in some processes than in
        others: up to 4% between fresh processes on identical code, against 0.3% for graphs of many calls."""
        rotate = rotations(case.bytes_moved(direction))
        return batched(warmed(self.workload(case, impl, direction, rotate)), rotate)

    def sized(self, shape: str, dtype: str) -> RowCase:
        """The case itself on a GPU, its tiny smoke stand-in under the interpreter."""
        case = self.bench_case(shape, dtype)
        return case if torch.cuda.is_available() else case.smoke()

    def timed(self, shape: str, dtype: str, direction: str, impl: str) -> Callable[[], None]:
        """A time case's sample: the device time of one call, replayed from CUDA graphs on rotated inputs back
        to back (timing.sample_clock), so that the host's launch path, which varies between processes far more
        than the kernels do, stays out of the samples the gate compares."""
        if impl in GPU_ONLY_REFERENCES and not timing.gpu_timing():
            raise NotImplementedError(f"{impl} is a GPU reference; not run in interpreter smoke mode")
        return timing.back_to_back(self.replayed(self.sized(shape, dtype), impl, direction))

    def measure(
        self,
        shape: str,
        dtype: str,
        direction: str,
        variants: list[str],
        metrics: set[str] | None = None,
        stored: dict[str, float] | None = None,
    ) -> dict[str, dict[str, float]]:
        """A metrics case: ``METRICS`` of each variant, or those named, against the references' ``stored`` times
        where given (``bandwidth_metrics``)."""
        case = self.sized(shape, dtype)
        return bandwidth_metrics(
            lambda impl, rotate: self.workload(case, impl, direction, rotate),
            variants,
            case.bytes_moved(direction),
            lambda rotate: tensor_copy_workload((case.m, case.n), case.torch_dtype, rotate),
            case.tensor_bytes,
            metrics,
            stored,
        )

    def warm_call(self, shape: str, dtype: str, direction: str, impl: str) -> Callable[[], object]:
        """One call, untimed: what the JIT warm-up runs."""
        return self.workload(self.bench_case(shape, dtype), impl, direction)

    def seconds(self, case: Case) -> float | None:
        """A case's seconds to measure; None for one of other parameters than (shape, dtype, direction,
        implementation), which the measured commit's suite may declare: the averages then stand in."""
        if len(case.params) != 4:
            return None
        shape, dtype, direction, _ = case.values
        return seconds_to_measure(case.kind, self.bench_case(shape, dtype).bytes_moved(direction))

    def smoke_label(self, shape: str, dtype: str, direction: str) -> str:
        ran = self.bench_case(shape, dtype).smoke()
        return f"{ran.m}x{ran.n} {dtype} {direction} (for {shape})"


def bandwidth_metrics(
    workload: Callable[[str, int], Callable[[], object]],
    variants: list[str],
    nbytes: int,
    tensor_copy: Callable[[int], Callable[[], object]],
    tensor_bytes: int,
    metrics: set[str] | None = None,
    stored: dict[str, float] | None = None,
) -> dict[str, dict[str, float]]:
    """Per variant, the ``METRICS`` of one case: all of them, or (``metrics``) those named and what comes free
    with them. ``workload(impl, rotate)`` is one call of a variant or a reference cycling through ``rotate``
    input sets, ``nbytes`` the fewest bytes a call must move, and ``tensor_copy(rotate)`` a copy of one of the
    case's ``tensor_bytes`` tensors into another, cycled alike. A reference, a copy or the host's cost that no
    named metric needs is not measured: the PR check asks for the values the gate bounds, no more. A reference
    or copy in ``stored`` (ms per call, ``kernelgate.measure.references``) is not timed either: the variants'
    values are read against that time, as the host's cost is against a reference's host time stored under
    ``references.HOST``. Beside the variants, ``references.TIMES`` holds the times of the references and copies
    that were timed, host times too.

    Device times are do_bench medians (L2 flushed before every run) of a CUDA graph of back-to-back calls on
    rotated inputs (``workloads.batched``), per call, references included, measured interleaved: the kernels,
    not the launch path, which ``host_us`` measures on its own, alternately with eager torch and torch.compile
    (a ratio does not depend on the host's CPU; a stored host time is the same CPU's, by the store's key). Under
    the interpreter only the speedup over torch, GB/s and the host's cost are measured (smoke values), and nothing
    stored is read.
    """
    gpu = timing.gpu_timing()
    wanted = {metric.name for metric in METRICS} if metrics is None else set(metrics)
    stored = dict(stored or {}) if gpu else {}
    host_names = [name for name in stored if name.startswith(references.HOST)]
    stored_host = {name.removeprefix(references.HOST): stored.pop(name) for name in host_names}
    # Eager torch, the baseline, is always read: speedup_vs_torch and gbps come with every case.
    read = {ref for metric in METRICS if metric.name in wanted for ref in metric.references}
    refs = [BASELINE, *(ref for ref in REFERENCES if ref != BASELINE and gpu and ref in read)]
    # The host ratios are to eager torch's and torch.compile's eager calls, the calls a user would otherwise make.
    host_refs = [ref for ref in refs if ref != "liger"] if wanted & HOST_METRICS else []
    timed_refs = [ref for ref in refs if ref not in stored]
    host_timed = [ref for ref in host_refs if ref not in stored_host]
    rotate = rotations(nbytes)
    eager = {impl: warmed(workload(impl, rotate)) for impl in dict.fromkeys(variants + timed_refs + host_timed)}
    host = {}
    if host_refs:
        # Many short loops: their least is the host's cost (timing.least_ratio). The interpreter takes ms a call.
        loops = dict(calls=10, rounds=50) if gpu else dict(calls=1, rounds=1)
        host = timing.interleaved_enqueue_us({impl: eager[impl] for impl in variants + host_timed}, **loops)
        host.update({ref: [stored_host[ref]] for ref in host_refs if ref not in host_timed})
    fns = {impl: batched(eager[impl], rotate) for impl in variants + timed_refs}
    copies = {}  # {metric: (copy, bytes it moves)}: the variant's bandwidth as % of the copy's
    if gpu and "pct_peak" in wanted:
        copies["pct_peak"] = ("copy", 2 * timing.COPY_BYTES)
        if "copy" not in stored:
            fns["copy"] = timing.copy()
    if gpu and "pct_tensor_copy" in wanted:
        copies["pct_tensor_copy"] = ("tensor_copy", 2 * tensor_bytes)
        if "tensor_copy" not in stored:
            fns["tensor_copy"] = batched(tensor_copy(rotate), rotate)
    t = timing.interleaved_ms(fns)
    timed = {name: statistics.median(t[name]) for name in fns if name not in variants} if gpu else {}
    timed |= {references.HOST + ref: min(host[ref]) for ref in host_timed} if gpu else {}
    rounds = len(t[variants[0]])
    t.update({name: [ms] * rounds for name, ms in stored.items()})  # a constant series: its median_ratio is the ratio
    measured: dict[str, dict[str, float]] = {}
    for variant in variants:
        m = {
            "speedup_vs_torch": timing.median_ratio(t[BASELINE], t[variant]),
            "gbps": timing.gbps(nbytes, statistics.median(t[variant])),
        }
        if host:
            m["host_us"] = min(host[variant])
            m["host_vs_torch"] = timing.least_ratio(host[variant], host[BASELINE])
        if "torch_compile" in refs:
            m["speedup_vs_compile"] = timing.median_ratio(t["torch_compile"], t[variant])
        if "torch_compile" in host:
            m["host_vs_compile"] = timing.least_ratio(host[variant], host["torch_compile"])
        if "liger" in refs:
            m["speedup_vs_liger"] = timing.median_ratio(t["liger"], t[variant])
        for metric, (copy, copied) in copies.items():
            m[metric] = timing.pct_of_reference(nbytes, copied, t[copy], t[variant])
        measured[variant] = m
    if timed:
        measured[references.TIMES] = timed
    return measured


# Rough seconds to measure a case, to balance shards (both commits). Measuring waits on the device, so a case's
# seconds grow with the bytes a call moves: a time case 0.21 s + 0.59 s a GB, a metrics unit (its case beside
# references and copies) 2.3 s + 1.0 s a GB, fitted on an H200 to the seconds the check printed for 247 LayerNorm
# cases and 121 units (residuals 0.45 s a unit).
TIME_CASE_S, METRICS_UNIT_S = (0.21, 0.59), (2.3, 1.0)  # seconds, and seconds a GB


def seconds_to_measure(kind: str, nbytes: int) -> float:
    """A time case's (``kind`` "time") or a metrics unit's seconds, for a call that moves ``nbytes``."""
    fixed, per_gigabyte = TIME_CASE_S if kind == "time" else METRICS_UNIT_S
    return fixed + per_gigabyte * nbytes / 1e9


# What bandwidth_metrics measures, in the order the tables show them.
METRICS = (
    Metric("speedup_vs_torch", "x", "vs torch", baseline=True, references=("torch",)),
    Metric("speedup_vs_compile", "x", "vs compile", references=("torch_compile",)),
    Metric("speedup_vs_liger", "x", "vs Liger", references=("liger",)),
    Metric("gbps", "GB/s", "GB/s", references=()),
    # Achieved bandwidth over the device's copy bandwidth (a 1 GiB copy, bytes read + written).
    Metric("pct_peak", "%", "% peak", references=()),
    # Over that of a copy of one [M, N] tensor of the case into another, timed as the kernels are: near 100
    # where pct_peak falls short, this size, not the kernel, is why.
    Metric("pct_tensor_copy", "%", "% tensor copy", references=()),
    # Host time to enqueue one eager call (checks, launches), alone and over eager torch's and the
    # torch.compile'd function's, measured alternately in one process; the device time is the time class's.
    Metric("host_us", "us", "host (us)", references=()),
    Metric("host_vs_torch", "x", "host ÷ torch", references=("torch",)),
    Metric("host_vs_compile", "x", references=("torch_compile",)),
)

NOTES = """\
- vs torch, vs compile, vs Liger: speedup over eager torch, torch.compile and Liger-Kernel = the ratio of their
  times, measured interleaved in one process.
- GB/s and % peak: bandwidth achieved on the bytes the case must move, and its % of the device's copy peak (a
  1 GiB copy), measured interleaved with it.
- % tensor copy: bandwidth achieved over that of a copy of one [M, N] tensor of the case, timed alike; near 100
  where % peak falls short, the size, not the kernel, is why.
- host (us): host time to enqueue one eager call (checks, launches), the least of many short loops;
  host ÷ torch: that time over eager torch's, measured alternately with it (lower is better)."""
