"""kernelgate.tune.compare: each side of the A/B launches with its own table's configurations."""

import dataclasses
import json

import pytest
import torch

from kernelgate.kernels.layer_norm.config import LaunchConfig, launch_config, tuned_key, tuned_override
from kernelgate.tune.compare import compare_case, under_table


def _table(path, cfg: LaunchConfig, gpu: str):
    path.write_text(json.dumps({gpu: {tuned_key("fused", "fwd", torch.float32, 1024): dataclasses.asdict(cfg)}}))
    return path


def test_each_call_launches_with_its_tables_configuration(tmp_path):
    before = tuned_override()
    gpu = "H200"
    a, b = LaunchConfig(1, 1024, 2), LaunchConfig(4, 1024, 8, prefetch_per_sm=3)
    tables = {cfg: _table(tmp_path / f"{name}.json", cfg, gpu) for name, cfg in (("a", a), ("b", b))}

    def config():
        return launch_config("fused", "fwd", torch.float32, 1024, gpu)

    for cfg, path in tables.items():
        assert under_table(path, config)() == cfg
    assert tuned_override() == before, "the override outlived the call"
    assert config() not in tables


@pytest.mark.kernel
def test_a_case_is_timed_under_both_tables(tmp_path, kernel_device):
    tables = {name: _table(tmp_path / f"{name}.json", LaunchConfig(1, 1024, 4), "H200") for name in ("A", "B")}
    result = compare_case("4096x1024", "float32", "fwd", "fused", tables, rounds=1)
    assert result["time_ratio"] > 0
    assert set(result["pct_peak"]) == (set(tables) if kernel_device.type == "cuda" else set())
