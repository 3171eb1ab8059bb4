"""Work spread over spawned worker processes: the JIT warm-up before asv runs and
the tuners' compile phases. Spawned, not forked: a forked child cannot use CUDA."""

import concurrent.futures
import multiprocessing
import os
from collections.abc import Callable, Iterable, Iterator


def default_jobs(cap: int) -> int:
    """Worker processes: the cores minus two for the parent and the system, at most ``cap``."""
    return max(1, min(cap, (os.cpu_count() or 1) - 2))


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
