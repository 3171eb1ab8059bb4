"""The perf gate on synthetic asv results: each verdict is checked by its exit code and its named reason.

Result files are written by asv's own ``Results`` class (and read back by
asv's loader in the first test), so they have exactly asv 0.6.6's format.
"""

import dataclasses
import datetime
import functools
import itertools
import json
import random
import re
import statistics
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest
from asv import util
from asv.benchmarks import Benchmarks
from asv.machine import Machine
from asv.results import Results, iter_results_for_machine_and_hash
from asv.runner import BenchmarkResult

from kernelgate.gate.__main__ import main
from kernelgate.gate.asv_results import Case
from kernelgate.gate.junit import GPU_SKIP_MARKER
from kernelgate.gate.thresholds import load_thresholds

ROOT = Path(__file__).resolve().parents[1]
MACHINE = "h200-runner-1"
H200 = {"gpu": "NVIDIA H200", "gpu_class": "H200"}
BASE, HEAD = "1" * 40, "2" * 40

LN_TIME = "bench_layer_norm.LayerNorm.time_layer_norm"
LN_SPEEDUP = "bench_layer_norm.LayerNormMetrics.track_speedup_vs_torch"
ATT_TIME = "bench_attention.AttentionBackward.time_backward"


@dataclasses.dataclass(frozen=True)
class Bench:
    params: dict[str, list[str]]  # name -> values, in declared order
    unit: str

    def cases(self, name: str) -> list[Case]:
        grid = [[repr(v) for v in values] for values in self.params.values()]
        return [Case(name, tuple(zip(self.params, combo, strict=True))) for combo in itertools.product(*grid)]


# Lists every benchmark of the suite with its declared parameters and unit, the way asv
# discovers them. A subprocess: importing the suite sets TRITON_INTERPRET on a CPU machine.
_DISCOVER = """
import importlib, inspect, json, pkgutil, benchmarks
space = {}
for mod in pkgutil.iter_modules(benchmarks.__path__):
    module = importlib.import_module(f"benchmarks.{mod.name}")
    for cls_name, cls in inspect.getmembers(module, inspect.isclass):
        if cls.__module__ != module.__name__ or cls_name.startswith("_"):
            continue
        for name, fn in inspect.getmembers(cls, inspect.isfunction):
            if name.startswith(("time_", "track_")):
                params = dict(zip(getattr(cls, "param_names", []), getattr(cls, "params", [])))
                unit = getattr(fn, "unit", "seconds" if name.startswith("time_") else "unit")
                space[f"{mod.name}.{cls_name}.{name}"] = [params, unit]
print(json.dumps(space))
"""


@functools.cache
def suite_space() -> dict[str, Bench]:
    """The benchmark name/parameter space of benchmarks/ as declared."""
    out = subprocess.run([sys.executable, "-c", _DISCOVER], capture_output=True, text=True, check=True, cwd=ROOT)
    return {name: Bench(params, unit) for name, (params, unit) in json.loads(out.stdout).items()}


SMALL_SPACE = {
    LN_TIME: Bench(
        {
            "shape": ["4096x4096", "4096x5000"],
            "dtype": ["float32"],
            "direction": ["fwd"],
            "impl": ["two_pass", "torch"],
        },
        "seconds",
    ),
    LN_SPEEDUP: Bench(
        {"shape": ["4096x4096", "4096x5000"], "dtype": ["float32"], "direction": ["fwd"], "variant": ["two_pass"]}, "x"
    ),
    ATT_TIME: Bench({"config": ["seed-gqa-192-128-causal"], "impl": ["elem", "region", "tma"]}, "seconds"),
}

SMALL_THRESHOLDS = f"""
[defaults]
max_slowdown = 0.05

[[rule]]
why = "the two-pass floor"
benchmark = "{LN_SPEEDUP}"
params = {{ variant = "two_pass", direction = "fwd" }}
gpu_class = ["H100", "H200"]
min = 1.16

[[rule]]
why = "TMA-reduce must stay the fastest"
benchmark = "{ATT_TIME}"
params = {{ impl = "tma" }}
not_slower_than = {{ impl = ["region", "elem"] }}
"""

ATTENTION_MS = {"elem": 0.88, "region": 0.99, "tma": 0.84, "fa2_varlen": 0.9, "cudnn_sdpa": 0.5}  # FACTS.md, H200
# A healthy H200 run: each value clears every floor (the LayerNorm backward floor is 1.30x eager torch).
HEALTHY_TRACKED = {"x": 1.5, "GB/s": 3000.0, "%": 92.0, "TFLOP/s": 217.0, "us": 50.0}


def samples(median: float, seed: object, spread: float = 0.005, n: int = 10) -> list[float]:
    """n timings within +-spread of median: steady, as a quiet runner gives."""
    rng = random.Random(str(seed))
    return [median * (1 + rng.uniform(-spread, spread)) for _ in range(n)]


def healthy(case: Case, unit: str, commit: str):
    if unit == "seconds":
        return samples(ATTENTION_MS.get(case.value("impl"), 1.0) * 1e-3, (case, commit))
    return HEALTHY_TRACKED[unit]


def write_results(root: Path, commit: str, space: dict[str, Bench], changes=None, machine=MACHINE, gpu=H200):
    """asv's results for ``commit`` on ``machine``: healthy values unless ``changes`` ({Case: value}) says otherwise.

    A value is a list of samples (time_*), a number (track_*), None (failed) or NaN (skipped).
    """
    changes = changes or {}
    params = {"machine": machine, **gpu, "python": "3.12", "cpu": "synthetic", "os": "Linux"}
    date = util.datetime_to_js_timestamp(datetime.datetime(2026, 11, 21, tzinfo=datetime.UTC))
    results = Results(params, {}, commit, date, "3.12", "virtualenv-py3.12", {})
    for name, bench in space.items():
        values = [changes.get(case, healthy(case, bench.unit, commit)) for case in bench.cases(name)]
        sampled = [v if isinstance(v, list) else None for v in values]
        result = BenchmarkResult(
            result=[statistics.median(v) if isinstance(v, list) else v for v in values],
            samples=sampled,
            number=[1 if s else None for s in sampled],
            errcode=0,
            stderr="",
            profile=None,
        )
        grid = [[repr(v) for v in values] for values in bench.params.values()]
        results.add_result({"name": name, "version": "1", "params": grid}, result, record_samples=True)
    results.save(str(root))
    util.write_json(str(root / machine / "machine.json"), {"machine": machine, **gpu}, api_version=Machine.api_version)
    described = {
        name: {
            "name": name,
            "param_names": list(b.params),
            "params": [[repr(v) for v in vs] for vs in b.params.values()],
        }
        | {"unit": b.unit, "type": "time" if b.unit == "seconds" else "track", "version": "1"}
        for name, b in space.items()
    }
    util.write_json(Benchmarks.get_benchmark_file_path(str(root)), described, api_version=Benchmarks.api_version)


PASSING_JUNIT = """<?xml version="1.0" encoding="utf-8"?>
<testsuites><testsuite name="pytest" tests="2" failures="0" errors="0" skipped="0">
<testcase classname="tests.test_layer_norm" name="test_forward[4096x5000-float32]" time="0.1"/>
<testcase classname="tests.test_layer_norm_device" name="test_gpu[two_pass]" time="0.1"/>
</testsuite></testsuites>
"""


@dataclasses.dataclass
class Gate:
    """One gate invocation's inputs in a temporary folder."""

    root: Path

    @property
    def results(self) -> Path:
        return self.root / "results"

    @property
    def out(self) -> Path:
        return self.root / "out"

    def write(self, base=None, head=None, space=SMALL_SPACE, head_gpu=H200) -> None:
        write_results(self.results, BASE, space, base)
        write_results(self.results, HEAD, space, head, gpu=head_gpu)

    def run(self, *extra: str, junit: str | None = PASSING_JUNIT, thresholds: str = SMALL_THRESHOLDS):
        """(exit code, verdict.json) of ``python -m kernelgate.gate``."""
        (self.root / "thresholds.toml").write_text(thresholds)
        args = ["--base", BASE, "--head", HEAD, "--machine", MACHINE, "--results-dir", str(self.results)]
        args += ["--thresholds", str(self.root / "thresholds.toml"), "--out", str(self.out)]
        if junit is not None:
            (self.root / "junit.xml").write_text(junit)
            args += ["--junit", str(self.root / "junit.xml")]
        code = main([*args, *(extra or ["--no-confirm"])])
        return code, json.loads((self.out / "verdict.json").read_text())


@pytest.fixture
def gate(tmp_path) -> Gate:
    return Gate(tmp_path)


def ln_case(name: str, shape: str, last: str) -> Case:
    last_name = "impl" if name == LN_TIME else "variant"
    values = {"shape": shape, "dtype": "float32", "direction": "fwd", last_name: last}
    return Case(name, tuple((k, repr(v)) for k, v in values.items()))


TWO_PASS_TIME = ln_case(LN_TIME, "4096x5000", "two_pass")
TWO_PASS_SPEEDUP = ln_case(LN_SPEEDUP, "4096x4096", "two_pass")
TMA_TIME = Case(ATT_TIME, (("config", "'seed-gqa-192-128-causal'"), ("impl", "'tma'")))


def failed(verdict: dict, check: str) -> list[dict]:
    return [f for f in verdict["findings"] if f["check"] == check and f["verdict"] == "fail"]


# --- the fixture factory writes what asv reads ---------------------------------


def test_synthetic_results_load_with_asvs_own_loader(gate):
    gate.write(head={TWO_PASS_TIME: samples(2e-3, "slow")})
    (loaded,) = iter_results_for_machine_and_hash(str(gate.results), MACHINE, HEAD[:8])
    grid = loaded.get_result_params(LN_TIME)
    index = [Case(LN_TIME, tuple(zip(SMALL_SPACE[LN_TIME].params, c, strict=True))) for c in itertools.product(*grid)]
    at = index.index(TWO_PASS_TIME)
    assert loaded.params["gpu"] == "NVIDIA H200"
    assert len(loaded.get_result_samples(LN_TIME, grid)[at]) == 10
    assert loaded.get_result_value(LN_TIME, grid)[at] == pytest.approx(2e-3, rel=0.01)
    assert loaded.get_result_stats(LN_TIME, grid)[at]["repeat"] == 10


# --- verdicts --------------------------------------------------------------------


def test_clean_pass(gate, capsys, monkeypatch):
    monkeypatch.setenv("GITHUB_STEP_SUMMARY", str(gate.root / "summary.md"))
    gate.write()
    code, verdict = gate.run()
    assert (code, verdict["passed"], verdict["error"]) == (0, True, None)
    assert {f["check"] for f in verdict["findings"]} >= {"tests", "floor", "slowdown", "order"}
    assert "## Perf gate ✅ passed" in capsys.readouterr().out
    assert (gate.root / "summary.md").read_text() == (gate.out / "report.md").read_text()
    assert (gate.out / "ratios.png").stat().st_size > 0


def test_floor_breach(gate):
    gate.write(head={TWO_PASS_SPEEDUP: 1.10})
    code, verdict = gate.run()
    (breach,) = failed(verdict, "floor")
    assert code == 1
    assert (breach["case"], breach["head"], breach["limit"]) == ("4096x4096, float32, fwd, two_pass", 1.10, "≥ 1.16")
    assert "< floor 1.16" in breach["reason"]


def test_relative_regression_beyond_the_limit(gate):
    gate.write(head={TWO_PASS_TIME: samples(1.10e-3, "slow")})
    code, verdict = gate.run()
    (regression,) = failed(verdict, "slowdown")
    assert code == 1
    assert regression["ratio"] == pytest.approx(1.10, abs=0.01)
    assert "beyond +5%" in regression["reason"]


@pytest.mark.parametrize(
    "head_samples",
    [
        pytest.param(samples(1.03e-3, "slower"), id="significant-but-within-limit"),
        pytest.param(samples(1.08e-3, "noisy", spread=0.5), id="beyond-limit-but-not-significant"),
    ],
)
def test_noise_within_the_limit_passes(gate, head_samples):
    gate.write(head={TWO_PASS_TIME: head_samples})
    code, verdict = gate.run()
    (row,) = [f for f in verdict["findings"] if f["check"] == "slowdown" and f["case"] == TWO_PASS_TIME.label]
    assert code == 0, verdict
    assert "within +5%" in row["reason"]


def test_order_rule_breach(gate):
    gate.write(head={TMA_TIME: samples(0.95e-3, "tma-slower")})
    code, verdict = gate.run()
    (breach,) = failed(verdict, "order")
    assert code == 1
    assert breach["limit"] == "not slower than (seed-gqa-192-128-causal, elem)"


def test_missing_benchmark_and_case(gate):
    head_space = {name: bench for name, bench in SMALL_SPACE.items() if name != ATT_TIME}
    shrunk = dataclasses.replace(
        SMALL_SPACE[LN_SPEEDUP], params={**SMALL_SPACE[LN_SPEEDUP].params, "shape": ["4096x4096"]}
    )
    write_results(gate.results, BASE, SMALL_SPACE)
    write_results(gate.results, HEAD, {**head_space, LN_SPEEDUP: shrunk})
    code, verdict = gate.run()
    missing = {(f["benchmark"], f["case"]) for f in failed(verdict, "missing")}
    assert code == 1
    assert missing == {(ATT_TIME, "all cases"), (LN_SPEEDUP, "4096x5000, float32, fwd, two_pass")}
    assert all(f["reason"] == "present in base, missing in head" for f in failed(verdict, "missing"))


@pytest.mark.parametrize(("value", "reason"), [(None, "failed or timed out"), (float("nan"), "NaN")])
def test_failed_benchmark(gate, value, reason):
    gate.write(head={TWO_PASS_SPEEDUP: value})
    code, verdict = gate.run()
    (crash,) = failed(verdict, "crashed")
    assert code == 1
    assert reason in crash["reason"]


def test_nothing_compared_is_never_green(gate):
    nan_at_base = {case: float("nan") for name in (LN_TIME, ATT_TIME) for case in SMALL_SPACE[name].cases(name)}
    gate.write(base=nan_at_base)
    code, verdict = gate.run()
    assert code == 1
    assert "nothing was compared" in failed(verdict, "gate")[0]["reason"]


# --- fail closed: the gate cannot evaluate -----------------------------------------


def test_machine_mismatch_gpu(gate):
    gate.write(head_gpu={"gpu": "NVIDIA H100 80GB HBM3", "gpu_class": "H100"})
    code, verdict = gate.run()
    assert code == 2
    assert "different machines: base gpu='NVIDIA H200', head gpu='NVIDIA H100 80GB HBM3'" in verdict["error"]


def test_machine_mismatch_name(gate):
    gate.write()
    write_results(gate.results, HEAD, SMALL_SPACE, machine="h200-runner-2")
    theirs = next((gate.results / "h200-runner-2").glob("2*.json"))
    theirs.replace(next((gate.results / MACHINE).glob("2*.json")))
    code, verdict = gate.run()
    assert code == 2
    assert f"machine name is not '{MACHINE}'" in verdict["error"]


def test_corrupted_json(gate):
    gate.write()
    head_file = next((gate.results / MACHINE).glob(f"{HEAD[:8]}-*.json"))
    head_file.write_text(head_file.read_text()[:200])
    code, verdict = gate.run()
    assert code == 2
    assert "Error parsing JSON" in verdict["error"]


def test_empty_results_directory(gate):
    gate.results.mkdir()
    code, verdict = gate.run()
    assert code == 2
    assert f"no results for machine '{MACHINE}'" in verdict["error"]


def test_unmatched_threshold_entry(gate):
    gate.write()
    typo = f'\n[[rule]]\nwhy = "typo"\nbenchmark = "{LN_SPEEDUP}"\nparams = {{ variant = "two-pass" }}\nmin = 1.0\n'
    code, verdict = gate.run(thresholds=SMALL_THRESHOLDS + typo)
    (error,) = failed(verdict, "config")
    assert code == 1
    assert error["reason"] == f"rule #3 ({LN_SPEEDUP} [variant=two-pass]) matches no benchmark case"


@pytest.mark.parametrize(
    ("toml", "reason"),
    [
        ("[defaults\nmax_slowdown = 0.05\n", "is not valid TOML"),
        ('[defaults]\nmax_slowdown = 0.05\n[[rule]]\nwhy = "x"\nbenchmark = "*"\nmni = 1.0\n', "unknown keys ['mni']"),
        ('[defaults]\nmax_slowdown = 0.05\n[[rule]]\nwhy = "x"\nbenchmark = "*"\n', "declares no check"),
        ("[[rule]]\n", "needs [defaults]"),
    ],
)
def test_bad_thresholds_file(gate, toml, reason):
    gate.write()
    code, verdict = gate.run(thresholds=toml)
    assert code == 2
    assert reason in verdict["error"]


# --- correctness -------------------------------------------------------------------


@pytest.mark.parametrize(
    ("junit", "reason"),
    [
        (None, "no JUnit XML given"),
        ("", "JUnit XML unreadable"),
        ('<testsuite name="pytest" tests="0"/>', "holds no test case"),
        (
            PASSING_JUNIT.replace('time="0.1"/>', 'time="0.1"><failure message="assert">x</failure></testcase>', 1),
            "1 of 2 tests failed or errored: tests.test_layer_norm::test_forward[4096x5000-float32]",
        ),
        (
            PASSING_JUNIT.replace(
                'time="0.1"/>\n</testsuite>', 'time="0.1"><skipped message="NO GPU: x"/></testcase>\n</testsuite>'
            ),
            "1 GPU tests skipped",
        ),
    ],
    ids=["not-given", "empty-file", "no-tests", "failure", "gpu-skipped"],
)
def test_tests_missing_or_failed(gate, junit, reason):
    gate.write()
    code, verdict = gate.run(junit=junit)
    (red,) = failed(verdict, "tests")
    assert code == 1
    assert reason in red["reason"]


def test_junit_file_missing(gate):
    gate.write()
    code, verdict = gate.run("--junit", str(gate.root / "never-written.xml"), "--no-confirm", junit=None)
    assert code == 1
    assert "JUnit XML missing" in failed(verdict, "tests")[0]["reason"]


def test_gpu_skip_marker_matches_conftest():
    from conftest import NO_GPU_REASON

    assert NO_GPU_REASON.startswith(GPU_SKIP_MARKER)


# --- confirmation: suspects are re-measured, only persistent regressions fail ------

FAKE_ASV_RUN = textwrap.dedent(
    """
    # Stands in for `asv run --append-samples --bench REGEX COMMIT^!`: appends the samples
    # of fresh.json[commit][case] to the selected cases, through asv's own Results.add_result.
    import itertools, json, re, statistics, sys
    from pathlib import Path
    from asv.results import Results
    from asv.runner import BenchmarkResult

    fresh_json, results_dir, log, machine, commit, regex = sys.argv[1:]
    fresh = json.loads(Path(fresh_json).read_text())[commit]
    with open(log, "a") as fh:
        fh.write(json.dumps([commit, regex]) + "\\n")
    (path,) = Path(results_dir, machine).glob(commit[:8] + "-*.json")
    results = Results.load(str(path))
    for name in list(results.get_all_result_keys()):
        grid = results.get_result_params(name)
        ids = [f"{name}({', '.join(combo)})" for combo in itertools.product(*grid)]
        chosen = {i for i, case_id in enumerate(ids) if re.search(regex, case_id)}
        if chosen:
            new = [fresh[case_id] if i in chosen else None for i, case_id in enumerate(ids)]
            result = BenchmarkResult(
                result=[statistics.median(s) if s else None for s in new], samples=new,
                number=[1 if s else None for s in new], errcode=0, stderr="", profile=None,
            )
            benchmark = {"name": name, "version": "1", "params": grid}
            results.add_result(benchmark, result, append_samples=True, record_samples=True, selected_idx=chosen)
    results.save(results_dir)
    """
)


def confirm_cmd(gate: Gate, fresh: dict[str, dict[Case, list[float]]]) -> str:
    (gate.root / "fresh.json").write_text(
        json.dumps({commit: {case.asv_id: s for case, s in by_case.items()} for commit, by_case in fresh.items()})
    )
    (gate.root / "fake_asv_run.py").write_text(FAKE_ASV_RUN)
    paths = [gate.root / "fake_asv_run.py", gate.root / "fresh.json", gate.results, gate.root / "remeasured.log"]
    return " ".join([sys.executable, *map(str, paths), "{machine}", "{commit}", "{regex}"])


def test_confirmation_clears_noise_and_keeps_a_real_regression(gate):
    noisy, real = TWO_PASS_TIME, ln_case(LN_TIME, "4096x4096", "two_pass")
    gate.write(head={noisy: samples(1.10e-3, "burst"), real: samples(1.10e-3, "real")})
    fresh = {
        BASE: {case: samples(1e-3, ("base-again", case), n=20) for case in (noisy, real)},
        HEAD: {noisy: samples(1e-3, "quiet-again", n=20), real: samples(1.10e-3, "real-again", n=20)},
    }
    code, verdict = gate.run("--confirm-cmd", confirm_cmd(gate, fresh))
    rows = {f["case"]: f for f in verdict["findings"] if f["check"] == "slowdown"}
    remeasured = [json.loads(line) for line in (gate.root / "remeasured.log").read_text().splitlines()]
    assert code == 1
    assert rows[noisy.label]["verdict"] == "cleared" and "cleared by re-measurement" in rows[noisy.label]["reason"]
    assert rows[real.label]["verdict"] == "fail" and "persisted after re-measurement" in rows[real.label]["reason"]
    assert [commit for commit, _ in remeasured] == [BASE, HEAD]
    for _, regex in remeasured:  # the suspects, and only they, were re-run
        assert re.fullmatch(regex, noisy.asv_id) and re.fullmatch(regex, real.asv_id)
        assert not re.fullmatch(regex, ln_case(LN_TIME, "4096x5000", "torch").asv_id)


def test_confirmation_of_noise_only_passes(gate):
    gate.write(head={TWO_PASS_TIME: samples(1.10e-3, "burst")})
    fresh = {BASE: {TWO_PASS_TIME: samples(1e-3, "b", n=20)}, HEAD: {TWO_PASS_TIME: samples(1e-3, "h", n=20)}}
    code, verdict = gate.run("--confirm-cmd", confirm_cmd(gate, fresh))
    assert code == 0, verdict
    (row,) = [f for f in verdict["findings"] if f["check"] == "slowdown" and f["case"] == TWO_PASS_TIME.label]
    assert row["verdict"] == "cleared"


def test_failed_remeasurement_fails_closed(gate):
    gate.write(head={TWO_PASS_TIME: samples(1.10e-3, "burst")})
    code, verdict = gate.run("--confirm-cmd", f"{sys.executable} -c 'raise SystemExit(3)'")
    assert code == 2
    assert "re-measurement of the base commit failed" in verdict["error"]


# --- the real perf-thresholds.toml ---------------------------------------------------


def test_real_thresholds_match_the_benchmark_space():
    thresholds = load_thresholds(ROOT / "perf-thresholds.toml")
    cases = [case for name, bench in suite_space().items() for case in bench.cases(name)]
    assert [rule.label for rule in thresholds.unmatched(cases)] == []
    assert any(rule.min == 1.16 and not rule.informational for rule in thresholds.rules)


def test_real_thresholds_pass_a_healthy_h200_run(gate):
    space = suite_space()
    not_applicable = {  # no FA2 at d_qk != d_v: asv records the skipped combinations as NaN
        case: float("nan")
        for name in (ATT_TIME, "bench_attention.AttentionBackwardMetrics.track_speedup_vs_fa2")
        for case in space[name].cases(name)
        if case.value("config") == "seed-gqa-192-128-causal" and case.value("impl") in (None, "fa2_varlen")
    }
    gate.write(base=not_applicable, head=not_applicable, space=space)
    code, verdict = gate.run(thresholds=(ROOT / "perf-thresholds.toml").read_text())
    assert code == 0, [f for f in verdict["findings"] if f["verdict"] != "pass"][:5]
    assert {f["check"] for f in verdict["findings"]} == {"tests", "floor", "slowdown", "order"}


# --- judging a --bench subset ------------------------------------------------------


def test_bench_selection_judges_only_the_selected_cases(gate):
    # Outside the selection a case crashed and a floor is breached: neither is judged.
    gate.write(head={ln_case(LN_TIME, "4096x4096", "torch"): None, TWO_PASS_SPEEDUP: 1.10})
    code, verdict = gate.run("--no-confirm", "--bench", r"time_layer_norm\('4096x5000'", "--bench", "AttentionBackward")
    assert (code, verdict["passed"]) == (0, True), failed(verdict, "crashed") + failed(verdict, "floor")
    assert {f["case"] for f in verdict["findings"] if f["check"] == "slowdown"} >= {TWO_PASS_TIME.label}


def test_bench_selection_still_fails_closed(gate):
    gate.write(head={TWO_PASS_TIME: None})
    code, verdict = gate.run("--no-confirm", "--bench", r"time_layer_norm\('4096x5000'")
    assert code == 1 and failed(verdict, "crashed")
    code, verdict = gate.run("--no-confirm", "--bench", "no_such_benchmark")
    assert code == 2 and "selects no benchmark case" in verdict["error"]
