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
from kernelgate.measure.metrics import SELECTED_ENV, case_key, case_metrics, measure_cases, measure_selected


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
    grid = dataclasses.replace(SHAPES_GRID, measure=lambda *case, variants: asked.append((case, variants)) or {})
    chosen = [["4096x1024", "float32", "bwd", "auto"], ["4096x1024", "float32", "fwd", "two_pass"],
              ["4096x1024", "float32", "fwd", "auto"]]  # fmt: skip
    monkeypatch.setenv(SELECTED_ENV, json.dumps(chosen))
    measured = measure_selected(grid, [*grid.params.values(), grid.variants])
    assert asked == [
        (("4096x1024", "float32", "bwd"), ["auto"]),
        (("4096x1024", "float32", "fwd"), ["two_pass", "auto"]),
    ]
    assert set(measured) == {"4096x1024-float32-bwd", "4096x1024-float32-fwd"}
