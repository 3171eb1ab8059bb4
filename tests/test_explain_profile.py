"""kernelgate.explain.profile: Nsight Compute's raw pages of one call read into kernel profiles, and the changes
between two commits' named. The pages in tests/fixtures/ncu are ncu's own output on an H200, for the RMSNorm's
bf16 forward at 8192 rows: as it is, and with a fill of the output added before the kernel (an added launch)."""

import dataclasses
from pathlib import Path

import pytest

from kernelgate.explain import profile

PAGES = Path(__file__).parent / "fixtures" / "ncu"


def _page(name: str) -> str:
    return (PAGES / f"{name}.csv").read_text()


def test_a_recorded_page_reads_as_the_kernels_of_the_call():
    """One kernel for the forward, its DRAM reads the bytes of x (8192 x 2048 bf16) and its launch what the
    launcher asked for; every field in its unit, the leading stalls the largest."""
    (kernel,) = profile.parse(_page("rms-8192x2048-bf16-fwd-base"))
    assert kernel.kernel == "fwd_kernel"
    assert kernel.dram_read_mb == pytest.approx(8192 * 2048 * 2 / 1e6, rel=0.02)
    assert 0 < kernel.duration_us < 1000 and 0 < kernel.occupancy_pct <= 100
    assert (kernel.grid, kernel.block) == (4096, 128) and kernel.registers > 0 and kernel.instructions > 1e6
    stalls = list(kernel.stalls.values())
    assert len(stalls) == profile.SHOWN_STALLS and stalls == sorted(stalls, reverse=True)


def test_an_added_launch_is_named_first():
    base = profile.parse(_page("rms-8192x2048-bf16-fwd-base"))
    head = profile.parse(_page("rms-8192x2048-bf16-fwd-added-fill"))
    assert [k.kernel for k in head] == ["vectorized_elementwise_kernel", "fwd_kernel"]
    found = sorted(profile.changes(base, head), key=lambda change: -change[0])
    assert found[0][1] == "kernels the GPU ran for a call 1 → 2 (added vectorized_elementwise_kernel)"
    assert not [phrase for _, phrase in found if phrase.startswith("fwd_kernel:")], "the kernel itself ran alike"
    table = profile.table(base, head)
    assert "| vectorized_elementwise_kernel (head only) |" in table and "| fwd_kernel |" in table


def test_what_changed_in_a_kernel_is_named_by_its_weight():
    """Fewer warps a block halve the achieved occupancy (as the GPU measured for 8192 columns at half the warps);
    more DRAM traffic outweighs it; a time alone is named last."""
    (base,) = profile.parse(_page("rms-8192x8192-bf16-fwd-base"))
    head = dataclasses.replace(base, occupancy_pct=base.occupancy_pct / 2, block=base.block / 2)
    assert [p for _, p in profile.changes([base], [head])] == [
        f"fwd_kernel: achieved occupancy {base.occupancy_pct:.0f}% → {head.occupancy_pct:.0f}%"
    ]
    spilled = dataclasses.replace(head, dram_write_mb=base.dram_write_mb * 2, duration_us=base.duration_us * 1.5)
    ranked = [p for _, p in sorted(profile.changes([base], [spilled]), key=lambda change: -change[0])]
    assert ranked[0].startswith("fwd_kernel: DRAM traffic") and ranked[-1].endswith("us on the GPU")


@pytest.mark.parametrize(
    ("edit", "message"),
    [
        (lambda page: "==PROF== Connected\n==ERROR== ERR_NVGPUCTRPERM - no permission\n", "ERR_NVGPUCTRPERM"),
        (lambda page: page.replace('"gpu__time_duration.sum"', '"gpu__time"'), "lacks gpu__time_duration.sum"),
        (lambda page: page.replace('"ns"', '"byte"'), "a time in 'byte'"),
        (lambda page: page.rstrip("\n") + ',"extra"\n', "a row of"),
    ],
    ids=["no-permission", "missing-metric", "wrong-unit", "ragged-row"],
)
def test_a_page_that_is_not_a_profile_is_refused_by_name(edit, message):
    """Head's process printed the page: what is not ncu's raw page of the call is refused, saying why."""
    with pytest.raises(profile.ProfileError, match=message):
        profile.parse(edit(_page("rms-8192x2048-bf16-fwd-base")))


def test_the_profiled_command_keeps_the_profiler_to_one_call():
    argv = profile.ncu_argv("ncu", "/venv/bin/python", "bench_x.X.time_x('a')")
    assert argv[:3] == ["ncu", "--profile-from-start", "off"] and "--csv" in argv
    assert argv[-5:] == ["/venv/bin/python", "-m", "kernelgate.explain", "call", "bench_x.X.time_x('a')"]
