"""kernelgate.explain: two commits' kernels for a case, compiled for sm_90 without a GPU, and the "why" line that
names what changed. Each cause the PR check must explain is made here by changing a real launch: a launch added
to a call, a configuration that spills, a lost 128-bit access, another block size."""

import dataclasses
import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import torch

from kernelgate.explain import __main__ as explain
from kernelgate.explain import changes as changes_module
from kernelgate.explain import profile
from kernelgate.explain.compiled import KernelCode, instruction_mix, kernel_code, occupancy
from kernelgate.explain.diff import changes, table, why
from kernelgate.explain.report import between_runs
from kernelgate.kernels.device import interpreter_mode
from kernelgate.kernels.rms_norm.config import heuristic_config
from kernelgate.kernels.rms_norm.ops import backward_launch, forward_launch
from kernelgate.measure.steps import Steps
from kernelgate.prcheck import check

pytestmark = [
    pytest.mark.skipif(interpreter_mode(), reason="ahead-of-time compile: runs in the compiled pytest process"),
    pytest.mark.xdist_group("explain"),
]


def _rows(n: int, dtype=torch.bfloat16, m: int = 8192):
    x = torch.empty(m, n, dtype=dtype, device="meta")
    return x, torch.empty(n, dtype=dtype, device="meta"), torch.empty(m, dtype=torch.float32, device="meta")


def _forward(n: int, **changed) -> KernelCode:
    x, w, rstd = _rows(n)
    launch = forward_launch(x, w, 1e-6, x, rstd)
    return kernel_code(dataclasses.replace(launch, **changed) if changed else launch)


def test_a_spilling_configuration_is_named_first():
    x, w, rstd = _rows(16384)
    sliced = kernel_code(backward_launch(x, x, w, rstd, x)[0])
    whole_row = dataclasses.replace(heuristic_config("bwd", torch.bfloat16, 16384), row_slices=1, block_n=16384,
                                    num_warps=16)  # fmt: skip
    spilling = kernel_code(backward_launch(x, x, w, rstd, x, whole_row)[0])
    assert spilling.spill_stores > 0 and sliced.spill_stores == 0
    line = why([sliced], [spilling])
    assert line.startswith(
        f"sliced_bwd_kernel → bwd_kernel: spill stores to local memory 0 → {spilling.spill_stores}"
    ), line


def test_a_lost_128_bit_access_is_named():
    # 4104 columns: a multiple of 8 (16 bytes of bf16) but not of 16, so only the launcher's VEC hint gives the
    # kernel 16-byte accesses; without it (VEC=1, as for a misaligned row) they narrow.
    x, w, rstd = _rows(4104)
    launch = forward_launch(x, w, 1e-6, x, rstd)
    aligned = kernel_code(launch)
    narrow = kernel_code(dataclasses.replace(launch, constexprs={**launch.constexprs, "VEC": 1}))
    assert aligned.mix["load 128"] > narrow.mix["load 128"]
    line = why([aligned], [narrow])
    assert "fwd_kernel: 128-bit loads" in line or "fwd_kernel: 128-bit stores" in line, line


def test_another_block_size_is_named():
    x, w, rstd = _rows(1024)
    cfg = heuristic_config("fwd", torch.bfloat16, 1024)
    base = kernel_code(forward_launch(x, w, 1e-6, x, rstd, cfg))
    head = kernel_code(forward_launch(x, w, 1e-6, x, rstd, dataclasses.replace(cfg, num_warps=cfg.num_warps * 2)))
    assert f"fwd_kernel: warps a program {cfg.num_warps} → {cfg.num_warps * 2}" in changes([base], [head])


def test_an_added_launch_is_named_first():
    forward = _forward(4096)
    line = why([forward], [forward, forward])
    assert line.startswith("kernels a call launches 1 → 2 (added: fwd_kernel)"), line
    assert why([forward], [forward]).startswith("the compiled kernels are the same")


def test_occupancy_is_the_tightest_of_an_sms_limits():
    assert occupancy(registers=64, shared=0, threads=512) == 2  # registers: 65536 / (64 * 512)
    assert occupancy(registers=32, shared=0, threads=128) == 16  # threads: 2048 / 128
    assert occupancy(registers=16, shared=0, threads=32) == 32  # blocks
    assert occupancy(registers=33, shared=0, threads=256) == 6  # 40 registers allocated: 65536 / 10240
    assert occupancy(registers=32, shared=100 * 1024, threads=128) == 2  # shared memory
    assert occupancy(registers=255, shared=0, threads=1024) == 0  # does not fit


def test_the_instruction_mix_tells_widths_apart():
    sass = "\n".join(f"        /*{i:04x}*/                   {op} R1, [R2.64] ;" for i, op in enumerate(
        ["LDG.E.128", "LDG.E.64", "LDG.E", "@P0 STG.E.128", "STG.E.U16", "LDGSTS.E.BYPASS.128", "RED.E.ADD.F32",
         "HGMMA.64x128x16.F32", "BAR.SYNC", "FFMA"]))  # fmt: skip
    mix = instruction_mix(sass)
    assert {k: v for k, v in mix.items() if v} == {"load 128": 1, "load 64": 1, "load": 1, "store 128": 1, "store": 1,
                                                  "cp.async 128": 1, "atomic/reduction": 1, "tensor core": 1,
                                                  "barrier": 1, "total": 10}  # fmt: skip


def test_the_command_compiles_a_commits_cases_and_diffs_two(tmp_path, capsys):
    """``compiled`` on each commit's cases, ``diff`` on the two outputs; a case a suite cannot compile says why."""
    rms = "bench_rms_norm.RMSNorm.time_rms_norm('8192x4096', 'bfloat16', 'fwd+bwd', 'auto')"
    ln = "bench_layer_norm.LayerNormMetrics.track_speedup_vs_torch('8192x16384', 'bfloat16', 'bwd', 'auto')"
    attention = "bench_attention.AttentionBackward.time_backward('seed-gqa-192-128-causal', 'tma')"
    assert explain.main(["compiled", rms, ln, attention, "not an id", "--gpu-class", "H200"]) == 0
    head = json.loads(capsys.readouterr().out)
    assert [k["kernel"] for k in head[rms]] == ["fwd_kernel", "bwd_kernel", "column_sum_kernel"]
    assert [k["kernel"] for k in head[ln]] == ["fused_bwd_kernel", "column_sum_kernel"]
    assert (
        "not compiled for comparison" in head[attention]["error"] and "not an asv case id" in head["not an id"]["error"]
    )
    base = {**head, rms: head[rms][:2]}  # base launched no column sum
    (tmp_path / "base.json").write_text(json.dumps(base))
    (tmp_path / "head.json").write_text(json.dumps(head))
    assert explain.main(["diff", str(tmp_path / "base.json"), str(tmp_path / "head.json")]) == 0
    out = capsys.readouterr().out
    assert f"**`{rms}`**\n\n- why: kernels a call launches 2 → 3 (added: column_sum_kernel)" in out
    assert "| column_sum_kernel (head only) |" in out
    assert f"**`{ln}`**\n\n- why: the compiled kernels are the same" in out
    assert "compiled code not compared: base: ValueError: the attention suite's kernels" in out


def test_the_table_shows_each_change_as_base_to_head():
    base, head = _forward(4096), _forward(4096, num_warps=8)
    text = table([base], [head])
    assert text.splitlines()[2].startswith(f"| fwd_kernel | {base.warps} → 8 |"), text


def test_a_red_check_explains_its_worst_failing_cases(tmp_path, monkeypatch):
    """After a red verdict the check compiles the worst failing cases' kernels with each commit's own code, in each
    commit's environment, and writes what changed where the report includes it; cases with no head reading (a
    removal) are not asked for. With no Nsight Compute on the runner it says so, once."""
    monkeypatch.setattr(profile, "ncu", lambda: None)
    root = Path(__file__).resolve().parents[1]
    rms = "bench_rms_norm.RMSNorm.time_rms_norm('8192x1024', 'bfloat16', 'fwd', 'auto')"
    findings = [
        {"verdict": "fail", "badness": 1.2, "remeasure": [["base", rms], ["head", rms]]},
        {"verdict": "fail", "badness": 1.5, "remeasure": []},
        {"verdict": "pass", "badness": 0.9, "remeasure": [["head", "bench_rms_norm.RMSNorm.x('1')"]]},
    ]
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "verdict.json").write_text(json.dumps({"findings": findings}))
    side = {"tree": str(root), "python": sys.executable, "env": dict(os.environ), "log": str(tmp_path / "log")}
    plan = check.Plan("a" * 40, "b" * 40, {"gpu_class": "H200"}, ["rms_norm"], {}, (1, 1), [], [],
                      sides={"base": {**side, "commit": "a" * 40}, "head": {**side, "commit": "b" * 40}})  # fmt: skip
    steps = Steps()
    check.explain(plan, tmp_path, steps)
    text = (tmp_path / check.EXPLAIN).read_text()
    assert text.startswith(f"Not profiled: no Nsight Compute (ncu on PATH, ${profile.NCU_ENV}"), text
    assert f"**`{rms}`**\n\n- why: the compiled kernels are the same" in text
    assert "| fwd_kernel |" in text and [name for name, *_ in steps.times] == ["explain"]


def test_a_red_check_names_an_added_launch_the_compiled_kernels_do_not_show(tmp_path, monkeypatch):
    """A fill added before the kernel is not a Triton launch, so the compiled kernels are the same; Nsight Compute's
    pages of each commit's call (ncu's own, recorded on an H200, handed out by a stand-in ncu) show the added
    kernel, and the why line names it first. The metrics case of the same call is explained with it, once."""
    pages = Path(__file__).parent / "fixtures" / "ncu"
    stand_in = tmp_path / "ncu"
    stand_in.write_text('#!/bin/sh\ncat "$RECORDED_PAGE"\n')
    stand_in.chmod(0o755)
    monkeypatch.setenv(profile.NCU_ENV, str(stand_in))
    root = Path(__file__).resolve().parents[1]
    case = "('8192x2048', 'bfloat16', 'fwd', 'auto')"
    rms = f"bench_rms_norm.RMSNorm.time_rms_norm{case}"
    metric = f"bench_rms_norm.RMSNormMetrics.track_speedup_vs_torch{case}"
    findings = [{"verdict": "fail", "badness": 1.5, "remeasure": [["base", rms], ["head", rms]]},
                {"verdict": "fail", "badness": 1.2, "remeasure": [["head", metric]]}]  # fmt: skip
    (tmp_path / "gate").mkdir()
    (tmp_path / "gate" / "verdict.json").write_text(json.dumps({"findings": findings}))
    sides = {
        role: {"tree": str(root), "python": sys.executable, "log": str(tmp_path / "log"), "commit": commit * 40,
               "env": {**os.environ, "RECORDED_PAGE": str(pages / f"rms-8192x2048-bf16-fwd-{page}.csv")}}
        for role, commit, page in (("base", "a", "base"), ("head", "b", "added-fill"))
    }  # fmt: skip
    plan = check.Plan("a" * 40, "b" * 40, {"gpu_class": "H200"}, ["rms_norm"], {}, (1, 1), [], [], sides=sides)
    check.explain(plan, tmp_path, Steps())
    text = (tmp_path / check.EXPLAIN).read_text()
    assert text.startswith(f"**`{rms}`**, and the same call's `RMSNormMetrics.track_speedup_vs_torch`\n"), text
    assert "- why: kernels the GPU ran for a call 1 → 2 (added vectorized_elementwise_kernel)\n" in text
    assert "| vectorized_elementwise_kernel (head only) |" in text and text.count("**`") == 1


def _git(repo: Path, *argv: str) -> str:
    ident = ["-c", "user.name=test", "-c", "user.email=test@example.com"]
    return subprocess.run(["git", *ident, *argv], cwd=repo, capture_output=True, text=True, check=True).stdout.strip()


def test_a_change_is_explained_for_the_suites_it_selects(tmp_path, monkeypatch):
    """``explain changes`` compiles, at each commit and by its own code, every case of the suites the change
    selects, and says how many cases launch other code and what changed; a change that selects none compiles
    nothing."""
    root = Path(__file__).resolve().parents[1]
    repo = tmp_path / "repo"
    repo.mkdir()
    _git(repo, "init", "-q", "-b", "main")
    for name in check.TRUSTED_FILES:
        (repo / name).write_text((root / name).read_text())
    (repo / "kernels" / "rms_norm").mkdir(parents=True)
    (repo / "kernels" / "rms_norm" / "config.py").write_text("WARPS = 4\n")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "base")
    base = _git(repo, "rev-parse", "HEAD")
    (repo / "kernels" / "rms_norm" / "config.py").write_text("WARPS = 8\n")
    (repo / "docs").mkdir()
    (repo / "docs" / "guide.md").write_text("words\n")
    _git(repo, "commit", "-qam", "head")
    _git(repo, "add", "-A")
    _git(repo, "commit", "-qm", "a doc")
    monkeypatch.chdir(repo)
    one, two = _forward(1024), _forward(1024, num_warps=8)
    cases = [f"bench_rms_norm.RMSNorm.time_rms_norm('8192x{n}', 'bfloat16', 'fwd', 'auto')" for n in (1024, 2048)]
    asked = []

    def compiled_at(repo_, commit, suites, gpu, work):
        asked.append((commit, suites, gpu))
        code = two if commit != base else one
        return {case: [dataclasses.asdict(code if i == 0 else one)] for i, case in enumerate(cases)}

    monkeypatch.setattr(changes_module, "compiled_at", compiled_at)
    text = changes_module.explain_change(base, "HEAD~1", "H200", tmp_path / "work")
    assert [(suites, gpu) for _, suites, gpu in asked] == [(["rms_norm"], "H200")] * 2
    assert "Compiled kernels of 2 cases at both commits: 1 launch other code." in text
    assert f"fwd_kernel: warps a program {one.warps} → 8" in text and f"1 case(s), e.g. `{cases[0]}`" in text
    asked.clear()
    nothing = changes_module.explain_change("HEAD~1", "HEAD", "H200", tmp_path / "work")
    assert "It selects no kernel's group" in nothing and not asked


def test_the_inner_loop_says_what_changed_since_the_saved_run():
    """``nox -s perf -- --explain`` saves each benchmark's compiled kernels and profile in extra_info; compared with
    a saved run, only the benchmarks whose kernels or call changed are shown, each with its why line."""
    pages = Path(__file__).parent / "fixtures" / "ncu"
    measured = {name: [dataclasses.asdict(k) for k in profile.parse((pages / f"{name}.csv").read_text())]
                for name in ("rms-8192x2048-bf16-fwd-base", "rms-8192x2048-bf16-fwd-added-fill")}  # fmt: skip
    kernels = [dataclasses.asdict(_forward(2048))]
    saved = {"test_norm[a]": {"kernels": kernels, "profile": measured["rms-8192x2048-bf16-fwd-base"]},
             "test_norm[b]": {"kernels": kernels}}  # fmt: skip
    assert "of 2 benchmarks are the same as the saved run's" in between_runs(saved, saved)
    fewer_warps = [dataclasses.asdict(_forward(2048, num_warps=_forward(2048).warps // 2))]
    now = {"test_norm[a]": {"kernels": kernels, "profile": measured["rms-8192x2048-bf16-fwd-added-fill"]},
           "test_norm[b]": {"kernels": fewer_warps}}  # fmt: skip
    text = between_runs(saved, now)
    first, second = text.split("test_norm b")  # a name, as the report quotes it (no brackets)
    assert "- why: kernels the GPU ran for a call 1 → 2 (added vectorized_elementwise_kernel)" in first
    assert "warps a program" in second
