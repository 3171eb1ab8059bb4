"""The kernels' suites (kernelgate.cases.SUITES) and what must agree with them, held by tests rather than
by memory: pr-check.toml's groups, the asv modules, the wheel's packages."""

import json
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

from kernelgate.cases import SUITES, suite_of
from kernelgate.prcheck import selection

ROOT = Path(__file__).parents[1]
# The asv benchmarks no kernel owns: the device's own peaks.
KERNEL_FREE = ("bench_device",)


def test_every_suite_has_the_pr_check_group_of_its_name_and_every_group_a_suite():
    groups = selection.load(ROOT / "pr-check.toml").groups
    assert tuple(groups) == tuple(suite.name for suite in SUITES), "the same names, in the same order"
    for suite in SUITES:
        assert any(f"^{suite.module}\\." in pattern for pattern in groups[suite.name].benchmarks), suite.name
        assert f"kernelgate/cases/{suite.name}.py" in groups[suite.name].paths, "a kernel's cases select its group"


def test_every_asv_module_but_the_devices_is_a_suites_and_every_suite_has_one():
    modules = {path.stem for path in (ROOT / "benchmarks").glob("bench_*.py")}
    assert modules == {suite.module for suite in SUITES} | set(KERNEL_FREE)


def test_every_benchmark_belongs_to_the_suite_of_its_module():
    recorded = json.loads((ROOT / "tests" / "fixtures" / "asv_identity.json").read_text())
    for name in recorded:
        suite = suite_of(name)
        assert (suite is None) == name.startswith(KERNEL_FREE), name
        if suite is not None:
            owner = name.split(".")[1].removesuffix("Metrics")
            assert owner in {grid.name for grid in suite.grids}, name


def test_every_suite_names_its_grids_metrics_and_variants_once():
    for suite in SUITES:
        assert len({grid.name for grid in suite.grids}) == len(suite.grids), suite.name
        for grid in suite.grids:
            assert len({m.name for m in grid.metrics}) == len(grid.metrics), grid.name
            assert sum(m.baseline for m in grid.metrics) <= 1, grid.name
            assert not set(grid.variants) & set(grid.references), grid.name
            assert set(suite.jit_references) <= {r for g in suite.grids for r in g.references}, suite.name


@pytest.mark.skipif(sys.platform != "linux", reason="builds the wheel with the local setuptools")
def test_the_wheel_holds_every_package_under_kernels_and_kernelgate(tmp_path):
    """pyproject.toml lists the packages (``kernels/`` installs as ``kernelgate.kernels``): a kernel's new
    package missing from the list would install without it."""
    tree = tmp_path / "tree"
    tracked = subprocess.run(["git", "ls-files", "-z"], cwd=ROOT, capture_output=True, check=True).stdout
    for name in filter(None, tracked.decode().split("\0")):
        if (ROOT / name).is_file():
            (tree / name).parent.mkdir(parents=True, exist_ok=True)
            (tree / name).write_bytes((ROOT / name).read_bytes())
    argv = [sys.executable, "-m", "pip", "wheel", "-q", "--no-deps", "--no-build-isolation", "-w", str(tmp_path), "."]
    subprocess.run(argv, cwd=tree, capture_output=True, check=True)
    (wheel,) = tmp_path.glob("kernelgate-*.whl")
    packed = set(zipfile.ZipFile(wheel).namelist())
    sources = [*(tree / "kernelgate").rglob("*.py"), *(tree / "kernels").rglob("*")]
    for path in sources:
        if path.is_file():
            relative = path.relative_to(tree).as_posix()
            installed = relative if relative.startswith("kernelgate/") else f"kernelgate/{relative}"
            assert installed in packed, f"{relative} is not in the wheel"
