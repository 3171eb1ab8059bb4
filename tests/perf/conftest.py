"""pytest-benchmark plumbing for the kernel developer's loop (``nox -s perf``).

* machine_info carries the GPU and the package versions, and comparing
  against a run from another GPU or other versions warns loudly: such
  timings are not comparable.
* Without a GPU the run is a smoke run (Triton interpreter, tiny sizes); the
  header and the summary say so.
* ``record_perf`` adds a benchmark's derived metrics to its extra_info.
* ``record_kernels`` (``--explain``) adds what the case's kernels compile to and, on a GPU with Nsight Compute,
  what its call did there; ``--benchmark-compare`` then says what changed from the saved run
  (``kernelgate.explain.report.between_runs``).
"""

import dataclasses
import functools
import json
import os
import subprocess
import sys
import warnings
from collections.abc import Callable

import pytest
from pytest_benchmark.logger import PytestBenchmarkWarning

from kernelgate.kernels.device import interpreter_mode
from kernelgate.measure import timing
from kernelgate.measure.device_info import device_info

SMOKE_NOTE = "SMOKE RUN: Triton interpreter on CPU at tiny sizes; these are interpreter timings, not GPU timings"
MISMATCHES = pytest.StashKey[list[str]]()
SAVED = pytest.StashKey[dict[str, dict]]()  # the compared saved run's extra_info, by benchmark

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
    runs = compared_benchmark.get("benchmarks", [])
    config.stash[SAVED] = {run["fullname"]: run.get("extra_info", {}) for run in runs if "fullname" in run}
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
        if config.getoption("--explain") and SAVED in config.stash:
            from kernelgate.explain.report import between_runs

            now = {run.fullname: run.extra_info for run in config._benchmarksession.benchmarks}
            terminalreporter.write_sep("-", "what changed in the kernels since the saved run (--explain)")
            terminalreporter.write_line(between_runs(config.stash[SAVED], now))


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


@pytest.fixture
def record_kernels(benchmark, request) -> Callable[[str], None]:
    """``record_kernels(case_id)`` with ``--explain``: the asv case's kernels as they compile for sm_90 (no GPU
    needed) and, on a GPU with Nsight Compute, one call's profile, in extra_info."""

    def record(case_id: str) -> None:
        if not request.config.getoption("--explain") or not benchmark.enabled:
            return
        from kernelgate.explain import profile

        # In a process of its own: under Triton's interpreter (a smoke run) the kernels compile to nothing.
        env = {name: value for name, value in os.environ.items() if name != "TRITON_INTERPRET"}
        argv = [sys.executable, "-m", "kernelgate.explain", "compiled", case_id, "--gpu-class", device()["gpu_class"]]
        done = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
        why_not = {"error": (done.stderr.strip().splitlines() or ["no output"])[-1]}
        benchmark.extra_info["kernels"] = json.loads(done.stdout)[case_id] if done.returncode == 0 else why_not
        tool = profile.ncu() if timing.gpu_timing() else None
        if tool is not None:
            found = profile.profile_case(tool, sys.executable, case_id, timeout=300)
            saved = found if isinstance(found, str) else [dataclasses.asdict(kernel) for kernel in found]
            benchmark.extra_info["profile"] = saved

    return record
