"""Compile the tuner's candidate kernels in parallel, before anything is timed.

Each worker process (spawned: CUDA cannot be forked) launches each of its
configurations once on the GPU. That compiles it into Triton's on-disk cache
(``TRITON_CACHE_DIR``), so the timing process later loads it instead of
compiling, and tells whether the configuration is usable: Triton raises
``OutOfResources`` when it does not fit, and a kernel that spills registers
stores them to local memory (STL in its SASS).
"""

import dataclasses
import functools
import time

import torch
from triton.runtime.errors import OutOfResources

from kernelgate.cases.common import DTYPES
from kernelgate.explain.compiled import spill_stores
from kernelgate.kernels.layer_norm.config import LaunchConfig
from kernelgate.kernels.layer_norm.ops import backward_launch, forward_launch
from kernelgate.measure.parallel import in_worker_processes

# Compiling needs only the row length, not the real number of rows: M enters
# Triton's specialization only through divisibility by 16, which 16 rows keep
# for every benchmark shape. (Were it ever different, the timing process would
# compile once more before timing; never inside a timed region.)
COMPILE_ROWS = 16


@dataclasses.dataclass(frozen=True)
class CompileTask:
    variant: str
    direction: str
    dtype: str
    n: int
    cfg: LaunchConfig  # programs_per_sm left at its default: it does not change the code


@functools.cache
def _tensors(dtype: str, n: int):
    dt = DTYPES[dtype]
    x = torch.randn(COMPILE_ROWS, n, device="cuda", dtype=dt)
    w = torch.randn(n, device="cuda", dtype=dt)
    stats = torch.ones(COMPILE_ROWS, device="cuda", dtype=torch.float32)
    return x, w, stats, torch.empty_like(x)


def check(task: CompileTask) -> str | None:
    """Launch ``task``'s kernel once; None if usable, else why it is dropped."""
    x, w, stats, out = _tensors(task.dtype, task.n)
    if task.direction == "fwd":
        launch = forward_launch(x, w, w, 1e-5, task.variant, out, None, None, task.cfg)  # the kernel tune times
    else:
        launch = backward_launch(x, x, w, w, stats, stats, task.variant, out, task.cfg)[0]
    try:
        kernel = launch()
        torch.cuda.synchronize()
    except OutOfResources as err:
        return f"out of resources ({err})"
    # Triton's n_spills is the local memory's size over 4: it also counts a stack frame that holds no
    # spilled register (the correctly rounded division's slow-path call at fp32 32768, 32 warps).
    if kernel.n_spills and (stores := spill_stores(kernel.asm["sass"])):
        return f"spills registers ({stores} stores to local memory)"
    return None


def compile_all(tasks: list[CompileTask], jobs: int, report_every_s: float = 10.0) -> dict[CompileTask, str | None]:
    """{task: None if usable, else the reason it was dropped}, compiled on ``jobs`` processes."""
    results: dict[CompileTask, str | None] = {}
    start = last_report = time.perf_counter()
    for task, reason, err in in_worker_processes(check, tasks, jobs):
        # A compile error drops this configuration, not the whole run.
        results[task] = reason if err is None else f"failed: {type(err).__name__}: {str(err).splitlines()[:1]}"
        now = time.perf_counter()
        if now - last_report >= report_every_s or len(results) == len(tasks):
            last_report = now
            dropped = sum(r is not None for r in results.values())
            print(f"  compiled {len(results)}/{len(tasks)} ({dropped} dropped) in {now - start:.0f} s", flush=True)
    return results
