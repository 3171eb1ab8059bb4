"""kernelgate.measure.metrics: an asv metrics class measures every selected case once, in its setup_cache, and
each benchmark reads its case; a case that failed fails its benchmarks only; `python -m
kernelgate.measure.metrics` needs no asv; the byte model behind every GB/s."""

import dataclasses
import importlib
import json
import sys

import pytest
import torch

from kernelgate.cases.layer_norm import SHAPES_GRID, LayerNormCase
from kernelgate.measure import bandwidth, references, timing
from kernelgate.measure.metrics import (
    SELECTED_ENV,
    TRACKED_ENV,
    case_key,
    case_metrics,
    measure_cases,
    measure_selected,
)


def test_every_case_is_measured_once_and_read_by_key():
    calls = []

    def measure(gbps):
        calls.append(gbps)
        return {"fused": {"gbps": gbps}}

    key = case_key("4096x4096", "float32", "fwd")
    results = measure_cases({key: lambda: measure(3000.0), "4096x5000-float32-fwd": lambda: measure(2900.0)})
    assert case_metrics(results, key) == {"fused": {"gbps": 3000.0}}
    assert case_metrics(results, "4096x5000-float32-fwd") == {"fused": {"gbps": 2900.0}}
    assert calls == [3000.0, 2900.0]


def test_a_failed_case_fails_its_benchmarks_and_no_other():
    def crash():
        raise RuntimeError("kernel crashed")

    results = measure_cases({"seed": crash, "gqa8-128-causal": lambda: {"tma": {"tflops": 200.0}}})
    with pytest.raises(RuntimeError, match="measuring seed failed: RuntimeError: kernel crashed"):
        case_metrics(results, "seed")
    assert case_metrics(results, "gqa8-128-causal") == {"tma": {"tflops": 200.0}}


def test_a_case_that_was_never_measured_is_an_error():
    with pytest.raises(KeyError, match="4096x1024-float16-bwd was not measured"):
        case_metrics({}, "4096x1024-float16-bwd")


def test_the_metrics_table_needs_no_asv(monkeypatch):
    # python -m kernelgate.measure.metrics must run on GPU images that lack asv.
    monkeypatch.setitem(sys.modules, "asv", None)  # any import of asv now raises ImportError
    monkeypatch.delitem(sys.modules, "kernelgate.report.bench", raising=False)
    report = importlib.import_module("kernelgate.report.bench")
    assert "| layer_norm/fused |" in report.markdown_table([{"kernel": "layer_norm/fused", "GB/s": 1.0}])


def test_the_byte_model_counts_each_tensor_read_or_written_once():
    case = LayerNormCase(6, 10, "bfloat16")
    x, w, b = case.make_inputs("cpu")
    stats = torch.empty(case.m, dtype=torch.float32)  # mean or rstd

    def size(*tensors):
        return sum(t.nbytes for t in tensors)

    inference = size(x, w, b, x)  # read x, w, b; write y: the fwd case saves no statistics
    backward = size(x, x, w, stats, stats, x, w, b)  # read x, dy, w, mean, rstd; write dx, dw, db
    assert case.bytes_moved("fwd") == inference
    assert case.bytes_moved("bwd") == backward
    assert case.bytes_moved("fwd+bwd") == inference + size(stats, stats) + backward


def test_a_metrics_class_measures_each_selected_case_once_with_its_selected_variants(monkeypatch):
    """The PR check asks only for the values its rules bound: no other case or variant is timed."""
    asked = []
    grid = dataclasses.replace(
        SHAPES_GRID, measure=lambda *case, variants, metrics, stored: asked.append((case, variants, metrics)) or {}
    )
    chosen = [["4096x1024", "float32", "bwd", "auto"], ["4096x1024", "float32", "fwd", "two_pass"],
              ["4096x1024", "float32", "fwd", "auto"]]  # fmt: skip
    monkeypatch.setenv(SELECTED_ENV, json.dumps(chosen))
    measured = measure_selected(grid, [*grid.params.values(), grid.variants])
    assert asked == [
        (("4096x1024", "float32", "bwd"), ["auto"], None),
        (("4096x1024", "float32", "fwd"), ["two_pass", "auto"], None),
    ]
    assert set(measured) == {"4096x1024-float32-bwd", "4096x1024-float32-fwd"}


def test_a_case_is_asked_only_for_the_metrics_its_values_are_for(monkeypatch):
    """Beside the combinations, the worker names the metric each is for: a case is measured for those alone."""
    asked = {}
    grid = dataclasses.replace(
        SHAPES_GRID, measure=lambda *case, variants, metrics, stored: asked.setdefault(case, metrics) and {}
    )
    chosen = [["4096x1024", "float32", "fwd", "auto"], ["4096x1024", "float32", "fwd", "two_pass"],
              ["4096x1024", "float32", "bwd", "auto"], ["4096x1024", "float32", "fwd", "auto"]]  # fmt: skip
    monkeypatch.setenv(SELECTED_ENV, json.dumps(chosen))
    monkeypatch.setenv(TRACKED_ENV, json.dumps(["speedup_vs_liger", "speedup_vs_torch", "pct_peak", "pct_peak"]))
    measure_selected(grid, [*grid.params.values(), grid.variants])
    assert asked == {
        ("4096x1024", "float32", "fwd"): {"speedup_vs_liger", "speedup_vs_torch", "pct_peak"},
        ("4096x1024", "float32", "bwd"): {"pct_peak"},
    }
    monkeypatch.setenv(TRACKED_ENV, json.dumps(["pct_peak"]))
    with pytest.raises(ValueError, match="names 1 metrics for 4 selected combinations"):
        measure_selected(grid, [*grid.params.values(), grid.variants])


def _timing_recorded(monkeypatch, times: dict[str, float], host_us: dict[str, float] | None = None) -> dict[str, set]:
    """bandwidth_metrics on stand-ins: each callable times ``times[name]`` ms on the device and ``host_us[name]`` us
    on the host (5 where not given); returns what was timed."""
    seen = {"timed": set(), "host": set()}
    monkeypatch.setattr(timing, "gpu_timing", lambda: True)
    monkeypatch.setattr(bandwidth, "rotations", lambda nbytes: 1)
    monkeypatch.setattr(bandwidth, "warmed", lambda fn: fn)
    monkeypatch.setattr(bandwidth, "batched", lambda fn, rotate: fn)
    monkeypatch.setattr(timing, "copy", lambda: "copy")
    monkeypatch.setattr(timing, "COPY_BYTES", 1 << 30)

    def interleaved_ms(fns):
        seen["timed"] = set(fns)
        return {name: [times[name]] * 3 for name in fns}

    def interleaved_enqueue_us(fns, calls, rounds):
        seen["host"] = set(fns)
        return {name: [(host_us or {}).get(name, 5.0)] for name in fns}

    monkeypatch.setattr(timing, "interleaved_ms", interleaved_ms)
    monkeypatch.setattr(timing, "interleaved_enqueue_us", interleaved_enqueue_us)
    return seen


@pytest.mark.parametrize(
    ("wanted", "timed", "host"),
    [
        (None, {"v", "torch", "torch_compile", "liger", "copy", "tensor_copy"}, {"v", "torch", "torch_compile"}),
        ({"speedup_vs_torch"}, {"v", "torch"}, set()),
        ({"speedup_vs_liger", "pct_peak"}, {"v", "torch", "liger", "copy"}, set()),
        ({"host_vs_compile"}, {"v", "torch", "torch_compile"}, {"v", "torch", "torch_compile"}),
        ({"pct_tensor_copy", "host_us"}, {"v", "torch", "tensor_copy"}, {"v", "torch"}),
    ],
)
def test_a_memory_bound_case_times_only_what_its_asked_metrics_need(monkeypatch, wanted, timed, host):
    """A reference, a copy or the host's cost is measured only where an asked metric reads it; eager torch, the
    baseline, always is. Every metric asked for is in the answer."""
    seen = _timing_recorded(monkeypatch, dict.fromkeys(["v", *bandwidth.REFERENCES, "copy", "tensor_copy"], 1.0))
    measured = bandwidth.bandwidth_metrics(lambda impl, rotate: impl, ["v"], 1 << 20, lambda rotate: "tensor_copy",
                                           1 << 19, wanted)  # fmt: skip
    assert seen == {"timed": timed, "host": host}
    names = {metric.name for metric in bandwidth.METRICS} if wanted is None else wanted
    assert names <= set(measured["v"]), "every metric asked for is measured"


def test_stored_reference_times_are_read_instead_of_timed(monkeypatch):
    """A reference or copy stored for this environment is not timed: the variant's values are read against the
    stored time, as they would be against a timed one, and its host metrics against a reference's stored host time
    (``references.HOST``). What was timed is returned beside the variants, for main's runs to store."""
    times = {"v": 1.0, "torch": 2.0, "torch_compile": 1.5, "liger": 3.0, "copy": 0.5, "tensor_copy": 0.25}
    host_us = {"v": 30.0, "torch": 20.0, "torch_compile": 60.0}
    seen = _timing_recorded(monkeypatch, times, host_us)
    run = lambda wanted, stored: bandwidth.bandwidth_metrics(
        lambda impl, rotate: impl, ["v"], 1 << 20, lambda rotate: "tensor_copy", 1 << 19, wanted, stored
    )
    timed_all = run(None, None)
    stored = {
        **{name: ms for name, ms in times.items() if name != "v"},
        **{references.HOST + name: us for name, us in host_us.items() if name != "v"},
    }
    assert timed_all[references.TIMES] == stored
    assert timed_all["v"]["host_vs_torch"] == pytest.approx(1.5) and timed_all["v"]["host_vs_compile"] == 0.5
    from_store = run(None, stored)
    assert seen["timed"] == {"v"} and seen["host"] == {"v"}, "only the variant is timed, on the device and the host"
    assert from_store["v"] == pytest.approx(timed_all["v"]), "the same values, read against the stored times"
    assert references.TIMES not in from_store, "nothing timed: nothing to record"
    partly = run({"speedup_vs_compile", "pct_peak", "host_vs_torch"}, {"torch_compile": 1.5})
    assert seen["timed"] == {"v", "torch", "copy"} and seen["host"] == {"v", "torch", "torch_compile"}
    assert partly["v"]["speedup_vs_compile"] == pytest.approx(1.5) and partly[references.TIMES] == {
        "torch": 2.0,
        "copy": 0.5,
        references.HOST + "torch": 20.0,
        references.HOST + "torch_compile": 60.0,
    }


def test_a_metrics_class_reads_stored_times_and_records_timed_ones(monkeypatch, tmp_path):
    """The worker's environment names a file of stored times, by case, which each case's measure is handed, and
    a file the references each case timed are appended to, under the same names."""
    asked = {}

    def measure(*case, variants, metrics, stored):
        asked[case] = stored
        return {"auto": {"gbps": 1.0}, references.TIMES: {"torch": 0.5}}

    grid = dataclasses.replace(SHAPES_GRID, measure=measure)
    monkeypatch.setenv(SELECTED_ENV, json.dumps([["4096x1024", "float32", "fwd", "auto"],
                                                 ["8192x1024", "float32", "fwd", "auto"]]))  # fmt: skip
    stored, recorded = tmp_path / "stored.json", tmp_path / "recorded.jsonl"
    stored.write_text(json.dumps({f"{grid.name}/4096x1024-float32-fwd": {"torch": 0.25}}))
    monkeypatch.setenv(references.STORED_ENV, str(stored))
    monkeypatch.setenv(references.RECORD_ENV, str(recorded))
    measure_selected(grid, [*grid.params.values(), grid.variants])
    assert asked == {("4096x1024", "float32", "fwd"): {"torch": 0.25}, ("8192x1024", "float32", "fwd"): None}
    assert references.recorded(recorded) == {
        f"{grid.name}/4096x1024-float32-fwd": {"torch": 0.5},
        f"{grid.name}/8192x1024-float32-fwd": {"torch": 0.5},
    }
