"""The kernels' suites (kernelgate.cases.SUITES) and what must agree with them, held by tests rather than
by memory: pr-check.toml's groups, the asv modules, the wheel's packages."""

import ast
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


def _project_file(module: str) -> Path | None:
    """The repository file of one of the project's modules (``kernels/`` installs as ``kernelgate.kernels``)."""
    if module != "kernelgate" and not module.startswith("kernelgate."):
        return None
    parts = module.split(".")[1:]
    folder = ROOT / ("kernels" if parts[:1] == ["kernels"] else "kernelgate")
    parts = parts[1:] if parts[:1] == ["kernels"] else parts
    for path in (folder.joinpath(*parts).with_suffix(".py"), folder.joinpath(*parts, "__init__.py")):
        if path.is_file():
            return path
    return None


def _imported_files(start: list[Path], shared: tuple[str, ...]) -> set[Path]:
    """The project's files that importing ``start`` runs: their imports followed, the packages' __init__ too,
    but not out of ``shared`` files (pr-check.toml's ``everything``: the harness and the registry, which import
    every suite; a change to one selects every group already)."""
    seen, todo = set(), list(start)
    while todo:
        path = todo.pop()
        if path in seen:
            continue
        seen.add(path)
        if selection.matches(path.relative_to(ROOT).as_posix(), shared):
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            names = []
            if isinstance(node, ast.Import):
                names = [alias.name for alias in node.names]
            elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
                names = [node.module, *(f"{node.module}.{alias.name}" for alias in node.names)]
            for name in names:
                parts = name.split(".")
                for i in range(1, len(parts) + 1):  # a module's packages run their __init__ first
                    found = _project_file(".".join(parts[:i]))
                    if found is not None:
                        todo.append(found)
    return seen


def test_a_change_to_any_module_a_kernel_runs_selects_its_group():
    """Whatever a suite's kernel package, cases module and asv module import, followed through the project's
    own modules, selects the suite's group when a pull request changes it: its own paths claim it, or
    ``everything`` does. A kernel that reuses another's module is checked when that module changes."""
    groups = selection.load(ROOT / "pr-check.toml")
    for suite in SUITES:
        start = [*(ROOT / "kernels" / suite.name).rglob("*.py"), ROOT / "kernelgate" / "cases" / f"{suite.name}.py",
                 ROOT / "benchmarks" / f"{suite.module}.py"]  # fmt: skip
        for path in sorted(_imported_files(start, groups.everything)):
            relative = path.relative_to(ROOT).as_posix()
            chosen = selection.select(groups, [relative]).groups
            assert suite.name in chosen, f"a change to {relative}, which {suite.name} runs, does not select it"


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
            for metric in grid.metrics:  # what the warm-up compiles for a metric is among what the grid times
                assert set(metric.references or ()) <= set(grid.references), (grid.name, metric.name)
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
