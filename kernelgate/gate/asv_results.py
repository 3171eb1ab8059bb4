"""asv's result files for one machine and commit, read with asv's own loaders.

Layout (``asv run``): ``<results>/benchmarks.json`` describes the benchmarks
(parameter names, units); ``<results>/<machine>/machine.json`` the machine;
``<results>/<machine>/<commit[:8]>-<env>.json`` the values, samples and
statistics of each parameter combination. asv runs one benchmark suite (the
working tree's) against every commit, so benchmarks.json describes head. A value is None when the benchmark
failed or timed out, NaN when it was skipped or returned NaN.
"""

import ast
import dataclasses
import itertools
import math
import re
from pathlib import Path

from asv import util
from asv.benchmarks import Benchmarks
from asv.machine import Machine
from asv.results import Results

from kernelgate.gate import GateError

# What makes two result sets comparable: the same runner and the same GPU.
MACHINE_IDENTITY = ("machine", "gpu", "gpu_class")


@dataclasses.dataclass(frozen=True)
class Case:
    """One parameter combination of one benchmark."""

    benchmark: str  # asv's name: module.Class.method
    params: tuple[tuple[str, str], ...] = ()  # (name, asv's repr of the value), in declared order

    def value(self, name: str) -> str | None:
        """The parameter's value as written in the benchmark (``'fwd'`` -> ``fwd``)."""
        return next((_unquote(raw) for key, raw in self.params if key == name), None)

    @property
    def label(self) -> str:
        return ", ".join(_unquote(raw) for _, raw in self.params) or "-"

    @property
    def asv_id(self) -> str:
        """The name asv's ``--bench`` regex is matched against."""
        if not self.params:
            return self.benchmark
        return f"{self.benchmark}({', '.join(raw for _, raw in self.params)})"

    @property
    def timed(self) -> bool:
        """A sampled wall-clock time (lower is better), as opposed to a tracked value."""
        return self.benchmark.rsplit(".", 1)[-1].startswith("time_")

    def replaced(self, changes: dict[str, str]) -> "Case":
        return Case(self.benchmark, tuple((k, repr(changes[k]) if k in changes else raw) for k, raw in self.params))


def _unquote(raw: str) -> str:
    try:
        return str(ast.literal_eval(raw))
    except (ValueError, SyntaxError):
        return raw


@dataclasses.dataclass(frozen=True)
class Measurement:
    value: float | None  # None: failed or timed out; NaN: skipped or returned NaN
    samples: list[float] | None = None
    stats: dict | None = None

    @property
    def finite(self) -> bool:
        return self.value is not None and math.isfinite(self.value)


@dataclasses.dataclass(frozen=True)
class Run:
    """One commit's results on one machine."""

    commit: str
    machine: dict  # asv's params of the run: the machine file's keys plus the environment's
    measurements: dict[Case, Measurement]
    units: dict[str, str]  # benchmark -> unit

    @property
    def benchmarks(self) -> set[str]:
        return {case.benchmark for case in self.measurements}

    def selected(self, patterns: list[str]) -> "Run":
        """Only the cases asv's ``--bench`` would select with these regexes."""
        kept = {c: m for c, m in self.measurements.items() if any(re.search(p, c.asv_id) for p in patterns)}
        return dataclasses.replace(self, measurements=kept)


def load_benchmarks(results_dir: Path) -> dict[str, dict]:
    """benchmarks.json: what asv discovered, by name."""
    path = Path(Benchmarks.get_benchmark_file_path(str(results_dir)))
    if not path.is_file():
        raise GateError(f"no {path}: not an asv results directory, or asv never ran")
    try:
        return util.load_json(str(path), api_version=Benchmarks.api_version)
    except util.UserError as exc:
        raise GateError(f"corrupted {path}: {exc}") from exc


def load_run(results_dir: Path, machine: str, commit: str, role: str) -> Run:
    """The results of ``commit`` (a hash or an 8+ character prefix) on ``machine``."""
    machine_dir = results_dir / machine
    if not (machine_dir / "machine.json").is_file():
        present = sorted(p.name for p in results_dir.iterdir() if p.is_dir()) if results_dir.is_dir() else []
        raise GateError(f"no results for machine {machine!r} in {results_dir} (machines there: {present or 'none'})")
    _check_machine_file(machine_dir / "machine.json", machine)
    paths = sorted(machine_dir.glob(f"{commit[:8]}-*.json"))
    if len(paths) != 1:
        found = "none" if not paths else ", ".join(p.name for p in paths)
        raise GateError(f"expected one asv result file for {role} commit {commit[:8]} on {machine!r}, found {found}")
    try:
        results = Results.load(str(paths[0]), machine_name=machine)
    except util.UserError as exc:
        raise GateError(f"{role} results: {exc}") from exc
    if not results.commit_hash.startswith(commit):
        raise GateError(f"{paths[0]} holds commit {results.commit_hash}, not the {role} commit {commit}")
    benchmarks = load_benchmarks(results_dir)
    measurements = {}
    for name in results.get_all_result_keys():
        if name not in benchmarks and role == "head":
            raise GateError(f"{paths[0]}: {name} is not described in benchmarks.json (stale or corrupted results)")
        measurements.update(_measurements(results, name, benchmarks.get(name), paths[0]))
    if not measurements:
        raise GateError(f"{paths[0]} holds no benchmark results")
    units = {name: benchmarks.get(name, {}).get("unit", "") for name in results.get_all_result_keys()}
    return Run(results.commit_hash, results.params, measurements, units)


def _check_machine_file(path: Path, machine: str) -> None:
    try:
        described = util.load_json(str(path), api_version=Machine.api_version).get("machine")
    except util.UserError as exc:
        raise GateError(f"corrupted {path}: {exc}") from exc
    if described != machine:
        raise GateError(f"{path} describes machine {described!r}, not {machine!r}")


def _measurements(results: Results, name: str, meta: dict | None, path: Path) -> dict[Case, Measurement]:
    """``meta`` is None for a benchmark the suite no longer has (base only): asv's default names then."""
    grid = results.get_result_params(name)
    names = meta["param_names"] if meta else [f"param{i}" for i in range(1, len(grid) + 1)]
    if len(names) != len(grid):
        raise GateError(f"{path}: {name} has {len(grid)} parameters, benchmarks.json names {len(names)}")
    try:
        columns = zip(
            itertools.product(*grid),
            results.get_result_value(name, grid),
            results.get_result_samples(name, grid),
            results.get_result_stats(name, grid),
            strict=True,
        )
        cases = {
            Case(name, tuple(zip(names, combo, strict=True))): Measurement(_number(value), samples, stats)
            for combo, value, samples, stats in columns
        }
    except (TypeError, ValueError) as exc:
        raise GateError(f"corrupted {path}: benchmark {name}: {exc}") from exc
    return cases


def _number(value) -> float | None:
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int | float):
        raise ValueError(f"result {value!r} is not a number")
    return float(value)


def check_same_machine(base: Run, head: Run) -> None:
    """Base and head must come from the same runner and GPU, and say which GPU that is."""
    for key in MACHINE_IDENTITY:
        if head.machine.get(key) is None:
            raise GateError(
                f"head results lack the machine's {key!r}: register the asv machine with the bench session's GPU fields"
            )
        if base.machine.get(key) != head.machine.get(key):
            raise GateError(
                f"results from different machines: base {key}={base.machine.get(key)!r}, "
                f"head {key}={head.machine.get(key)!r}"
            )
