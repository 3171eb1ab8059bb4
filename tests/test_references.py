"""kernelgate.measure.references: the references' times stored once per environment, and read by the PR check's
first reading of head's metrics. An entry is found only for the environment it was timed in; a change to what
defines the references is another environment; what is stored is what was recorded, and nothing else."""

import json

import pytest

from kernelgate.measure import references
from kernelgate.prcheck import check

FILES = {"kernelgate/cases/rms_norm.py": b"cases", "kernelgate/measure/timing.py": b"timing"}
GPU = {"name": "NVIDIA H200", "driver_version": "580.159.04", "clocks.applications.graphics": "1980 MHz",
       "clocks.max.sm": "1980 MHz", "clocks.max.memory": "3201 MHz", "power.limit": "700.00 W"}  # fmt: skip


@pytest.fixture()
def on_a_gpu(monkeypatch):
    monkeypatch.setattr(references, "gpu_settings", lambda: dict(GPU))


def _env(files=FILES, suite="rms_norm"):
    return references.environment(suite, files.get)


def test_the_environment_names_what_changes_the_references(on_a_gpu, monkeypatch):
    env = _env()
    assert {key: env[key] for key in GPU} == GPU and env["suite"] == "rms_norm"
    assert set(references.PACKAGES) <= set(env)
    same = _env(dict(FILES))
    assert references.key(same) == references.key(env), "the same facts, the same key"
    edited = _env({**FILES, "kernelgate/measure/timing.py": b"timing, changed"})
    other_suite = _env(suite="layer_norm")
    monkeypatch.setattr(references, "gpu_settings", lambda: {**GPU, "driver_version": "590.0"})
    other_driver = _env()
    keys = {references.key(e) for e in (env, edited, other_suite, other_driver)}
    assert len(keys) == 4, "a changed definition file, suite or driver is another environment"


def test_no_gpu_has_no_environment(monkeypatch):
    monkeypatch.setattr(references, "gpu_settings", lambda: {})
    assert _env() is None


def test_what_is_recorded_is_found_for_its_environment_only(on_a_gpu, tmp_path):
    env = _env()
    references.record(tmp_path, env, {"RMSNorm/8192x1024-bfloat16-fwd": {"torch": 0.02, "copy": 0.3}}, "c1" * 20)
    references.record(tmp_path, env, {"RMSNorm/8192x2048-bfloat16-fwd": {"torch": 0.04}}, "c2" * 20)
    entry = references.lookup(tmp_path, env)
    assert entry == {"commit": "c2" * 20, "times": {"RMSNorm/8192x1024-bfloat16-fwd": {"torch": 0.02, "copy": 0.3},
                                                   "RMSNorm/8192x2048-bfloat16-fwd": {"torch": 0.04}}}  # fmt: skip
    assert references.lookup(tmp_path, _env({**FILES, "kernelgate/cases/rms_norm.py": b"edited"})) is None


@pytest.mark.parametrize(
    "times",
    [{"c": {"torch": 0.0}}, {"c": {"torch": float("inf")}}, {"c": {"torch": "1"}}, {"c": {"torch": True}}, {"c": 1}],
    ids=["zero", "inf", "a string", "a bool", "not a table"],
)
def test_a_time_that_is_not_one_is_never_stored_nor_read(on_a_gpu, tmp_path, times):
    env = _env()
    path = references.record(tmp_path, env, times, "c" * 40)
    assert references.lookup(tmp_path, env)["times"] == {}
    path.write_text(json.dumps({"environment": env, "commit": "c" * 40, "times": times}))
    assert references.lookup(tmp_path, env)["times"] == {}, "a hand-edited entry is filtered alike"


def test_an_entry_of_another_environment_under_this_key_is_not_read(on_a_gpu, tmp_path):
    env = _env()
    path = references.record(tmp_path, env, {"c": {"torch": 1.0}}, "c" * 40)
    path.write_text(json.dumps({"environment": {**env, "torch": "other"}, "times": {"c": {"torch": 1.0}}}))
    assert references.lookup(tmp_path, env) is None
    path.write_text("not json")
    assert references.lookup(tmp_path, env) is None


def test_a_workers_recorded_lines_are_read_back(tmp_path):
    path = tmp_path / "times.jsonl"
    path.write_text('["RMSNorm/a", {"torch": 1.0}]\n["RMSNorm/b", {"liger": 2.0}]\n')
    assert references.recorded(path) == {"RMSNorm/a": {"torch": 1.0}, "RMSNorm/b": {"liger": 2.0}}
    assert references.recorded(tmp_path / "missing.jsonl") == {}


def test_the_check_hands_head_the_stored_times_of_its_metrics_cases(on_a_gpu, tmp_path):
    """The check looks head's environment up from head's own tree (what defines its references), hands head's
    worker the times of the metrics cases it measures in a file head may read, and says what it found."""
    from kernelgate.asv_case import Case

    tree = tmp_path / "head"
    for path, content in FILES.items():
        (tree / path).parent.mkdir(parents=True, exist_ok=True)
        (tree / path).write_bytes(content)
    store = tmp_path / "store"
    env = _env()
    references.record(store, env, {"RMSNorm/8192x1024-bfloat16-fwd": {"torch": 0.02},
                                   "RMSNorm/8192x4096-bfloat16-fwd": {"torch": 0.07}}, "f" * 40)  # fmt: skip
    values = (("shape", "'8192x1024'"), ("dtype", "'bfloat16'"), ("direction", "'fwd'"), ("variant", "'auto'"))
    cases = [Case("bench_rms_norm.RMSNormMetrics.track_speedup_vs_torch", values),
             Case("bench_rms_norm.RMSNormMetrics.track_speedup_vs_torch", (*values[:3], ("variant", "'two'"))),
             Case("bench_rms_norm.RMSNormMetrics.track_gbps", (("shape", "'8192x2048'"), *values[1:])),
             Case("bench_rms_norm.RMSNorm.time_rms_norm", values)]  # fmt: skip
    plan = check.Plan("a" * 40, "b" * 40, {}, ["rms_norm"], {}, (1, 1), [], [], sides={"head": {"tree": str(tree)}})
    out = tmp_path / "out"
    path = check.stored_references(plan, out, cases, store)
    assert json.loads(path.read_text()) == {"RMSNorm/8192x1024-bfloat16-fwd": {"torch": 0.02}}
    assert path.stat().st_mode & 0o777 == 0o644
    assert plan.references == {"rms_norm": {"key": references.key(env), "cases": 2, "stored": 1, "commit": "f" * 40}}
    (tree / "kernelgate/cases/rms_norm.py").write_bytes(b"head changed its references")
    assert check.stored_references(plan, out, cases, store) is None, "another definition: nothing stored"
    assert plan.references["rms_norm"]["stored"] == 0
