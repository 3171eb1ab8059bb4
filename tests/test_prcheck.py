"""The PR check's machinery without a GPU: what a change selects, how cases split into shards, the
worker protocol and the interleaved measurement on a small asv suite, the result files, and the
merge that fails closed."""

import dataclasses
import itertools
import json
import math
import os
import re
import shutil
import subprocess
import sys
import tempfile
import typing
from pathlib import Path

import pytest
from asv.results import Results
from support import fake_suite, split
from support.shards import JUNIT, S1, S2, THRESHOLDS, ShardRun, commit, group_map, timing_record

from kernelgate.asv_case import Case
from kernelgate.cases import SUITES
from kernelgate.kernels.device import interpreter_mode
from kernelgate.measure import parallel, results, workers
from kernelgate.measure import shards as sharding
from kernelgate.measure.steps import Steps
from kernelgate.prcheck import check, environments, isolation, selection

ROOT = Path(__file__).parents[1]
EVERY_GROUP = tuple(suite.name for suite in SUITES)  # pr-check.toml's groups, in its order (tests/test_suites.py)

pytestmark = pytest.mark.skipif(interpreter_mode(), reason="runs in the compiled pytest process")


# --- selection -----------------------------------------------------------------------------------


@pytest.fixture(scope="module")
def groups():
    return selection.load(ROOT / "pr-check.toml")


@pytest.mark.parametrize(
    ("changed", "expected"),
    [
        (["kernels/layer_norm/ops.py"], ("layer_norm", "rms_norm")),  # the RMSNorm runs the LayerNorm's column sum
        (["kernels/rms_norm/ops.py", "kernelgate/cases/rms_norm.py"], ("rms_norm",)),
        (["kernels/attention/tilelang_kernels.py", "docs/measuring.md"], ("attention",)),
        (["kernels/layer_norm/config.py", "kernels/attention/ops.py"], ("layer_norm", "attention", "rms_norm")),
        (["kernelgate/measure/timing.py"], EVERY_GROUP),  # the harness: everything
        (["kernelgate/suite.py", "kernelgate/cases/common.py", "kernels/launch.py"], EVERY_GROUP),
        (["kernelgate/tune/space.py", "kernelgate/cases/layer_norm.py"], ("layer_norm",)),  # one kernel's own
        (["kernelgate/tune/attention.py"], ("attention",)),
        (["kernelgate/a_new_module.py"], EVERY_GROUP),  # unknown: fails safe
        (["requirements/runner.txt"], EVERY_GROUP),
        (["a_new_top_level_file.py"], EVERY_GROUP),  # unknown: fails safe
        (["README.md", "docs/gate.md", ".github/workflows/cpu.yml"], ()),
    ],
)
def test_changed_paths_select_groups(groups, changed, expected):
    assert selection.select(groups, changed).groups == expected


def test_the_report_says_why_a_group_runs(groups):
    chosen = selection.select(groups, ["kernels/layer_norm/ops.py", "pyproject.toml"])
    assert chosen.reasons["layer_norm"] == ["kernels/layer_norm/ops.py", "pyproject.toml (affects every group)"]
    assert chosen.reasons["attention"] == ["pyproject.toml (affects every group)"]


def test_a_full_run_selects_every_group(groups):
    chosen = selection.select(groups, [], full="label full-suite")
    assert chosen.groups == EVERY_GROUP and all(chosen.reasons[g] == ["label full-suite"] for g in EVERY_GROUP)


def _commit(repo: Path, files: dict[str, str], message: str) -> str:
    for name, text in files.items():
        (repo / name).parent.mkdir(parents=True, exist_ok=True)
        (repo / name).write_text(text)
    ident = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
    for argv in (["add", "-A"], [*ident, "commit", "-qm", message], ["rev-parse", "HEAD"]):
        out = subprocess.run(["git", *argv], cwd=repo, capture_output=True, text=True, check=True).stdout
    return out.strip()


@pytest.fixture()
def history(tmp_path, monkeypatch):
    """A repository whose base commit holds the project's judging files; heads change a doc or a kernel."""
    repo = tmp_path / "repo"
    repo.mkdir()
    subprocess.run(["git", "init", "-q", "-b", "main"], cwd=repo, check=True)
    trusted = {name: (ROOT / name).read_text() for name in check.TRUSTED_FILES}
    base = _commit(repo, {**trusted, "kernels/layer_norm/ops.py": "x = 1\n"}, "base")
    docs = _commit(repo, {"docs/guide.md": "words\n"}, "a documentation change")
    kernel = _commit(repo, {"kernels/layer_norm/ops.py": "x = 2\n"}, "a kernel change")
    monkeypatch.chdir(repo)
    return base, docs, kernel


def test_the_selection_alone_passes_a_change_that_selects_nothing(history, tmp_path):
    from kernelgate.prcheck.__main__ import main as prcheck_main

    base, docs, kernel = history
    out = tmp_path / "docs-only"
    assert prcheck_main(["select", "--base", base, "--head", docs, "--out", str(out)]) == 0
    assert json.loads((out / "selection.json").read_text()) == {"base": base, "head": docs, "groups": []}
    assert json.loads((out / "gate" / "verdict.json").read_text())["passed"] is True
    assert "PR check ✅ passed" in (out / "report.md").read_text()

    out = tmp_path / "kernel"
    assert prcheck_main(["select", "--base", docs, "--head", kernel, "--out", str(out)]) == 0
    chosen = ["layer_norm", "rms_norm"]  # the RMSNorm runs the LayerNorm's column sum
    assert json.loads((out / "selection.json").read_text())["groups"] == chosen
    assert not (out / "gate" / "verdict.json").exists(), "a selected group's verdict is the GPU check's"
    groups = selection.load(ROOT / "pr-check.toml").groups
    assert check.Plan.load(out).tests == [test for name in chosen for test in groups[name].tests]


def test_recorded_spreads_are_read_from_base_where_it_has_them(history, tmp_path):
    """perf-noise.json is read from base, as the thresholds are; a base without one judges without resolutions."""
    base, _, kernel = history
    check.write_trusted(base, kernel, tmp_path / "none")
    assert not (tmp_path / "none" / check.TRUSTED / check.NOISE_FILE).exists()
    spreads = '{"H200": {"checks": 2, "cases": {}}}\n'
    noisy = _commit(Path.cwd(), {check.NOISE_FILE: spreads}, "the A/A spreads")
    check.write_trusted(noisy, kernel, tmp_path / "some")
    assert (tmp_path / "some" / check.TRUSTED / check.NOISE_FILE).read_text() == spreads


@pytest.mark.parametrize("head", ["0" * 40, "base"], ids=["unknown commit", "base itself"])
def test_the_selection_fails_closed_on_commits_it_cannot_compare(history, tmp_path, head):
    from kernelgate.prcheck.__main__ import main as prcheck_main

    base, _, _ = history
    out = tmp_path / "bad"
    assert prcheck_main(["select", "--base", base, "--head", base if head == "base" else head, "--out", str(out)]) == 2
    assert not (out / "selection.json").exists(), "no selection to act on"
    assert json.loads((out / "gate" / "verdict.json").read_text())["passed"] is False


def test_every_group_names_tests_and_benchmarks_that_exist(groups):
    for group in groups.groups.values():
        for path in group.tests:
            assert (ROOT / path).exists(), f"{group.name}: {path}"
        assert group.benchmarks, group.name


@pytest.mark.parametrize("text", ["[group.x]\npaths = 'kernels/**'\n", "[group.x]\nsuite = []\n", "nothing = 1\n", ""])
def test_a_malformed_group_map_is_refused(tmp_path, text):
    path = tmp_path / "pr-check.toml"
    path.write_text(text)
    with pytest.raises(selection.SelectionError):
        selection.load(path)


# --- shards --------------------------------------------------------------------------------------


def _cases() -> list[Case]:
    grid = {"param_names": ["s", "v"], "params": [["'s1'", "'s2'", "'s3'"], ["'v1'", "'v2'"]]}
    suite = {
        "bench_a.A.time_x": {"type": "time", **grid},
        "bench_a.AMetrics.track_p": {"type": "track", **grid},
        "bench_a.AMetrics.track_q": {"type": "track", **grid},
        "bench_b.B.time_y": {"type": "time", "param_names": [], "params": []},
        "bench_b.B.peakmem_z": {"type": "peakmem", "param_names": [], "params": []},
    }
    return workers.measured_cases(suite)


def test_suite_cases_number_combinations_as_asv_does():
    cases = _cases()
    assert len(cases) == 6 + 6 + 6 + 1  # peakmem_* is not measured
    x = [c for c in cases if c.benchmark == "bench_a.A.time_x"]
    assert [c.index for c in x] == list(range(6))
    assert x[1].asv_id == "bench_a.A.time_x('s1', 'v2')" and x[1].values == ["s1", "v2"]


@pytest.mark.parametrize("count", [1, 2, 3, 4, 7])
def test_every_case_lands_in_exactly_one_shard(count):
    cases = _cases()
    shards = sharding.shard(cases, count)
    assert len(shards) == count
    flat = [c for s in shards for c in s]
    assert sorted(flat) == sorted(cases), "each case exactly once"
    assert sharding.shard(list(reversed(cases)), count) == shards, "the same split whatever the order"
    for s in shards:  # a unit stays in one shard: a case's variants, all its track methods
        units = {c.unit for c in s}
        assert all(c in s for c in cases if c.unit in units)


def test_a_time_case_shares_its_shard_with_its_other_implementations():
    """The gate's ordering rules (tma not slower than region) compare them within a shard."""
    cases = _cases()
    for shard_cases in sharding.shard(cases, 3):
        for case in shard_cases:
            siblings = [c for c in cases if c.benchmark == case.benchmark and c.params[:-1] == case.params[:-1]]
            assert all(c in shard_cases for c in siblings), case.asv_id


def test_shards_balance_layer_norm_metrics_by_the_bytes_a_call_moves():
    """A metrics unit's host loops and timed graphs wait on the device: 8192x32768 fp32 forward+backward
    takes about three times a 1024-wide one's seconds, and the shard that takes it takes fewer units."""
    big = "'8192x32768'"
    suite = {
        "bench_layer_norm.LayerNormWidthsMetrics.track_gbps": {
            "type": "track",
            "param_names": ["shape", "dtype", "direction", "variant"],
            "params": [[big, *[f"'{m}x1024'" for m in range(1000, 1032)]], ["'float32'"], ["'fwd+bwd'"], ["'auto'"]],
        },
    }
    cases = workers.measured_cases(suite)
    seconds = {c.asv_id: sharding.seconds(c) for c in cases}
    largest = max(seconds, key=seconds.get)
    assert largest.endswith(f"({big}, 'float32', 'fwd+bwd', 'auto')")
    assert seconds[largest] > 3 * min(seconds.values())
    shards = sharding.shard(cases, 2)
    with_big = next(s for s in shards if any(big in c.asv_id for c in s))
    other = next(s for s in shards if s is not with_big)
    assert len(with_big) < len(other)
    loads = [sum(seconds[c.asv_id] for c in s) for s in shards]
    assert max(loads) < 1.1 * min(loads)


def test_shards_balance_an_attention_backward_by_its_work():
    """A long-sequence attention backward takes seconds a mode to measure, a LayerNorm case half a
    second: the shard that takes it takes fewer of the rest, so no shard keeps the verdict waiting."""
    configs = ["'long-128-causal-bf16'", "'gqa8-128-causal'"]
    suite = {
        "bench_attention.AttentionBackward.time_backward": {
            "type": "time",
            "param_names": ["config", "impl"],
            "params": [configs, ["'elem'", "'tma'"]],
        },
        "bench_layer_norm.LayerNorm.time_layer_norm": {
            "type": "time",
            "param_names": ["shape", "dtype", "direction", "impl"],
            "params": [[f"'{m}x1024'" for m in range(1, 301)], ["'float32'"], ["'fwd'"], ["'auto'"]],
        },
    }
    cases = workers.measured_cases(suite)
    long_s = sum(sharding.seconds(c) for c in cases if "long-128" in c.asv_id)
    assert long_s > 40 * sharding.TIME_CASE_S  # the case the split has to weigh
    shards = sharding.shard(cases, 2)
    with_long = next(s for s in shards if any("long-128" in c.asv_id for c in s))
    other = next(s for s in shards if s is not with_long)
    assert len([c for c in with_long if "layer_norm" in c.asv_id]) < len([c for c in other if "layer_norm" in c.asv_id])
    assert all("gqa8-128-causal" not in c.asv_id for c in with_long)


@pytest.mark.parametrize("count", [2, 3, 4])
def test_tests_that_build_the_same_kernels_share_a_shard(count):
    """Each key's tests on one shard, keys balanced by their tests, the others by node id: every
    runner computes the same split whatever the order it collected the tests in."""
    tests = [(f"t.py::a[{i}]", f"shape{i % 5}") for i in range(33)] + [(f"t.py::b[{i}]", None) for i in range(400)]
    share = split.shares(tests, count)
    assert set(share) == set(range(count))
    by_key = {}
    for (_, key), s in zip(tests, share, strict=True):
        by_key.setdefault(key, set()).add(s)
    assert all(len(shards) == 1 for key, shards in by_key.items() if key is not None)
    keyed = [sum(1 for (_, key), s in zip(tests, share, strict=True) if key and s == k) for k in range(count)]
    assert max(keyed) - min(keyed) <= 7, "no shard takes two keys while another has none"
    assert split.shares(tests[::-1], count) == share[::-1]


def test_the_attention_tests_of_one_kernel_shape_run_on_one_shard():
    """What the PR check's shards collect: a partition of the tests, one kernel shape's GPU tests on one shard."""
    ids = []
    for k in range(1, 5):
        argv = [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", f"--shard={k}/4",
                "tests/test_attention.py"]  # fmt: skip
        out = subprocess.run(argv, cwd=ROOT, capture_output=True, text=True, check=True).stdout
        ids.append([line for line in out.splitlines() if "::" in line])
    everything = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", "tests/test_attention.py"],
        cwd=ROOT, capture_output=True, text=True, check=True,
    ).stdout  # fmt: skip
    assert sorted(i for shard in ids for i in shard) == sorted(i for i in everything.splitlines() if "::" in i)
    shapes = [{m.group(0) for i in shard if (m := re.search(r"h\d+kv\d+-d\d+x\d+-\w+-\w+16", i))} for shard in ids]
    assert all(shapes), "every shard builds some kernel shape"
    assert sum(len(s) for s in shapes) == len(set().union(*shapes)), "no kernel shape on two shards"


@pytest.mark.parametrize("suite", SUITES, ids=lambda suite: suite.name)
def test_base_warms_every_case_the_check_times_on_it(groups, suite):
    """Base's warm-up leaves out the references; every time case a group selects is this project's."""
    from kernelgate.measure import warm

    patterns = list(groups.groups[suite.name].benchmarks)
    warmed = set(warm.items((suite.name,), references=False))
    timed = set()
    for grid in suite.grids:
        name, names = f"{suite.module}.{grid.name}.{grid.time_method}", [*grid.params, "impl"]
        for params in itertools.product(*grid.params.values(), grid.impls):
            if workers.selected([Case(name, tuple(zip(names, map(repr, params), strict=True)))], patterns):
                timed.add((suite.name, *params))
    assert timed and warmed == timed, "base warms what it times, no more"
    if suite.jit_references:
        assert len(warm.items((suite.name,))) > len(warmed), "head warms the compiled references too"


# --- the worker and the interleaved measurement ----------------------------------------------------


@pytest.fixture()
def fake_tree(tmp_path):
    return fake_suite.write(tmp_path / "tree")


def _side(role, tree, tmp_path, env=None):
    return workers.Side(
        role, role[0] * 40, tree, Path(sys.executable), {**os.environ, **(env or {})}, tmp_path / f"{role}.log"
    )


def _every_track(case):
    return True


def test_interleaved_measurement_of_both_commits(fake_tree, tmp_path):
    sides = [_side("base", fake_tree, tmp_path), _side("head", fake_tree, tmp_path)]
    suites = workers.discover(sides)
    chosen = check.chosen_cases(suites, [r"^bench_fake\."], _every_track)
    assert {c.kind for c in chosen["base"]} == {"time"}, "base runs only what is compared"
    tracked = [c for c in chosen["head"] if c.benchmark == "bench_fake.Metrics.track_measured"]
    chosen["head"] = [c for c in chosen["head"] if c.kind == "time"] + [tracked[0]]  # one of four
    records = workers.measure(sides, chosen, rounds=2, samples=3)
    for role in ("base", "head"):
        fast = records[role]["bench_fake.Fast.time_sum('a')"]
        assert fast["status"] == "ok" and len(fast["samples"]) == 6, "2 rounds of 3 samples"
        assert all(s > 0 for s in fast["samples"])
        assert records[role]["bench_fake.Fast.time_sum('b')"]["status"] == "skipped"
        assert records[role]["bench_fake.Broken.time_nothing"]["status"] == "failed"
        assert "setup fails" in records[role]["bench_fake.Broken.time_nothing"]["message"]
        assert records[role]["bench_fake.Loud.time_quiet"]["status"] == "ok", "stray output is not an answer"
    assert "bench_fake.Metrics.track_measured('s1', 'v1')" not in records["base"]
    # setup_cache was told which combinations the run needs, one shape, not both, and which metric each is for.
    assert records["head"][tracked[0].asv_id] == {**records["head"][tracked[0].asv_id], "status": "ok", "value": 1.0}

    machine = {"machine": "h100-test", "gpu": "NVIDIA H100", "gpu_class": "H100", "python": "3.11", "version": 1}
    results.write_machine(tmp_path / "results", machine)
    path = results.write_commit(tmp_path / "results", machine, "a" * 40, 0, suites["head"], records["head"])
    loaded = Results.load(str(path), machine_name="h100-test")
    name = "bench_fake.Fast.time_sum"
    values = loaded.get_result_value(name, loaded.get_result_params(name))
    assert values[0] > 0 and math.isnan(values[1]), "measured, then skipped"
    assert len(loaded.get_result_samples(name, loaded.get_result_params(name))[0]) == 6
    assert loaded.get_result_value("bench_fake.Broken.time_nothing", []) == [None], "failed"


BOUNDS = """
[defaults]
max_slowdown = 0.05
gpu_classes = ["H100", "H200"]

[[rule]]
why = "a floor on one shape"
benchmark = "bench_fake.Metrics.track_measured"
params = { shape = "s1" }
min = 0.5

[[rule]]
why = "a ceiling on the other, on another GPU class"
benchmark = "bench_fake.Metrics.track_measured"
params = { shape = "s2", variant = "v2" }
gpu_class = "H200"
max = 3.0
informational = true

[[rule]]
why = "a skip bounds nothing"
benchmark = "bench_fake.Metrics.track_measured"
params = { variant = "v2" }
may_skip = true
"""


def _judging_files(out: Path, base: str, head: str | None = None) -> None:
    """The thresholds as the check reads them from git: base's, and head's (the same unless given)."""
    for folder, text in ((out / check.TRUSTED, base), (out / check.FROM_HEAD, base if head is None else head)):
        folder.mkdir(parents=True, exist_ok=True)
        (folder / "perf-thresholds.toml").write_text(text)


HEAD_FLOOR = """
[[rule]]
why = "a floor head adds"
benchmark = "bench_fake.Metrics.track_measured"
params = { shape = "s2" }
min = 0.5
"""


@pytest.mark.parametrize(
    ("gpu_class", "head_adds", "expected"),
    [
        ("H100", "", ["s1', 'v1", "s1', 'v2"]),
        ("H200", "", ["s1', 'v1", "s1', 'v2", "s2', 'v2"]),
        ("H100", HEAD_FLOOR, ["s1', 'v1", "s1', 'v2", "s2', 'v1", "s2', 'v2"]),
    ],
    ids=["H100", "H200", "H100-with-a-floor-head-adds"],
)
def test_head_measures_only_the_track_values_a_rule_bounds(fake_tree, tmp_path, gpu_class, head_adds, expected):
    """The main job's history tracks every value; the check measures those a floor or ceiling judges there,
    base's or one head adds."""
    _judging_files(tmp_path, BOUNDS, BOUNDS + head_adds)
    suites = workers.discover([_side("base", fake_tree, tmp_path), _side("head", fake_tree, tmp_path)])
    chosen = check.chosen_cases(suites, [r"^bench_fake\."], check.bounded_tracks(tmp_path, gpu_class))
    tracks = [c.asv_id for c in chosen["head"] if c.kind == "track"]
    assert tracks == [f"bench_fake.Metrics.track_measured('{pair}')" for pair in expected]
    assert {c.asv_id for c in chosen["head"] if c.kind == "time"} == {c.asv_id for c in chosen["base"]}, (
        "every time case"
    )


def test_each_shard_chooses_its_cases_then_measures_them(fake_tree, tmp_path):
    """The check's order: discover both suites and choose the shard's cases (the warm-up is told them),
    then measure exactly those; the shards together measure every chosen case once."""
    measured = {}
    for k in (1, 2):
        out = tmp_path / f"shard-{k}"
        _judging_files(out, BOUNDS)
        machine = {"gpu_class": "H100"}
        plan = check.Plan("a" * 40, "b" * 40, machine, ["fake"], {}, (k, 2), [], [r"^bench_fake\.(Fast|Metrics)"])
        for role in ("base", "head"):
            side = _side(role, fake_tree, tmp_path)
            plan.sides[role] = {"commit": side.commit, "tree": str(side.tree), "python": str(side.python),
                                "env": {}, "log": str(out / "logs" / f"{role}-worker.log")}  # fmt: skip
        cases = check.choose(plan, out, Steps())
        assert plan.cases == {role: [c.asv_id for c in role_cases] for role, role_cases in cases.items()}
        records = check.measure(plan, Steps(), cases)
        for role in ("base", "head"):
            assert sorted(records[role]) == sorted(plan.cases[role]), "measured what was chosen, no more"
            measured.setdefault(role, []).extend(plan.cases[role])
    assert sorted(measured["base"]) == ["bench_fake.Fast.time_sum('a')", "bench_fake.Fast.time_sum('b')"]
    assert len(measured["head"]) == len(set(measured["head"])) == 4, "two time cases and two bounded track values"


@pytest.mark.parametrize("whose", ["base", "head"])
def test_unreadable_thresholds_stop_the_check(tmp_path, whose):
    broken = "[defaults]\nmax_slowdown = 'fast'\n"
    _judging_files(tmp_path, broken if whose == "base" else BOUNDS, broken)
    with pytest.raises(check.CheckError, match=r"base commit's perf-thresholds\.toml" if whose == "base" else "head's"):
        check.bounded_tracks(tmp_path, "H100")


HANGING_SUITE = """
import os
import subprocess
import time


class Hangs:
    timeout = 1

    def setup(self):
        child = subprocess.Popen(["sleep", "60"])
        with open(os.environ["HANG_PIDS"], "a") as pids:
            pids.write(f"{child.pid}\\n")
        time.sleep(60)

    def time_never(self):
        pass


class Later:
    def time_fine(self):
        pass


class SlowSamples:
    timeout = 1

    def time_sleeps(self):
        time.sleep(60)


class HangingMetrics:
    params = [["x", "y"]]
    param_names = ["case"]
    timeout = 1

    def setup_cache(self):
        time.sleep(60)

    setup_cache.timeout = 1

    def track_value(self, cache, case):
        return 1.0

    def track_other(self, cache, case):
        return 2.0


class Crashes:
    def setup(self):
        os._exit(3)

    def time_crash(self):
        pass
"""


def test_a_case_past_its_timeout_fails_alone_and_the_run_goes_on(fake_tree, tmp_path):
    """asv's ``timeout`` bounds each request: the worker, and what it started, is stopped, the case
    fails with the reason, and a fresh worker measures the cases after it."""
    (fake_tree / "benchmarks" / "bench_hangs.py").write_text(HANGING_SUITE)
    pids = tmp_path / "pids"
    sides = [_side(role, fake_tree, tmp_path, {"HANG_PIDS": str(pids)}) for role in ("base", "head")]
    suites = workers.discover(sides)
    chosen = {
        role: workers.selected(workers.measured_cases(suite), [r"^bench_hangs\."]) for role, suite in suites.items()
    }
    records = workers.measure(sides, chosen, rounds=2, samples=2)
    for role in ("base", "head"):
        hung = records[role]["bench_hangs.Hangs.time_never"]
        assert hung["status"] == "failed" and "within the benchmark's timeout, 1 s" in hung["message"]
        assert records[role]["bench_hangs.SlowSamples.time_sleeps"]["status"] == "failed"
        crashed = records[role]["bench_hangs.Crashes.time_crash"]
        assert crashed["status"] == "failed" and f"the {role} worker exited (3)" in crashed["message"]
        assert records[role]["bench_hangs.Later.time_fine"]["status"] == "ok", "a fresh worker took the next case"
        for case in ("x", "y"):
            metric = records[role][f"bench_hangs.HangingMetrics.track_other('{case}')"]
            assert metric["status"] == "failed" and "timeout, 3 s" in metric["message"], "setup_cache's 1 s + 2 x 1 s"
            skipped = records[role][f"bench_hangs.HangingMetrics.track_value('{case}')"]
            assert "not measured: a value of bench_hangs.HangingMetrics was lost" in skipped["message"]
    for pid in map(int, pids.read_text().split()):
        assert not _running(pid), "the child the hung setup started was stopped with its worker"


def test_a_worker_lost_on_case_after_case_stops_the_run(fake_tree, tmp_path):
    """Three cases in a row that take their worker down say the environment is broken, not a case."""
    crash = "    def setup(self):\n        os._exit(3)\n\n    def time_x(self):\n        pass\n"
    crashing = "\n".join(f"class Crash{k}:\n{crash}" for k in range(4))
    (fake_tree / "benchmarks" / "bench_crashes.py").write_text("import os\n\n" + crashing)
    side = _side("head", fake_tree, tmp_path)
    cases = workers.selected(workers.measured_cases(workers.discover([side])["head"]), [r"^bench_crashes\."])
    with pytest.raises(
        workers.WorkerError, match=r"head worker was lost on 3 cases in a row; the last:\nsetup: .*exited \(3\)"
    ):
        workers.measure([side], {"head": cases}, rounds=1, samples=1)


# A stand-in for torch whose CUDA context a case can break, as an illegal address or a device-side assert
# does: from then on every CUDA call of the process fails (the worker probes with torch.cuda.synchronize).
BREAKING_SUITE = """
import sys
import types

STICKY = "CUDA error: an illegal memory access was encountered"


class _Cuda:
    broken = False

    @staticmethod
    def is_initialized():
        return True

    @classmethod
    def synchronize(cls):
        if cls.broken:
            raise RuntimeError(STICKY)

    @classmethod
    def crash(cls):
        cls.broken = True
        raise RuntimeError(STICKY)


sys.modules["torch"] = torch = types.ModuleType("torch")
torch.cuda = _Cuda


class BreaksInSamples:
    def time_crash(self):
        torch.cuda.crash()


class BreaksInSetup:
    def setup(self):
        torch.cuda.crash()

    def time_crash(self):
        pass


class FailsAlone:
    def setup(self):
        raise ValueError("a bad shape: the context is fine")

    def time_x(self):
        pass


class Later:
    def setup(self):
        torch.cuda.synchronize()

    def time_fine(self):
        torch.cuda.synchronize()


class BrokenMetrics:
    params = [["x", "y"]]
    param_names = ["case"]

    def setup_cache(self):
        torch.cuda.crash()

    def track_one(self, cache, case):
        return 1.0

    def track_two(self, cache, case):
        return 2.0


class LaterMetrics:
    def track_fine(self):
        torch.cuda.synchronize()
        return 3.0
"""


def test_a_case_that_breaks_the_cuda_context_fails_alone(fake_tree, tmp_path):
    """After a sticky CUDA error every later CUDA call of the process fails: the case fails with the
    reason, its worker stops, and a fresh one measures the cases after it. A failure that leaves the
    context usable keeps the worker."""
    (fake_tree / "benchmarks" / "bench_breaks.py").write_text(BREAKING_SUITE)
    side = _side("head", fake_tree, tmp_path)
    cases = workers.selected(workers.measured_cases(workers.discover([side])["head"]), [r"^bench_breaks\."])
    records = workers.measure([side], {"head": cases}, rounds=2, samples=2)["head"]
    stopped = "The worker stops: its CUDA context is broken: CUDA error: an illegal memory access was encountered"
    for case, stage in (("BreaksInSamples", "samples"), ("BreaksInSetup", "setup")):
        record = records[f"bench_breaks.{case}.time_crash"]
        assert record["status"] == "failed" and record["reason"] == f"{stage}: {stopped}", case
    alone = records["bench_breaks.FailsAlone.time_x"]
    assert alone["reason"] == "setup: ValueError: a bad shape: the context is fine", "the worker goes on"
    assert records["bench_breaks.Later.time_fine"]["status"] == "ok", "a fresh worker took the next case"
    first, second = (records[f"bench_breaks.BrokenMetrics.track_{name}('x')"] for name in ("one", "two"))
    assert first["status"] == "failed" and first["reason"] == stopped
    assert records["bench_breaks.BrokenMetrics.track_one('y')"]["reason"].startswith("not measured: the worker stopped")
    assert second["status"] == "failed" and "not measured: a value of bench_breaks.BrokenMetrics" in second["reason"]
    assert records["bench_breaks.LaterMetrics.track_fine"] == {
        "benchmark": "bench_breaks.LaterMetrics.track_fine", "index": 0, "kind": "track", "status": "ok", "value": 3.0
    }  # fmt: skip


DEVICE_ASSERT_SUITE = """
import torch


class BreaksTheContext:
    def setup(self):
        x = torch.zeros(4, device="cuda")
        x[torch.tensor([1 << 20], device="cuda")] = 1.0  # out of bounds: a device-side assert, a sticky error
        torch.cuda.synchronize()

    def time_nothing(self):
        pass


class Later:
    def setup(self):
        self.x = torch.ones(1 << 20, device="cuda")

    def time_sum(self):
        assert self.x.sum().item() == 1 << 20
"""


def test_a_device_side_assert_fails_its_case_alone_on_a_gpu(cuda_device, fake_tree, tmp_path):
    """The same on a real GPU: a device-side assert breaks the worker's CUDA context for good."""
    (fake_tree / "benchmarks" / "bench_asserts.py").write_text(DEVICE_ASSERT_SUITE)
    side = _side("head", fake_tree, tmp_path)
    cases = workers.selected(workers.measured_cases(workers.discover([side])["head"]), [r"^bench_asserts\."])
    records = workers.measure([side], {"head": cases}, rounds=2, samples=2)["head"]
    crashed = records["bench_asserts.BreaksTheContext.time_nothing"]
    assert crashed["status"] == "failed"
    assert crashed["reason"].startswith("setup: The worker stops: its CUDA context is broken: CUDA error"), crashed
    later = records["bench_asserts.Later.time_sum"]
    assert later["status"] == "ok" and len(later["samples"]) == 4, later


def _running(pid: int) -> bool:
    """Whether ``pid`` still runs: gone, or a zombie waiting for init to reap it, it does not."""
    try:
        stat = Path(f"/proc/{pid}/stat").read_text()
    except FileNotFoundError:
        return False
    return stat.rsplit(")", 1)[1].split()[0] not in ("Z", "X")


def test_a_worker_that_cannot_load_the_suite_is_an_error(tmp_path):
    tree = tmp_path / "tree"
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "__init__.py").write_text("raise ImportError('broken suite')\n")
    with pytest.raises(workers.WorkerError, match="did not load"):
        workers.discover([_side("head", tree, tmp_path)])


# --- each commit's environment ---------------------------------------------------------------------


def test_a_checkout_is_installed_into_an_overlay_of_the_runner(tmp_path):
    """The overlay sees the runner's packages and holds the checkout itself, installed offline."""
    python = environments.overlay(sys.executable, ROOT, tmp_path / "env")
    probe = "import asv, kernelgate.kernels; print(kernelgate.kernels.__file__)"
    found = subprocess.run([str(python), "-c", probe], capture_output=True, text=True, check=True).stdout.strip()
    assert Path(found) == ROOT / "kernels" / "__init__.py"
    assert environments.overlay(sys.executable, ROOT, tmp_path / "env") == python, "reused, not rebuilt"


def test_a_runner_without_pip_is_refused_by_name(tmp_path):
    """A runner provisioned without the lock's pip and setuptools (a bare virtualenv): a clear error."""
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(tmp_path / "runner")], check=True)
    with pytest.raises(environments.RunnerError, match=r"lacks pip and setuptools.*requirements/runner\.txt"):
        environments.overlay(str(tmp_path / "runner" / "bin" / "python"), ROOT, tmp_path / "env")


# --- where head's code runs -------------------------------------------------------------------------

HEAD_USER = "nobody"
INSTALLABLE = {"pyproject.toml": '[project]\nname = "fake"\nversion = "0"\n[tool.setuptools]\npy-modules = []\n'}


@pytest.fixture(scope="module")
def runner_for_head_user(tmp_path_factory):
    """A runner environment (pip, setuptools) that the head user can run, as a GPU runner's is: this process's
    own Python may live where that user cannot reach (a home folder)."""
    if os.geteuid() != 0:
        pytest.skip("SKIPPED: switching head's processes to another user needs root (CI runs as root)")
    for base in (getattr(sys, "_base_executable", sys.executable), "/usr/bin/python3"):
        try:
            subprocess.run([base, "-c", "import venv, ensurepip"], capture_output=True, check=True,
                           **isolation.popen_user(HEAD_USER))  # fmt: skip
            break
        except (OSError, subprocess.CalledProcessError):
            continue
    else:
        pytest.fail(f"no Python on this machine that {HEAD_USER} can run, with venv and ensurepip")
    folder = Path(tempfile.mkdtemp(prefix="kernelgate-runner-"))
    folder.chmod(0o755)
    subprocess.run([base, "-m", "venv", str(folder / "runner")], check=True)
    python = folder / "runner" / "bin" / "python"
    setuptools = re.search(r"^setuptools==\S+", (ROOT / "requirements" / "runner.txt").read_text(), re.MULTILINE)
    subprocess.run([str(python), "-m", "pip", "install", "-q", setuptools.group(0)], check=True)  # the lock's
    yield python
    shutil.rmtree(folder)


def test_head_runs_as_its_user_and_writes_only_its_scratch_folder(runner_for_head_user, tmp_path, monkeypatch):
    out = tmp_path / "out"
    out.mkdir()
    scratch = isolation.scratch(HEAD_USER)
    assert (scratch.stat().st_uid, scratch.stat().st_mode & 0o777) == (isolation.account(HEAD_USER).pw_uid, 0o700)
    monkeypatch.setenv("GITHUB_TOKEN", "secret")
    monkeypatch.setenv("ACTIONS_RUNTIME_TOKEN", "secret")
    probe = f"""
import os, pathlib
def writes(path):
    try:
        pathlib.Path(path).write_text("x")
        return True
    except OSError:
        return False
print(os.getuid(), writes({str(out / "manifest.json")!r}), writes({str(scratch / "mine")!r}),
      sorted(k for k in os.environ if "TOKEN" in k))
"""
    env = isolation.environ(isolation.head_env(scratch), untrusted=True)
    done = subprocess.run([str(runner_for_head_user), "-c", probe], env=env, capture_output=True, text=True,
                          check=True, **isolation.popen_user(HEAD_USER))  # fmt: skip
    check.drop_scratch(scratch)
    assert done.stdout.split(maxsplit=3) == [str(isolation.account(HEAD_USER).pw_uid), "False", "True", "[]\n"]
    assert not (out / "manifest.json").exists()


def test_heads_environment_is_built_as_its_user_in_its_scratch_folder(runner_for_head_user, tmp_path, monkeypatch):
    """The check's environment step: head's worktree and build are its user's, base's are the check's."""
    import argparse

    run = ShardRun.make(tmp_path, files=INSTALLABLE)
    monkeypatch.chdir(run.repo)
    monkeypatch.setattr(check, "has_gpu", lambda: True)
    monkeypatch.setattr(check, "machine_entry", lambda: {"machine": "h100-host", "gpu_class": "H100"})
    args = argparse.Namespace(out=tmp_path / "out", work=tmp_path / "work", cache=tmp_path / "cache", base=run.base,
                              head=run.head, full=None, bench=None, shard=(1, 1),
                              runner_python=str(runner_for_head_user), head_user=HEAD_USER)  # fmt: skip
    args.out.mkdir()
    scratch = isolation.scratch(HEAD_USER)
    try:
        plan = check.prepare(args, Steps(), scratch)
        head, base = plan.side("head"), plan.side("base")
        uid = isolation.account(HEAD_USER).pw_uid
        assert plan.sides["head"]["user"] == HEAD_USER and plan.sides["base"]["user"] is None
        assert head.as_user == isolation.popen_user(HEAD_USER) and base.as_user == {}
        assert scratch in head.tree.parents and scratch in head.python.parents
        assert head.tree.stat().st_uid == uid and (head.tree / "src" / "kernel.py").stat().st_uid == uid
        assert base.tree.stat().st_uid == 0 and scratch not in base.python.parents
        assert head.env["TRITON_CACHE_DIR"].startswith(str(scratch)), "head's JIT caches: fresh, in its scratch"
        assert base.env["TRITON_CACHE_DIR"] == str(args.cache / "base" / "triton")
    finally:
        check.drop_scratch(scratch)
    assert not scratch.exists() and str(scratch) not in check.git("worktree", "list")


@pytest.mark.parametrize(
    ("user", "euid", "message"),
    [
        ("no-such-user-here", 0, "no such user"),
        ("root", 0, "is root"),
        (HEAD_USER, 1000, "needs the check to run as root"),
    ],
)
def test_a_head_user_that_would_not_isolate_is_refused(monkeypatch, user, euid, message):
    monkeypatch.setattr(os, "geteuid", lambda: euid)
    with pytest.raises(isolation.IsolationError, match=message):
        isolation.popen_user(user)


def test_without_a_head_user_head_runs_as_the_check():
    assert isolation.popen_user(None) == {}
    scratch = isolation.scratch(None)
    assert (scratch.stat().st_uid, scratch.stat().st_mode & 0o777) == (os.geteuid(), 0o700)
    check.drop_scratch(scratch)


# --- merging shards --------------------------------------------------------------------------------


@pytest.fixture()
def shard_run(tmp_path, monkeypatch):
    """Make a check's commits and shards (support/shards.py), and work in their repository, as the verdict job does."""

    def make(**kwargs) -> ShardRun:
        run = ShardRun.make(tmp_path, **kwargs)
        monkeypatch.chdir(run.repo)
        return run

    return make


def _merge(run: ShardRun, out: Path, count: int = 2) -> tuple[int, dict, str]:
    from kernelgate.prcheck.__main__ import main as prcheck_main

    code = prcheck_main(run.merge_argv(out, count))
    verdict = json.loads((out / "gate" / "verdict.json").read_text())
    return code, verdict, (out / "report.md").read_text()


def test_shards_merge_into_one_run(shard_run, tmp_path):
    run = shard_run()
    run.two_shards()
    out = tmp_path / "merged"
    plan = check.merge_shards(run.folder, 2, run.expected(out), out)
    assert plan.machine["machine"] == "h100-shards", "shards run on several hosts; the verdict is the GPU class's"
    assert json.loads((out / "cases.json").read_text()) == [S1, S2]
    assert len(list((out / "results" / "h100-shards").glob("*-pr-check.json"))) == 2


def test_the_merge_command_judges_the_shards_and_reports(shard_run, tmp_path):
    run = shard_run()
    run.two_shards()
    code, verdict, report = _merge(run, tmp_path / "verdict")
    assert (code, verdict["passed"]) == (0, True), report
    assert report.startswith("# PR check ✅ passed") and "The verdict on all 2 shards, merged." in report
    assert "| shard 2: benchmarks | 4.0 | ok |" in report, "each shard's steps, then the merge's"

    code, verdict, report = _merge(run, tmp_path / "three", count=3)
    assert (code, verdict["exit_code"]) == (2, 2) and "shard-3 of 3 left no results" in report


def test_the_merged_report_gathers_each_red_shards_explanation(shard_run, tmp_path):
    """A red shard explains its failing cases from the compiled kernels (check.explain); the merged report, which
    the pull request's comment shows, carries each shard's."""
    run = shard_run()
    one, two = run.two_shards()
    (one / check.EXPLAIN).write_text("**`case one`**\n\n- why: fused_bwd_kernel spills\n")
    (two / check.EXPLAIN).write_text("**`case two`**\n\n- why: kernels a call launches 2 → 3\n")
    _, _, report = _merge(run, tmp_path / "verdict")
    section = report.split("## What changed in the kernels", 1)[1]
    assert "fused_bwd_kernel spills" in section and "kernels a call launches 2 → 3" in section


def test_one_shard_and_two_give_the_same_verdict(shard_run, tmp_path):
    """The same measurements, taken by one GPU job or split over two, judged alike."""
    run = shard_run()
    one, two = run.two_shards()
    verdicts = [_merge(run, tmp_path / "two")[:2]]
    measured = [json.loads((shard / "measurements.json").read_text()) for shard in (one, two)]
    records = {role: {**measured[0][role], **measured[1][role]} for role in ("base", "head")}
    shutil.rmtree(run.folder)
    run.shard(1, 1, {role: [S1, S2] for role in records}, records)
    (run.folder / "shard-1" / "junit").mkdir()
    (run.folder / "shard-1" / "junit" / "gpu-tests.xml").write_text(JUNIT)
    verdicts.append(_merge(run, tmp_path / "one", count=1)[:2])
    assert [code for code, _ in verdicts] == [0, 0]
    timed = [[f for f in verdict["findings"] if f["check"] == "slowdown"] for _, verdict in verdicts]
    assert len(timed[0]) == 2 and timed[0] == timed[1]


def test_the_merge_and_its_gate_import_no_kernel_stack(shard_run, tmp_path):
    """The verdict job installs asv and matplotlib alone (requirements/verdict.txt)."""
    stubs = tmp_path / "stubs"
    for name in ("torch", "triton", "tilelang"):
        (stubs / name).mkdir(parents=True)
        (stubs / name / "__init__.py").write_text(f"raise ImportError('the verdict job has no {name}')\n")
    run = shard_run()
    run.two_shards()
    argv = [sys.executable, "-m", "kernelgate.prcheck", *run.merge_argv(tmp_path / "verdict")]
    env = {**os.environ, "PYTHONPATH": str(stubs)}  # first on the path, before site-packages
    proc = subprocess.run(argv, env=env, capture_output=True, text=True, check=False)
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]
    assert json.loads((tmp_path / "verdict" / "gate" / "verdict.json").read_text())["passed"]


def test_judging_changes_are_the_diff_of_the_trusted_files(tmp_path):
    def git(*args):
        check.git("-c", "user.name=t", "-c", "user.email=t@t", *args, cwd=tmp_path)

    git("init", "-q")
    for name in (*check.TRUSTED_FILES, "kernel.py"):
        (tmp_path / name).write_text("a = 1\n")
    git("add", "-A")
    git("commit", "-q", "-m", "base")
    (tmp_path / "perf-thresholds.toml").write_text("a = 2\n")
    (tmp_path / "kernel.py").write_text("a = 3\n")
    git("commit", "-q", "-am", "head")
    diff = check.judging_changes("HEAD~1", "HEAD", cwd=tmp_path)
    assert "-a = 1\n+a = 2" in diff and "perf-thresholds.toml" in diff
    assert "kernel.py" not in diff, "only the files that judge"


def test_the_merged_report_shows_the_judging_changes_fenced(shard_run, tmp_path):
    """The merge reads the change to the judging files from git itself, and fences it so that its text cannot
    end the block."""
    run = shard_run()
    why = "why = '````\n# PR check ✅ passed'\n"
    run.change(
        {"src/kernel.py": "x = 2\n", "perf-thresholds.toml": THRESHOLDS + "# " + why},
        "a kernel and a comment in its thresholds",
    )
    run.two_shards()
    code, _, report = _merge(run, tmp_path / "verdict")
    assert code == 0, report
    assert "## Changes to the gate's files\n\n`````diff\n" in report
    assert "+# PR check ✅ passed'\n`````\n" in report, "the fence outlasts the diff's own backticks"


@pytest.mark.parametrize(
    ("field", "value", "reason"),
    [
        ("groups", [], "its groups is []"),
        ("head", "d" * 40, "its head is"),
        ("benchmarks", [".*"], "its benchmarks is"),
        ("tests", ["tests/test_other.py"], "its tests is"),
        ("shard", [2, 2], "says shard 2/2, not 1/2"),
    ],
)
def test_a_shard_whose_manifest_is_not_the_selection_fails_the_merge(shard_run, tmp_path, field, value, reason):
    """The head's code ran in the GPU job: whatever its shards claim, the merge judges its own selection."""
    run = shard_run()
    one, _ = run.two_shards()
    _edit_manifest(one, {field: value})
    code, verdict, text = _merge(run, tmp_path / "verdict")
    assert (code, verdict["passed"]) == (2, False) and reason in text


def test_thresholds_a_shard_brings_are_not_the_ones_that_judge(shard_run, tmp_path):
    run = shard_run()
    one, two = run.two_shards()
    records = json.loads((one / "measurements.json").read_text())
    records["head"][S1] = timing_record(0, 1.5)  # 50% slower, and so again when re-measured
    (one / "measurements.json").write_text(json.dumps(records))
    (one / "remeasured.json").write_text(
        json.dumps({"base": {S1: records["base"][S1]}, "head": {S1: records["head"][S1]}})
    )
    for shard in (one, two):
        (shard / "trusted").mkdir(exist_ok=True)
        (shard / "trusted" / "perf-thresholds.toml").write_text(THRESHOLDS.replace("0.05", "0.9"))
    code, verdict, text = _merge(run, tmp_path / "verdict")
    assert (code, verdict["passed"]) == (1, False), text


def test_a_group_head_adds_runs_with_its_tests_and_benchmarks(shard_run, tmp_path):
    run = shard_run()
    added = '[group.new]\npaths = ["new/**"]\ntests = ["tests/test_new.py"]\nbenchmarks = ["^bench_new\\\\."]\n'
    run.head = commit(run.repo, {"pr-check.toml": group_map() + added, "new/kernel.py": "y = 1\n"}, "a new kernel")
    plan = run.expected(tmp_path / "selection")
    assert plan.groups == ["g", "new"]
    assert plan.reasons["new"][0] == "the pull request adds this group"
    assert plan.tests == ["tests/test_new.py"] and plan.benchmarks == ["^bench_a\\.", "^bench_new\\."]


def test_head_cannot_narrow_its_selection():
    """Head's map adds groups and work; its paths, everything and ignore lists decide nothing."""
    base = selection.GroupMap({"g": selection.Group("g", ("src/**",), ("t.py",), ("^a",))}, (), ())
    theirs = selection.GroupMap(
        {"g": selection.Group("g", ("src/**",), ("t2.py",), ("^b",)),
         "x": selection.Group("x", ("unclaimed/**",), (), ())},
        (), ("src/**", "unclaimed/**"),
    )  # fmt: skip
    merged = selection.with_additions(base, theirs)
    chosen = selection.select(merged, ["unclaimed/file.py"])
    assert chosen.groups == ("g", "x"), "a path base's map leaves unclaimed still selects every group"
    assert chosen.tests(merged) == ["t.py", "t2.py"] and chosen.benchmarks(merged) == ["^a", "^b"]
    assert selection.select(merged, ["src/a.py"]).groups == ("g", "x"), "head's ignore list is not applied"


def test_a_malformed_group_map_in_head_fails_closed(shard_run, tmp_path):
    run = shard_run()
    run.head = commit(run.repo, {"pr-check.toml": "[group.g]\npaths = 3\n"}, "a broken group map")
    with pytest.raises(check.CheckError, match=r"head's pr-check\.toml"):
        run.expected(tmp_path / "selection")


def test_a_missing_shard_fails_the_merge(shard_run, tmp_path):
    run = shard_run()
    _, two = run.two_shards()
    shutil.rmtree(two)
    with pytest.raises(check.CheckError, match=r"shard-2 of 2 left no results"):
        check.merge_shards(run.folder, 2, run.expected(tmp_path / "m"), tmp_path / "m")


def test_a_folder_beside_the_shards_fails_the_merge(shard_run, tmp_path):
    run = shard_run()
    one, _ = run.two_shards()
    shutil.copytree(one, run.folder / "shard-3")
    with pytest.raises(check.CheckError, match="holds shard-3 beside the 2 shards"):
        check.merge_shards(run.folder, 2, run.expected(tmp_path / "m"), tmp_path / "m")


def test_a_case_no_shard_measured_fails_the_merge(shard_run, tmp_path):
    run = shard_run()
    run.shard(1, 2, {"base": [S1], "head": [S1]}, {r: {S1: timing_record(0, 1.0)} for r in ("base", "head")})
    run.shard(2, 2, {"base": [], "head": []}, {"base": {}, "head": {}})
    with pytest.raises(check.CheckError, match="no shard measured"):
        check.merge_shards(run.folder, 2, run.expected(tmp_path / "m"), tmp_path / "m")


@pytest.mark.parametrize(
    ("first", "again", "verdict"),
    [(1.06, 1.045, "fail"), (1.042, 1.055, "cleared"), (1.045, 1.0, "pass"), (1.06, None, "error")],
    ids=["past-then-near", "near-then-past-by-less", "near-then-within", "never-re-measured"],
)
def test_the_merge_judges_what_a_shard_re_measured_as_its_gate_did(shard_run, tmp_path, first, again, verdict):
    """The merge judges each case's first reading and takes the shard's re-measurement as its own: judged
    on the fresh reading alone, 1.045x would pass a slowdown the shard failed, 1.055x fail one it cleared."""
    run = shard_run(thresholds=THRESHOLDS + "near_miss = 0.01\n")  # the 5% limit; readings past 1.04x re-measured
    one, _ = run.two_shards()
    records = json.loads((one / "measurements.json").read_text())
    records["head"][S1] = timing_record(0, first)
    (one / "measurements.json").write_text(json.dumps(records))
    if again is not None:
        fresh = {"base": {S1: timing_record(0, 1.0)}, "head": {S1: timing_record(0, again)}}
        (one / "remeasured.json").write_text(json.dumps(fresh))
    code, verdict_json, _ = _merge(run, tmp_path / "verdict")
    if verdict == "error":
        assert code == 2 and "re-measurement of base and head failed" in verdict_json["error"]
        return
    (row,) = [f for f in verdict_json["findings"] if f["check"] == "slowdown" and f["case"] == "s1"]
    assert row["verdict"] == verdict and code == (1 if verdict == "fail" else 0), row
    assert row["ratio"] == pytest.approx(again)


def test_a_re_measurement_keeps_each_cases_first_reading(shard_run, monkeypatch):
    from kernelgate.prcheck.__main__ import main as prcheck_main

    run = shard_run()
    one, _ = run.two_shards()
    first = json.loads((one / "measurements.json").read_text())
    monkeypatch.setattr(check.Plan, "side", lambda plan, role: role)
    monkeypatch.setattr(workers, "measure", lambda sides, cases: {
        role: {c.asv_id: timing_record(c.index, 1.5) for c in cases[role]} for role in sides
    })  # fmt: skip
    argv = ["remeasure", "--out", str(one), "--base", run.base, "--head", run.head, "--regex", "s1"]
    assert prcheck_main(argv) == 0
    assert json.loads((one / "measurements.json").read_text()) == first
    fresh = json.loads((one / "remeasured.json").read_text())
    assert fresh == {role: {S1: timing_record(0, 1.5)} for role in ("base", "head")}
    (result,) = (one / "results" / "h100-host1").glob(run.head[:8] + "-*.json")
    assert 1.5 in json.loads(result.read_text())["results"]["bench_a.A.time_x"][0]


@pytest.mark.parametrize(
    ("report", "passes"),
    [("complete", True), ("drew-no-test", True), ("absent", False), ("cut-short", False)],
)
def test_each_shard_that_selected_tests_brings_their_whole_report(shard_run, tmp_path, report, passes):
    """A shard killed during its tests, or run with --skip-tests, cannot pass because another shard's tests did."""
    xml = {"complete": JUNIT, "drew-no-test": '<testsuite tests="0"/>', "cut-short": '<testsuite tests="3"><testcase'}
    run = shard_run(tests=("tests/test_kernel.py",))
    _, two = run.two_shards()
    shutil.rmtree(two / "junit")
    if xml.get(report) is not None:
        (two / "junit").mkdir()
        (two / "junit" / "gpu-tests.xml").write_text(xml[report])
    code, verdict, text = _merge(run, tmp_path / "verdict")
    assert (code, verdict["passed"]) == ((0, True) if passes else (2, False)), text
    assert passes or "shard 2 has no complete report of its GPU tests" in text


def test_a_change_that_selects_nothing_passes_the_merge(shard_run, tmp_path):
    """A documentation change: every shard selected no group, measured nothing and wrote no suites."""
    run = shard_run()
    run.change({"docs/guide.md": "words\n"}, "a documentation change")
    for k in (1, 2):
        run.shard(k, 2, {}, {}, groups=False)
    code, verdict, text = _merge(run, tmp_path / "verdict")
    assert (code, verdict["passed"]) == (0, True), text
    assert "no changed path selects a group" in text


def test_a_check_that_selects_nothing_writes_its_passing_verdict(shard_run, tmp_path, monkeypatch):
    """What the verdict job merges, for a documentation change, on one runner."""
    import argparse

    from kernelgate.prcheck.__main__ import run as run_check

    run = shard_run()
    run.change({"docs/guide.md": "words\n"}, "a documentation change")
    machine = {"machine": "h100-host", "gpu": "NVIDIA H100", "gpu_class": "H100"}

    def prepare(args, steps, scratch):
        plan = check.selected_plan(run.base, run.head, args.out, None)
        plan.machine = machine
        return plan

    monkeypatch.setattr(check, "prepare", prepare)
    monkeypatch.setattr(tempfile, "tempdir", str(tmp_path / "tmp"))
    (tmp_path / "tmp").mkdir()
    out = run.folder / "shard-1"
    assert run_check(argparse.Namespace(out=out, skip_tests=False, head_user=None)) == 0
    assert json.loads((out / "gate" / "verdict.json").read_text()) == {
        "passed": True, "exit_code": 0, "error": None, "findings": []
    }  # fmt: skip
    assert not list((tmp_path / "tmp").iterdir()), "head's scratch folder is gone after the run"
    code, verdict, _ = _merge(run, tmp_path / "verdict", count=1)
    assert (code, verdict["passed"]) == (0, True), "the verdict job's merge of that one shard"


def test_a_merge_leaves_no_earlier_verdict_standing(shard_run, tmp_path):
    run = shard_run()
    _, two = run.two_shards()
    assert _merge(run, tmp_path / "verdict")[0] == 0
    shutil.rmtree(two)
    code, verdict, _ = _merge(run, tmp_path / "verdict")  # into the same folder
    assert (code, verdict["passed"]) == (2, False)


@pytest.mark.parametrize(
    "corrupt",
    [
        lambda shard: (shard / "measurements.json").write_text("null"),
        lambda shard: (shard / "measurements.json").write_text(json.dumps({"base": {}})),
        lambda shard: _edit_manifest(shard, {"shard": [2]}),
        lambda shard: _edit_manifest(shard, {"machine": {"machine": "x"}}),
    ],
    ids=["measurements-null", "measurements-no-head", "shard-not-k-of-n", "machine-without-class"],
)
def test_a_malformed_shard_fails_the_merge_with_a_report(shard_run, tmp_path, corrupt):
    run = shard_run()
    _, two = run.two_shards()
    corrupt(two)
    code, verdict, text = _merge(run, tmp_path / "verdict")
    assert (code, verdict["passed"]) == (2, False) and verdict["error"] and "could not evaluate" in text


def _edit_manifest(shard: Path, changes: dict) -> None:
    manifest = json.loads((shard / "manifest.json").read_text())
    (shard / "manifest.json").write_text(json.dumps({**manifest, **changes}))


def test_shards_of_another_runner_fail_the_merge(shard_run, tmp_path):
    run = shard_run()
    _, two = run.two_shards()
    plan = check.Plan.load(two)
    dataclasses.replace(plan, machine={**plan.machine, "cuda": "12.8"}).save(two)
    with pytest.raises(check.CheckError, match="measures differently"):
        check.merge_shards(run.folder, 2, run.expected(tmp_path / "m"), tmp_path / "m")


@pytest.mark.parametrize(("head_tick", "code"), [("1e-5", 0), ("1.2e-5", 1)])
def test_measured_results_are_what_the_gate_judges(fake_tree, tmp_path, head_tick, code):
    """Interleaved measurement, asv result files, the gate: equal ticks pass, a 20% slower head fails."""
    from kernelgate.gate.__main__ import main as gate_main

    sides = [
        _side("base", fake_tree, tmp_path, {"FAKE_TICK": "1e-5"}),
        _side("head", fake_tree, tmp_path, {"FAKE_TICK": head_tick}),
    ]
    suites = workers.discover(sides)
    cases = check.chosen_cases(suites, [r"^bench_fake\.Ticks\."], _every_track)
    # 10 samples a commit: fewer cannot reach asv's significance level (p < 0.002) even when apart.
    records = workers.measure(sides, cases, rounds=2, samples=5)
    out = tmp_path / "out"
    for role in suites:
        results.write_suite(out / "suites" / f"{role}.json", suites[role])
    machine = {"machine": "h100-test", "gpu": "NVIDIA H100", "gpu_class": "H100", "python": "3.11", "version": 1}
    ids = [c.asv_id for c in cases["head"]]
    plan = check.Plan("a" * 40, "b" * 40, machine, ["g"], {}, (1, 1), [], [], dates={"base": 0, "head": 1000})
    plan.cases = {"base": ids, "head": ids}
    check.write_results(plan, out, records)
    (tmp_path / "tests.xml").write_text(JUNIT)
    (tmp_path / "thresholds.toml").write_text(THRESHOLDS)
    argv = ["--base", "a" * 40, "--head", "b" * 40, "--machine", "h100-test", "--results-dir", str(out / "results"),
            "--cases", str(out / "cases.json"), "--base-suite", str(out / "suites" / "base.json"),
            "--thresholds", str(tmp_path / "thresholds.toml"), "--junit", str(tmp_path / "tests.xml"),
            "--out", str(tmp_path / "gate"), "--no-confirm"]  # fmt: skip
    assert gate_main(argv) == code
    verdict = json.loads((tmp_path / "gate" / "verdict.json").read_text())
    (row,) = [f for f in verdict["findings"] if f["check"] == "slowdown"]
    assert row["case"] == "-" and row["ratio"] == pytest.approx(float(head_tick) / 1e-5)


def test_the_gate_reports_why_a_case_failed(fake_tree, tmp_path):
    """The reason a worker gave for a failed case reaches the gate's report (asv's files keep no error)."""
    from kernelgate.gate.__main__ import main as gate_main

    sides = [_side(role, fake_tree, tmp_path) for role in ("base", "head")]
    suites = workers.discover(sides)
    cases = check.chosen_cases(suites, [r"^bench_fake\.(Ticks|Broken)\."], _every_track)
    records = workers.measure(sides, cases, rounds=1, samples=2)
    out = tmp_path / "out"
    for role in suites:
        results.write_suite(out / "suites" / f"{role}.json", suites[role])
    machine = {"machine": "h100-test", "gpu": "NVIDIA H100", "gpu_class": "H100", "python": "3.11", "version": 1}
    plan = check.Plan("a" * 40, "b" * 40, machine, ["g"], {}, (1, 1), [], [], dates={"base": 0, "head": 1000})
    plan.cases = {role: [c.asv_id for c in cases[role]] for role in cases}
    check.write_results(plan, out, records)
    (tmp_path / "tests.xml").write_text(JUNIT)
    (tmp_path / "thresholds.toml").write_text(THRESHOLDS)
    argv = ["--base", "a" * 40, "--head", "b" * 40, "--machine", "h100-test", "--results-dir", str(out / "results"),
            "--cases", str(out / "cases.json"), "--base-suite", str(out / "suites" / "base.json"),
            "--failures", str(out / check.FAILURES), "--thresholds", str(tmp_path / "thresholds.toml"),
            "--junit", str(tmp_path / "tests.xml"), "--out", str(tmp_path / "gate"), "--no-confirm"]  # fmt: skip
    assert gate_main(argv) == 1
    verdict = json.loads((tmp_path / "gate" / "verdict.json").read_text())
    (crash,) = [f for f in verdict["findings"] if f["check"] == "crashed"]
    assert crash["reason"] == "failed in head: setup: RuntimeError: setup fails"


FAKE_WARM = """
import os, sys
print("compiling", sys.argv[1:])
print("cases", open(os.environ["KERNELGATE_WARM_CASES"]).read())
print("warm-up done in 1 s; 0 failed: []")
sys.exit(int(__import__("os").environ.get("FAKE_WARM_EXIT", "0")))
"""


def test_the_warm_up_runs_both_commits_and_leaves_the_references_to_head(tmp_path, capsys):
    plan = check.Plan("a" * 40, "b" * 40, {}, ["layer_norm"], {}, (1, 1), [], [])
    for role in ("base", "head"):
        tree = tmp_path / role
        (tree / "kernelgate" / "measure").mkdir(parents=True)
        (tree / "kernelgate" / "__init__.py").write_text("")
        (tree / "kernelgate" / "measure" / "__init__.py").write_text("")
        (tree / "kernelgate" / "measure" / "warm.py").write_text(FAKE_WARM)
        env = {"PYTHONPATH": str(tree), "FAKE_WARM_EXIT": "3" if role == "base" else "0"}
        log = tmp_path / "out" / "logs" / f"{role}-worker.log"
        plan.sides[role] = {
            "commit": role[0] * 40,
            "tree": str(tree),
            "python": sys.executable,
            "env": env,
            "log": str(log),
        }
    params = (("shape", "'4096x1024'"), ("dtype", "'float32'"), ("direction", "'fwd'"), ("impl", "'auto'"))
    timed = Case("bench_layer_norm.LayerNorm.time_layer_norm", params)
    bounded = Case("bench_layer_norm.LayerNormMetrics.track_gbps", params)
    check.warm_up(plan, Steps(), {"base": [timed], "head": [timed, bounded]})
    logs = {role: (tmp_path / "out" / "logs" / f"{role}-warm.log").read_text() for role in ("base", "head")}
    assert "--without-references" in logs["base"] and "--without-references" not in logs["head"]
    assert all("'--groups', 'layer_norm'" in text for text in logs.values())
    # each commit's warm-up is told the cases the run measures on it
    assert (
        'cases [["bench_layer_norm.LayerNorm.time_layer_norm", ["4096x1024", "float32", "fwd", "auto"]]]'
        in logs["base"]
    )
    assert '["bench_layer_norm.LayerNormMetrics.track_gbps", ["4096x1024", "float32", "fwd", "auto"]]' in logs["head"]
    printed = capsys.readouterr().out
    assert "base: warm-up done" in printed and "head: warm-up done" in printed
    assert "base's warm-up exited 3" in printed, "a failed warm-up is reported, and the check goes on"


def test_a_shard_warms_the_workloads_of_its_own_cases():
    """A time case warms its own implementation; a metrics case every variant of its case and the references
    its metrics read (measured beside each other; all of them where a metric does not say, as the attention's);
    an implementation with nothing to compile, nothing; and a case warms its own kernel's workloads, never
    another's of the same parameters."""
    from kernelgate.measure import warm

    todo = warm.items()
    ln, attention = "bench_layer_norm.LayerNorm", "bench_attention.AttentionBackward"
    cases = [
        [f"{ln}.time_layer_norm", ["4096x1024", "float32", "fwd", "fused"]],
        [f"{ln}.time_layer_norm", ["4096x1024", "float32", "fwd", "torch"]],  # eager torch: nothing to compile
        [f"{ln}Metrics.track_gbps", ["8192x8192", "bfloat16", "bwd", "auto"]],  # reads no reference
        [f"{ln}Metrics.track_speedup_vs_liger", ["8192x8192", "bfloat16", "bwd", "two_pass"]],
        [f"{attention}.time_backward", ["gqa8-128-causal", "tma"]],
        [f"{attention}Metrics.track_tflops", ["gqa8-64-full", "elem"]],
        ["bench_device.Device.track_copy_peak", []],  # no kernel's: nothing to compile
    ]
    assert warm.for_cases(todo, cases) == [
        item
        for item in todo
        if item == ("layer_norm", "4096x1024", "float32", "fwd", "fused")
        or (item[:4] == ("layer_norm", "8192x8192", "bfloat16", "bwd") and item[-1] != "torch_compile")
        or item == ("attention", "gqa8-128-causal", "tma")
        or item[:2] == ("attention", "gqa8-64-full")
    ]
    assert {item[-1] for item in warm.for_cases(todo, cases) if item[1] == "8192x8192"} == {
        "fused",
        "two_pass",
        "auto",
        "liger",
    }
    assert len({item[-1] for item in warm.for_cases(todo, cases) if item[1] == "gqa8-64-full"}) == 3


class FakeTests:
    """subprocess.Popen for the GPU tests: records when they start, are waited for or killed."""

    events: typing.ClassVar[list] = []

    def __init__(self, argv, **kwargs):
        self.events.append(("start", argv))

    def wait(self):
        self.events.append("wait")
        return 0

    def kill(self):
        self.events.append("kill")


def plan_with_tests(tmp_path) -> check.Plan:
    plan = check.Plan("a" * 40, "b" * 40, {}, ["layer_norm"], {}, (1, 1), ["tests/test_layer_norm.py"], [])
    env = isolation.head_env(tmp_path / "scratch")
    plan.sides["head"] = {"commit": "b" * 40, "tree": str(tmp_path), "python": "python", "env": env, "log": "log"}
    return plan


def test_a_runner_pinned_to_some_cores_sizes_its_processes_by_them(tmp_path, monkeypatch):
    """Four runners on a four-GPU host, each pinned to a quarter of the cores: each warms and tests with its
    own quarter, not with processes for every core of the host."""
    monkeypatch.setattr(os, "sched_getaffinity", lambda pid: set(range(16)), raising=False)
    monkeypatch.setattr(os, "cpu_count", lambda: 64)
    assert parallel.available_cpus() == 16
    assert parallel.default_jobs(12) == 12 and parallel.default_jobs(32) == 14
    monkeypatch.setattr(subprocess, "Popen", FakeTests)
    FakeTests.events = []
    with check.tests_beside(plan_with_tests(tmp_path), tmp_path, Steps()):
        pass
    argv = FakeTests.events[0][1]
    assert argv[argv.index("-n") + 1] == str(min(check.TEST_PROCESSES, 16))


def test_the_gpu_tests_end_before_the_benchmarks_start(tmp_path, monkeypatch):
    """They run beside choosing the cases and the warm-up, never beside a timed benchmark; a step that
    fails beside them stops them."""
    monkeypatch.setattr(subprocess, "Popen", FakeTests)
    FakeTests.events = []
    steps = Steps()
    with check.tests_beside(plan_with_tests(tmp_path), tmp_path, steps):
        FakeTests.events.append("warm-up")
    assert [e if isinstance(e, str) else e[0] for e in FakeTests.events] == ["start", "warm-up", "wait"]
    assert [name for name, _, outcome in steps.times if outcome == "ok"] == ["GPU tests"]
    FakeTests.events = []
    with pytest.raises(check.CheckError), check.tests_beside(plan_with_tests(tmp_path), tmp_path, steps):
        raise check.CheckError("the warm-up failed")
    assert FakeTests.events[1:] == ["kill", "wait"]


def test_a_case_warms_its_own_kernels_workloads_alone():
    """Two kernels with the same parameters: a case of one warms none of the other's workloads."""
    from kernelgate.measure import warm

    todo = [(kernel, "4096x1024", "float32", "fwd", "torch_compile") for kernel in ("layer_norm", "rms_norm")]
    cases = [["bench_layer_norm.LayerNormMetrics.track_speedup_vs_compile", ["4096x1024", "float32", "fwd", "auto"]]]
    assert warm.for_cases(todo, cases) == todo[:1]
