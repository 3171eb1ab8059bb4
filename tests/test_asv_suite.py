"""The asv suite imports and declares well-formed benchmarks (``asv check``). Running it is the
main job's business: ``nox -s bench`` smokes the whole suite in Triton's interpreter without a GPU."""

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from kernelgate.kernels.device import interpreter_mode

ROOT = Path(__file__).parents[1]

pytestmark = pytest.mark.skipif(interpreter_mode(), reason="asv discovers the suite in its own processes")


def test_asv_check_discovers_the_suite():
    env = {**os.environ, "ASV_PYTHONPATH": os.environ.get("PYTHONPATH", "")}
    proc = subprocess.run(
        [sys.executable, "-m", "asv", "check", "-E", f"existing:{sys.executable}"],
        cwd=ROOT, capture_output=True, text=True, env=env, check=False,
    )  # fmt: skip
    assert proc.returncode == 0 and "No problems found" in proc.stdout, proc.stdout[-4000:] + proc.stderr[-4000:]


def test_every_benchmark_keeps_the_name_parameters_unit_version_and_timing_its_history_has():
    """asv files results by name, parameters and version, and the gate's rules and the PR check's groups name
    them: the suite as asv discovers it equals the record (tests/support/asv_identity.py made it)."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    proc = subprocess.run(
        [sys.executable, "-P", "tests/support/asv_identity.py", "benchmarks"],
        cwd=ROOT, capture_output=True, text=True, env=env, check=True,
    )  # fmt: skip
    recorded = json.loads((ROOT / "tests" / "fixtures" / "asv_identity.json").read_text())
    discovered = json.loads(proc.stdout)
    assert sorted(discovered) == sorted(recorded)
    for name, described in recorded.items():
        assert discovered[name] == described, name


def test_a_metrics_class_measures_each_selected_case_once_with_its_selected_variants(monkeypatch):
    """The PR check asks only for the values its rules bound: no other case or variant is timed."""
    # Imported without a GPU, benchmarks/ switches its process to the interpreter unless told otherwise.
    monkeypatch.setenv("TRITON_INTERPRET", os.environ.get("TRITON_INTERPRET", "0"))
    from benchmarks import bench_layer_norm
    from kernelgate.measure.metrics import SELECTED_ENV

    asked = []
    monkeypatch.setattr(
        bench_layer_norm, "layer_norm_measures", lambda cases, variants: asked.append((cases, variants)) or {}
    )
    chosen = [["4096x1024", "float32", "bwd", "auto"], ["4096x1024", "float32", "fwd", "two_pass"],
              ["4096x1024", "float32", "fwd", "auto"]]  # fmt: skip
    monkeypatch.setenv(SELECTED_ENV, json.dumps(chosen))
    bench_layer_norm.measure_selected(bench_layer_norm.LayerNormMetrics.params)
    assert asked == [
        ([("4096x1024", "float32", "bwd")], ["auto"]),
        ([("4096x1024", "float32", "fwd")], ["two_pass", "auto"]),
    ]
