"""harness.metrics.per_run: one measurement per asv run and key, shared through the
setup_cache directory that asv makes every benchmark of the class run in."""

import pytest

from harness.metrics import per_run


def test_first_process_measures_and_the_others_read(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    calls = []

    def measure():
        calls.append(1)
        return {"fused": {"gbps": 3000.0 + len(calls)}}

    first = per_run("layer_norm-4096x4096-float32-fwd", measure)
    again = per_run("layer_norm-4096x4096-float32-fwd", measure)
    other = per_run("layer_norm-4096x5000-float32-fwd", measure)
    assert first == again == {"fused": {"gbps": 3001.0}}
    assert other == {"fused": {"gbps": 3002.0}}
    assert len(calls) == 2


def test_a_failed_measurement_leaves_nothing_behind(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)

    def crash():
        raise RuntimeError("kernel crashed")

    with pytest.raises(RuntimeError, match="kernel crashed"):
        per_run("attention-seed", crash)
    assert list(tmp_path.iterdir()) == []
    assert per_run("attention-seed", lambda: {"tma": {"tflops": 200.0}}) == {"tma": {"tflops": 200.0}}
