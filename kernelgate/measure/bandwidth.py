"""The metrics of a memory-bound kernel's case, whose time is the bytes it must move (the norms): its speedup over
eager torch, torch.compile and Liger-Kernel, the bandwidth it reaches, as GB/s, as % of the device's copy peak and
as % of a copy at the case's own size, and the host's cost per eager call. A cases module passes its workloads;
``METRICS`` and ``NOTES`` are the columns of its suite's tables.
"""

import statistics
from collections.abc import Callable

from kernelgate.measure import timing
from kernelgate.measure.workloads import batched, rotations, warmed
from kernelgate.suite import Metric

# The baseline every speedup is against, and the other references: torch.compile (Inductor's generated Triton)
# and Liger-Kernel (hand-written Triton, as this project's kernels).
BASELINE = "torch"
REFERENCES = ["torch", "torch_compile", "liger"]
GPU_ONLY_REFERENCES = ["torch_compile", "liger"]  # not run in interpreter smoke mode
JIT_REFERENCES = ("torch_compile", "liger")  # the references the warm-up compiles (eager torch has nothing to)


def bandwidth_metrics(
    workload: Callable[[str, int], Callable[[], object]],
    variants: list[str],
    nbytes: int,
    tensor_copy: Callable[[int], Callable[[], object]],
    tensor_bytes: int,
) -> dict[str, dict[str, float]]:
    """Per variant, the ``METRICS`` of one case. ``workload(impl, rotate)`` is one call of a variant or a
    reference cycling through ``rotate`` input sets, ``nbytes`` the fewest bytes a call must move, and
    ``tensor_copy(rotate)`` a copy of one of the case's ``tensor_bytes`` tensors into another, cycled alike.

    Device times are do_bench medians (L2 flushed before every run) of a CUDA graph of back-to-back calls on
    rotated inputs (``workloads.batched``), per call, references included, measured interleaved: the kernels,
    not the launch path, which ``host_us`` measures on its own, alternately with eager torch and torch.compile
    (a ratio does not depend on the host's CPU). Under the interpreter only the speedup over torch, GB/s and the
    host's cost are measured (smoke values).
    """
    gpu = timing.gpu_timing()
    impls = variants + (REFERENCES if gpu else [BASELINE])
    rotate = rotations(nbytes)
    eager = {impl: warmed(workload(impl, rotate)) for impl in impls}
    # Many short loops: their least is the host's cost (timing.least_ratio). The interpreter takes ms a call.
    loops = dict(calls=10, rounds=50) if gpu else dict(calls=1, rounds=1)
    # The host ratios are to eager torch's and torch.compile's, the calls a user would otherwise make.
    host = timing.interleaved_enqueue_us({impl: eager[impl] for impl in impls if impl != "liger"}, **loops)
    fns = {impl: batched(fn, rotate) for impl, fn in eager.items()}
    copies = {}  # {metric: (copy, bytes it moves)}: the variant's bandwidth as % of the copy's
    if gpu:
        fns["copy"], fns["tensor_copy"] = timing.copy(), batched(tensor_copy(rotate), rotate)
        copies = dict(pct_peak=("copy", 2 * timing.COPY_BYTES), pct_tensor_copy=("tensor_copy", 2 * tensor_bytes))
    t = timing.interleaved_ms(fns)
    metrics = {}
    for variant in variants:
        m = {
            "speedup_vs_torch": timing.median_ratio(t[BASELINE], t[variant]),
            "gbps": timing.gbps(nbytes, statistics.median(t[variant])),
            "host_us": min(host[variant]),
            "host_vs_torch": timing.least_ratio(host[variant], host[BASELINE]),
        }
        if gpu:
            m["speedup_vs_compile"] = timing.median_ratio(t["torch_compile"], t[variant])
            m["speedup_vs_liger"] = timing.median_ratio(t["liger"], t[variant])
            m["host_vs_compile"] = timing.least_ratio(host[variant], host["torch_compile"])
        for metric, (copy, copied) in copies.items():
            m[metric] = timing.pct_of_reference(nbytes, copied, t[copy], t[variant])
        metrics[variant] = m
    return metrics


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
    Metric("speedup_vs_torch", "x", "vs torch", baseline=True),
    Metric("speedup_vs_compile", "x", "vs compile"),
    Metric("speedup_vs_liger", "x", "vs Liger"),
    Metric("gbps", "GB/s", "GB/s"),
    # Achieved bandwidth over the device's copy bandwidth (a 1 GiB copy, bytes read + written).
    Metric("pct_peak", "%", "% peak"),
    # Over that of a copy of one [M, N] tensor of the case into another, timed as the kernels are: near 100
    # where pct_peak falls short, this size, not the kernel, is why.
    Metric("pct_tensor_copy", "%", "% tensor copy"),
    # Host time to enqueue one eager call (checks, launches), alone and over eager torch's and the
    # torch.compile'd function's, measured alternately in one process; the device time is the time class's.
    Metric("host_us", "us", "host (us)"),
    Metric("host_vs_torch", "x", "host ÷ torch"),
    Metric("host_vs_compile", "x"),
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
