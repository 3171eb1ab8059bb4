"""``python -m kernelgate.tune.options``: each launch option of the broad set switched off alone, and
timed beside the launch that uses it."""

import pytest
import torch

from kernelgate.cases.layer_norm import DTYPES, LayerNormCase
from kernelgate.tune import options

GPU_CLASSES = ["H100", "H200", None]  # the tuned table's classes, and the heuristic alone


def _every_setting():
    for gpu in GPU_CLASSES:
        for variant in ("auto", "two_pass"):
            for direction in ("fwd", "bwd"):
                for case in options.broad_set():
                    yield gpu, variant, direction, case, options.settings(case, variant, direction, gpu, pdl=True)


def test_each_option_off_is_the_launch_without_it_alone():
    for gpu, variant, direction, case, per_option in _every_setting():
        launched = per_option.pop(options.LAUNCHED)
        key = (direction, DTYPES[case.dtype], case.n)
        for option in options.OPTIONS:
            if option.name not in per_option:
                continue
            off, where = per_option[option.name], f"{option.name} off, {case.name} {direction}, {variant} on {gpu}"
            assert off != launched and not option.used(off, *key), where
            if option.name == "row slices":  # its alternative is another kernel
                continue
            for other in options.OPTIONS:
                if other is not option:
                    assert other.used(off, *key) == other.used(launched, *key), f"{where}: {other.name} changed"


def test_every_option_is_used_somewhere_on_the_broad_set():
    # An option no case of the broad set uses cannot show what it buys there.
    used = {name for *_, per_option in _every_setting() for name in per_option if name != options.LAUNCHED}
    assert used == {o.name for o in options.OPTIONS}


def test_the_row_slices_are_timed_against_two_pass():
    case = LayerNormCase(8192, 16384, "bfloat16")
    per_option = options.settings(case, "auto", "bwd", None, pdl=True)
    assert per_option[options.LAUNCHED].cfg.row_slices == 2
    assert per_option["row slices"].variant == "two_pass"


def test_the_summary_gives_each_option_its_range_and_geometric_mean():
    lines = options.summary({"PDL": [1.0, 1.1]})
    assert "| PDL | 2 | 1.000-1.100x | 1.049x |" in lines
    assert "| row slices | 0 | | |" in lines
    assert len(lines) == 2 + len(options.OPTIONS)


def test_plan_runs_without_a_gpu(capsys):
    options.main(["--plan", "--gpu", "H100", "--widths", "3072", "--dtypes", "bfloat16"])
    out = capsys.readouterr().out
    assert "8192x3072-bfloat16 fwd: fused" in out and "head + tail tile" in out and "PDL" in out


def test_without_a_gpu_it_says_so(monkeypatch):
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    with pytest.raises(SystemExit, match="none is visible"):
        options.main(["--widths", "3072"])


@pytest.mark.gpu
def test_each_option_is_timed_beside_the_launch(cuda_device):
    from kernelgate.kernels.device import gpu_class, is_sm90_or_newer

    case = LayerNormCase(2048, 3072, "bfloat16")
    gpu, pdl = gpu_class(torch.cuda.get_device_name(0)), is_sm90_or_newer(0)
    per_option = options.settings(case, "auto", "fwd", gpu, pdl)
    assert "head + tail tile" in per_option and ("PDL" in per_option) == pdl
    ratios = options.measure(case, "fwd", per_option, rounds=1)
    assert set(ratios) == set(per_option) - {options.LAUNCHED}
    assert all(0.2 < r < 5 for r in ratios.values()), ratios
