"""The asv suite without a GPU: discovery, a smoke run of the whole suite in
Triton's interpreter, and history across two commits (each built by asv in its
own virtualenv). Results go under a machine name of their own, so smoke
numbers never mix into GPU history.
"""

import math
import os
import subprocess
import sys

import pytest

from harness.asv_smoke import ROOT, smoke_config
from harness.device_info import SMOKE_MACHINE, register_asv_machine
from harness.report import load_values
from kernels.device import interpreter_mode

pytestmark = pytest.mark.skipif(
    interpreter_mode() or os.environ.get("KERNELS_REQUIRE_GPU") == "1",
    reason="CPU smoke of the asv suite; a GPU runner benchmarks for real",
)
SMOKE_ATTRIBUTES = ["-a", "repeat=1", "-a", "rounds=1", "-a", "number=1", "-a", "warmup_time=0"]
# Skipped by design in smoke mode (NotImplementedError): GPU-only references and metrics.
GPU_ONLY = (
    "torch_compile",
    "track_speedup_vs_compile",
    "track_pct_peak",
    "track_pct_tensor_copy",
    "bench_device",
    "Attention",
)


def asv(*args, cwd=ROOT):
    proc = subprocess.run([sys.executable, "-m", "asv", *args], cwd=cwd, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, f"asv {' '.join(args)} failed:\n{proc.stdout[-4000:]}\n{proc.stderr[-4000:]}"
    return proc.stdout


@pytest.fixture(scope="module")
def machine():
    return register_asv_machine(SMOKE_MACHINE)


def test_asv_check_discovers_the_suite(tmp_path):
    out = asv("check", "--config", str(smoke_config(tmp_path)), "-E", f"existing:{sys.executable}")
    assert "No problems found" in out


def _unexpected_gaps(values: dict) -> list[str]:
    gaps = []
    for name, by_params in values.items():
        for params, value in by_params.items():
            label = f"{name}{params}"
            skipped_by_design = any(tag in label for tag in GPU_ONLY)
            if value is None or (math.isnan(value) and not skipped_by_design):
                gaps.append(label)
    return gaps


def test_whole_suite_runs_in_the_interpreter_and_publishes(tmp_path, machine):
    conf = str(smoke_config(tmp_path))
    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True).stdout.strip()
    asv(
        "run", "--config", conf, "-E", f"existing:{sys.executable}", "--launch-method", "forkserver",
        "--machine", machine, "--set-commit-hash", commit, "--record-samples", *SMOKE_ATTRIBUTES,
    )  # fmt: skip
    values, params = load_values(tmp_path / "results", machine, commit)
    assert params["gpu_class"] == "interpreter" and params["machine"] == SMOKE_MACHINE
    assert "bench_layer_norm.LayerNorm.time_layer_norm" in values
    assert not _unexpected_gaps(values), f"benchmarks failed in smoke mode: {_unexpected_gaps(values)[:10]}"
    asv("publish", "--config", conf)
    assert (tmp_path / "html" / "index.html").exists()


def test_history_across_two_commits(tmp_path, machine):
    repo = tmp_path / "repo"
    subprocess.run(["git", "clone", "-q", str(ROOT), str(repo)], check=True)
    git = ["git", "-C", str(repo), "-c", "user.name=smoke", "-c", "user.email=smoke@example.invalid"]
    subprocess.run([*git, "commit", "-q", "--allow-empty", "-m", "second commit for the history smoke"], check=True)
    hashes = subprocess.run([*git, "rev-list", "-2", "HEAD"], capture_output=True, text=True, check=True).stdout
    (tmp_path / "hashes").write_text(hashes)

    conf = str(smoke_config(tmp_path, repo=repo, environment_type="virtualenv"))
    asv(
        "run", "--config", conf, "--machine", machine, "--launch-method", "forkserver", "--record-samples",
        "-b", r"time_layer_norm\('4096x5000', 'float32'", *SMOKE_ATTRIBUTES, f"HASHFILE:{tmp_path / 'hashes'}",
        cwd=repo,
    )  # fmt: skip
    asv("publish", "--config", conf, cwd=repo)
    for commit in hashes.split():
        values, _ = load_values(tmp_path / "results", machine, commit)
        timings = values["bench_layer_norm.LayerNorm.time_layer_norm"]
        assert any(v is not None and not math.isnan(v) for v in timings.values()), f"no timings for {commit[:8]}"
    graphs = list((tmp_path / "html" / "graphs").rglob("bench_layer_norm.LayerNorm.time_layer_norm.json"))
    assert graphs, "asv publish wrote no graph for the benchmark"
