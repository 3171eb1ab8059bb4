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
