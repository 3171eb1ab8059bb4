"""kernelgate.report.results_page on synthetic asv results: the latest commit of each GPU machine,
smoke machines left out, the same bytes every time, a clear error without GPU results.

Result files are written by asv's own ``Results`` class, as in tests/test_gate.py.
"""

import datetime
import re
from pathlib import Path

import pytest
from asv import util
from asv.machine import Machine
from asv.results import Results
from asv.runner import BenchmarkResult

from kernelgate.report.results_page import main, results_page

H200 = {
    "gpu": "NVIDIA H200", "gpu_class": "H200", "gpu_driver": "570.124.06", "cuda": "12.8", "torch": "2.7.0",
    "triton": "3.3.0", "tilelang": "0.1.5",
}  # fmt: skip
INTERPRETER = {**H200, "gpu": "none (Triton interpreter)", "gpu_class": "interpreter", "gpu_driver": "none"}
CASE = [["'4096x4096'"], ["'float32'"], ["'fwd'"], ["'fused'"]]  # shape, dtype, direction, impl: asv's form
OLD, NEW, SMOKE = "1" * 40, "2" * 40, "3" * 40


def write(root: Path, machine: str, info: dict, commit: str, day: int, speedup: float, started_hour: int = 0) -> None:
    """asv's result file of ``commit`` (committed on ``day``) on ``machine``: one LayerNorm case,
    its time and its speedup over torch."""
    params = {"machine": machine, **info, "python": "3.12"}
    date = util.datetime_to_js_timestamp(datetime.datetime(2026, 11, day, tzinfo=datetime.UTC))
    results = Results(params, {}, commit, date, "3.12", "virtualenv-py3.12", {})
    started = datetime.datetime(2026, 11, 25, started_hour, tzinfo=datetime.UTC)
    for name, value in [
        ("bench_layer_norm.LayerNorm.time_layer_norm", 68e-6),
        ("bench_layer_norm.LayerNormMetrics.track_speedup_vs_torch", speedup),
    ]:
        result = BenchmarkResult(result=[value], samples=[None], number=[None], errcode=0, stderr="", profile=None)
        benchmark = {"name": name, "version": "1", "params": CASE}
        results.add_result(benchmark, result, started_at=started)
    results.save(str(root))
    util.write_json(str(root / machine / "machine.json"), {"machine": machine, **info}, api_version=Machine.api_version)


@pytest.fixture
def results(tmp_path) -> Path:
    """Two commits on an H200, the older one run last (a backfill), and a later smoke run."""
    root = tmp_path / "results"
    write(root, "h200-runner", H200, NEW, day=22, speedup=1.59)
    write(root, "h200-runner", H200, OLD, day=21, speedup=1.11, started_hour=5)
    write(root, "cpu-smoke-interpreter", INTERPRETER, SMOKE, day=23, speedup=0.5)
    return root


def test_the_latest_commit_of_each_gpu(results):
    page = results_page(results)
    assert "## NVIDIA H200" in page
    assert f"Machine `h200-runner`, commit `{NEW[:8]}`: driver 570.124.06, CUDA 12.8, torch 2.7.0" in page
    assert "| layer_norm/fused | 4096x4096 float32 fwd | 68.0 | 1.59x |" in page
    assert OLD[:8] not in page and "1.11x" not in page


def test_the_interpreter_machine_is_left_out(results):
    page = results_page(results)
    assert page.count("\n## ") == 1
    assert "cpu-smoke-interpreter" not in page and "0.50x" not in page


def test_a_tie_on_the_commit_date_goes_to_the_latest_start(results):
    write(results, "h200-runner", H200, OLD, day=22, speedup=1.11, started_hour=9)
    assert f"commit `{OLD[:8]}`" in results_page(results)


def test_the_same_results_give_the_same_bytes(results, tmp_path):
    first, second = tmp_path / "first.md", tmp_path / "docs" / "second.md"
    main(["--results", str(results), "--out", str(first)])
    main(["--results", str(results), "--out", str(second)])
    assert first.read_bytes() == second.read_bytes()
    assert first.read_text() == results_page(results)


@pytest.mark.parametrize("smoke_only", [False, True])
def test_no_gpu_results_is_a_clear_error(tmp_path, smoke_only):
    root = tmp_path / "results"
    root.mkdir()
    if smoke_only:
        write(root, "cpu-smoke-interpreter", INTERPRETER, SMOKE, day=23, speedup=0.5)
    with pytest.raises(SystemExit, match=f"no GPU results in {re.escape(str(root))}"):
        main(["--results", str(root), "--out", str(tmp_path / "results.md")])
    assert not (tmp_path / "results.md").exists()
