"""The main job (``nox -s bench``) on a small suite in a git checkout of its own: asv result files
under HEAD, a partial run that keeps the rest, failures that fail the job, cases spread over GPUs."""

import json
import math
import subprocess
import time

import pytest
import torch
from asv.results import Results
from support import fake_suite

from kernelgate.measure import main_job, references, workers

ASV_CONF = {"version": 1, "project": "fake", "repo": ".", "branches": ["main"], "environment_type": "existing",
            "benchmark_dir": "benchmarks", "results_dir": ".asv/results", "html_dir": ".asv/html"}  # fmt: skip


@pytest.fixture()
def checkout(tmp_path, monkeypatch):
    fake_suite.write(tmp_path)
    (tmp_path / "asv.conf.json").write_text(json.dumps(ASV_CONF))
    (tmp_path / ".gitignore").write_text(".asv/\n")
    for command in (["init", "-q", "-b", "main"], ["add", "."], ["-c", "user.name=t", "-c", "user.email=t@t",
                                                                  "commit", "-q", "-m", "suite"]):  # fmt: skip
        subprocess.run(["git", *command], cwd=tmp_path, check=True)
    monkeypatch.chdir(tmp_path)
    # The table knows the project's kernels only (tests/test_report.py); here it names what it would print.
    monkeypatch.setattr(main_job, "print_table", lambda machine, commit: print(f"table of {commit[:8]} on {machine}"))
    return tmp_path


def _results(checkout) -> Results:
    commit = subprocess.run(["git", "rev-parse", "HEAD"], capture_output=True, text=True, check=True).stdout.strip()
    (path,) = (checkout / ".asv" / "results").glob(f"*/{commit[:8]}-{main_job.ENV_NAME}.json")
    return Results.load(str(path))


def _values(results: Results, name: str) -> list:
    return results.get_result_value(name, results.get_result_params(name))


def test_results_filed_under_head_and_a_partial_run_keeps_the_rest(checkout, capsys):
    assert main_job.main(["-b", r"Fast\.time_sum\('a'\)", "-b", "Devices"]) == 0
    first = _results(checkout)
    measured, unselected = _values(first, "bench_fake.Fast.time_sum")
    assert measured > 0 and unselected is None, "the case not selected is not measured"
    assert _values(first, "bench_fake.Devices.track_visible") == [-1.0] * 4
    assert (checkout / ".asv" / "html" / "index.html").exists(), "asv publish built the history"
    assert "5 cases of" in capsys.readouterr().out, "1 time case and 4 track values"

    assert main_job.main(["-b", r"Fast\.time_sum\('b'\)"]) == 0
    kept, skipped = _values(_results(checkout), "bench_fake.Fast.time_sum")
    assert kept == measured and math.isnan(skipped), "the earlier case is kept, the new one (skipped) added"
    assert _values(_results(checkout), "bench_fake.Devices.track_visible") == [-1.0] * 4


def test_a_failed_case_is_recorded_and_fails_the_job(checkout, capsys):
    assert main_job.main(["-b", "Broken|Fast"]) == 1
    out = capsys.readouterr().out
    assert "FAILED bench_fake.Broken.time_nothing: setup: RuntimeError: setup fails" in out
    assert "1 of 3 cases failed" in out
    assert _values(_results(checkout), "bench_fake.Broken.time_nothing") == [None]
    assert _values(_results(checkout), "bench_fake.Fast.time_sum")[0] > 0, "the others are recorded"


def test_a_pattern_that_matches_nothing_is_refused(checkout):
    with pytest.raises(SystemExit, match="no benchmark case matches"):
        main_job.main(["-b", "NoSuchBenchmark"])


def test_a_suite_that_does_not_load_is_named(checkout):
    (checkout / "benchmarks" / "bench_broken.py").write_text("raise ImportError('a broken benchmark module')\n")
    with pytest.raises(SystemExit, match="the asv suite did not load"):
        main_job.main([])


def test_each_gpu_warms_and_measures_its_share_once(checkout, monkeypatch):
    warmed = {}
    monkeypatch.setattr(
        main_job, "warm_up", lambda share, side, jobs: warmed.setdefault(side.env["CUDA_VISIBLE_DEVICES"], share)
    )
    commit = "c" * 40
    suite = workers.discover([main_job.head_side(commit, None)])["head"]
    cases = workers.selected(workers.measured_cases(suite), ["Devices|Fast"])
    records = main_job.measure(commit, cases, ["3", "5"], samples=2)
    assert sorted(records) == sorted(c.asv_id for c in cases), "every case, once"
    assert sorted(c.asv_id for share in warmed.values() for c in share) == sorted(records), (
        "each GPU warms its own share"
    )
    gpus = {records[c.asv_id]["value"] for c in cases if c.kind == "track"}
    assert gpus == {3.0, 5.0}, "both GPUs' workers measured, each seeing only its own GPU"
    # A case's variants stay on one GPU, as the PR check's shards keep them.
    for case in ("a", "b"):
        assert len({records[f"bench_fake.Devices.track_visible('{case}', '{v}')"]["value"] for v in ("v1", "v2")}) == 1
    assert len(records["bench_fake.Fast.time_sum('a')"]["samples"]) == 2


def test_no_gpu_measures_before_every_warm_up_has_ended(checkout, monkeypatch):
    """A warm-up compiles in several processes: a GPU that measured beside it would read host costs on a busy CPU."""
    events = []

    def warm_up(share, side, jobs):
        time.sleep(0.5 if side.env["CUDA_VISIBLE_DEVICES"] == "3" else 0.0)  # GPU 3's warm-up ends last
        events.append("warmed")

    def measure(*args, **kwargs):
        events.append("measuring")
        return measure_share(*args, **kwargs)

    measure_share = workers.measure
    monkeypatch.setattr(main_job, "warm_up", warm_up)
    monkeypatch.setattr(workers, "measure", measure)
    commit = "c" * 40
    suite = workers.discover([main_job.head_side(commit, None)])["head"]
    main_job.measure(commit, workers.selected(workers.measured_cases(suite), ["Devices|Fast"]), ["3", "5"], samples=1)
    assert events == ["warmed", "warmed", "measuring", "measuring"]


def test_the_gpus_must_be_one_kind_and_present(monkeypatch):
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 2)
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: ["NVIDIA H100", "NVIDIA H200"][i])
    monkeypatch.delenv("CUDA_VISIBLE_DEVICES", raising=False)
    with pytest.raises(SystemExit, match="visible GPUs differ"):
        main_job.visible_gpus(None)
    assert main_job.visible_gpus(1) == ["0"]
    with pytest.raises(SystemExit, match="--gpus 3: this machine has 2"):
        main_job.visible_gpus(3)
    monkeypatch.setenv("CUDA_VISIBLE_DEVICES", "4,6")
    monkeypatch.setattr(torch.cuda, "get_device_name", lambda i: "NVIDIA H100")
    assert main_job.visible_gpus(None) == ["4", "6"], "the devices this process was given, by their ids"
    monkeypatch.setattr(torch.cuda, "device_count", lambda: 0)
    with pytest.raises(SystemExit, match="torch sees none"):
        main_job.visible_gpus(None)


def test_unknown_arguments_are_refused_by_name(capsys):
    with pytest.raises(SystemExit):
        main_job.parse_args(["--quick"])
    assert "unrecognized arguments: --quick" in capsys.readouterr().err


def test_main_records_the_references_its_gpus_timed_under_each_suites_environment(checkout, monkeypatch):
    """Each GPU's worker appends the references its metrics timed; the main job stores them per suite, under
    that suite's environment, where the PR check reads them (``kernelgate.measure.references``)."""
    monkeypatch.setattr(references, "gpu_settings", lambda: {"name": "NVIDIA H200"})
    monkeypatch.setenv(references.STORE_ENV, str(checkout / "store"))
    for gpu, lines in (("0", [["RMSNorm/8192x1024-bfloat16-fwd", {"torch": 0.02}]]),
                       ("1", [["LayerNormWidths/8192x768-float32-bwd", {"liger": 0.05}],
                              ["RMSNorm/8192x2048-bfloat16-fwd", {"torch": 0.04}]])):  # fmt: skip
        path = main_job._times_file(gpu)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text("".join(json.dumps(line) + "\n" for line in lines))
        assert main_job.head_side("c" * 40, gpu).env[references.RECORD_ENV] == str(path.resolve())
    main_job.record_references("c" * 40, ["0", "1"])
    read = lambda path: (checkout / path).read_bytes() if (checkout / path).is_file() else None
    norms = {suite: references.lookup(checkout / "store", references.environment(suite, read))
             for suite in ("rms_norm", "layer_norm")}  # fmt: skip
    assert norms["rms_norm"]["times"] == {"RMSNorm/8192x1024-bfloat16-fwd": {"torch": 0.02},
                                          "RMSNorm/8192x2048-bfloat16-fwd": {"torch": 0.04}}  # fmt: skip
    assert norms["layer_norm"]["times"] == {"LayerNormWidths/8192x768-float32-bwd": {"liger": 0.05}}
    assert norms["rms_norm"]["commit"] == "c" * 40
