"""pytest-benchmark plumbing for the kernel developer's loop (``nox -s perf``).

* machine_info carries the GPU and the package versions, and comparing
  against a run from another GPU or other versions warns loudly: such
  timings are not comparable.
* Without a GPU the run is a smoke run (Triton interpreter, tiny sizes); the
  header and the summary say so.
* ``record_perf`` adds a benchmark's derived metrics to its extra_info.
"""

import functools
import warnings
from collections.abc import Callable

import pytest
from pytest_benchmark.logger import PytestBenchmarkWarning

from kernelgate.kernels.device import interpreter_mode
from kernelgate.measure import timing
from kernelgate.measure.device_info import device_info

SMOKE_NOTE = "SMOKE RUN: Triton interpreter on CPU at tiny sizes; these are interpreter timings, not GPU timings"
MISMATCHES = pytest.StashKey[list[str]]()

device = functools.cache(device_info)  # runs nvidia-smi: once per process


def pytest_report_header(config):
    if not config.getoption("--perf"):
        return "perf: benchmarks are collected only with --perf"
    if interpreter_mode():
        return f"perf: {SMOKE_NOTE}"
    return f"perf: device-synchronized timer on {device()['gpu']}" if timing.gpu_timing() else None


def pytest_benchmark_update_machine_info(config, machine_info):
    machine_info.update(device())


def pytest_benchmark_compare_machine_info(config, benchmarksession, machine_info, compared_benchmark):
    saved = compared_benchmark["machine_info"]
    differing = [
        f"{key}: saved {saved.get(key)!r}, now {machine_info[key]!r}"
        for key in device()
        if saved.get(key) != machine_info[key]
    ]
    if differing:
        text = f"NOT COMPARABLE: the saved run had other hardware or software ({'; '.join(differing)})"
        warnings.warn(PytestBenchmarkWarning(text), stacklevel=1)
        config.stash.setdefault(MISMATCHES, []).append(text)


@pytest.hookimpl(wrapper=True)
def pytest_terminal_summary(terminalreporter, config):
    # After pytest-benchmark's tables, even when --benchmark-compare-fail has raised.
    try:
        return (yield)
    finally:
        for text in config.stash.get(MISMATCHES, []):
            terminalreporter.write_sep("!", text, red=True, bold=True)
        if config.getoption("--perf") and interpreter_mode():
            terminalreporter.write_sep("!", SMOKE_NOTE, yellow=True, bold=True)


@pytest.fixture
def record_perf(benchmark) -> Callable:
    """``record_perf(fn, nbytes=, flops=, baseline=)``: GB/s and/or TFLOP/s from the measured
    median; on a GPU also % of the measured copy peak (with ``nbytes``) and the speedup over
    ``baseline`` (interleaved, timing.ratio). The interpreter's peaks and ratios mean nothing,
    so smoke runs skip them."""

    def record(
        fn: Callable[[], object],
        nbytes: int | None = None,
        flops: float | None = None,
        baseline: Callable[[], object] | None = None,
    ) -> None:
        if not benchmark.enabled:  # --benchmark-disable: nothing was measured
            return
        median_ms = benchmark.stats.stats.median * 1e3
        info = {"gpu": device()["gpu"]}
        if nbytes is not None:
            info["gbps"] = timing.gbps(nbytes, median_ms)
        if flops is not None:
            info["tflops"] = timing.tflops(flops, median_ms)
        if timing.gpu_timing():
            if nbytes is not None:
                info["pct_copy_peak"] = 100 * info["gbps"] / timing.copy_peak_gbps()
            if baseline is not None:
                info["speedup_vs_baseline"] = timing.ratio(baseline, fn)
        benchmark.extra_info.update(info)

    return record
