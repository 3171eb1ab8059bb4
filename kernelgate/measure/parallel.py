"""Work spread over spawned worker processes: the JIT warm-up before the benchmarks and
the tuners' compile phases. Spawned, not forked: a forked child cannot use CUDA."""

import concurrent.futures
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator


def available_cpus() -> int:
    """The cores this process may run on: a runner pinned to some of a host's cores (one per GPU,
    say) sees its own, where ``os.cpu_count()`` counts the whole host's."""
    if hasattr(os, "sched_getaffinity"):
        return len(os.sched_getaffinity(0))
    return os.cpu_count() or 1


def default_jobs(cap: int, shares: int = 1) -> int:
    """Worker processes: the available cores (one of ``shares`` equal parts of them) minus two for the
    parent and the system, at most ``cap``."""
    return max(1, min(cap, available_cpus() // shares - 2))


def in_worker_processes(fn: Callable, items: Iterable, jobs: int) -> Iterator[tuple[object, object, Exception | None]]:
    """``(item, fn(item), None)`` or ``(item, None, error)`` for each item, as each finishes."""
    spawn = multiprocessing.get_context("spawn")
    with concurrent.futures.ProcessPoolExecutor(jobs, mp_context=spawn) as pool:
        futures = {pool.submit(fn, item): item for item in items}
        for future in concurrent.futures.as_completed(futures):
            try:
                yield futures[future], future.result(), None
            except Exception as err:
                yield futures[future], None, err
