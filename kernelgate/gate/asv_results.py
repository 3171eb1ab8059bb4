"""asv's result files for one machine and two commits, read with asv's own loaders.

Layout (``asv run``): ``<results>/benchmarks.json`` describes head's benchmark suite
(parameter names, units); ``<results>/<machine>/machine.json`` the machine;
``<results>/<machine>/<commit[:8]>-<env>.json`` the values, samples and statistics
of each parameter combination. When each commit is measured with its own suite,
a benchmarks.json written from base's checkout describes base's (``--base-suite``);
without one, base's results are read with head's description. A value is None when
the benchmark failed or timed out, NaN when it was skipped or returned NaN. A file
that is not what asv writes is a GateError naming it.
"""

import dataclasses
import functools
import itertools
import math
import re
from pathlib import Path

from asv import util
from asv.benchmarks import Benchmarks
from asv.machine import Machine
from asv.results import Results

from kernelgate.asv_case import Case, suite_cases
from kernelgate.gate import GateError

# What makes two result sets comparable: the runner, its GPU and the settings and software that change
# the numbers (kernelgate.measure.device_info's keys). Results older than a key lack it on both sides.
IDENTITY = (
    "machine", "gpu", "gpu_class", "gpu_driver", "gpu_app_clock_sm", "gpu_sm_clock_max", "gpu_power_limit",
    "cuda", "torch", "triton", "tilelang",
)  # fmt: skip
# Every result must name these: the report names the GPU, and the thresholds apply by GPU class.
REQUIRED_IDENTITY = ("machine", "gpu", "gpu_class")

# What asv's loaders raise on a file of an unexpected form: bytes that are not UTF-8 (a ValueError),
# invalid JSON, or JSON of the wrong types or shapes.
_MALFORMED = (util.UserError, ValueError, TypeError, KeyError, IndexError, AttributeError)


@dataclasses.dataclass(frozen=True)
class Measurement:
    value: float | None  # None: failed or timed out; NaN: skipped or returned NaN
    samples: list[float] | None = None
    stats: dict | None = None
    error: str | None = None  # why it failed, where the run that measured it said (the gate's --failures)

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
    suite: frozenset[Case] | None  # every case of the commit's own benchmark suite; None: not known

    @property
    def benchmarks(self) -> set[str]:
        return {case.benchmark for case in self.measurements}

    @functools.cached_property
    def cases(self) -> frozenset[Case]:
        """Every case the commit is known to have: its suite's (where known) and its results'."""
        return (self.suite or frozenset()).union(self.measurements)

    def selected(self, patterns: list[str], ids: frozenset[str] = frozenset()) -> "Run":
        """Only the measurements of the cases asv's ``--bench`` would select with these regexes, and those
        named in ``ids``. The suite stays whole: what a pull request removes, or leaves a rule without,
        is judged whatever was measured."""
        compiled = [re.compile(p) for p in patterns]

        def chosen(case: Case) -> bool:
            return case.asv_id in ids or any(p.search(case.asv_id) for p in compiled)

        kept = {c: m for c, m in self.measurements.items() if chosen(c)}
        return dataclasses.replace(self, measurements=kept)

    def with_errors(self, reasons: dict[str, str]) -> "Run":
        """The failed measurements with the reason ``reasons`` gives for their case id, if it gives one."""
        failed = {case for case, m in self.measurements.items() if m.value is None and case.asv_id in reasons}
        measurements = {
            case: dataclasses.replace(m, error=reasons[case.asv_id]) if case in failed else m
            for case, m in self.measurements.items()
        }
        return dataclasses.replace(self, measurements=measurements)


def load_suite(path: Path) -> dict[str, dict]:
    """A benchmarks.json: what asv discovered, by name; checked for the keys the gate reads."""
    if not path.is_file():
        raise GateError(f"no {path}: no asv benchmark suite description there")
    try:
        suite = util.load_json(str(path), api_version=Benchmarks.api_version)
        if not isinstance(suite, dict):
            raise ValueError("not a table of benchmarks")
        for name, meta in suite.items():
            _check_described(name, meta)
    except OSError as exc:
        raise GateError(f"cannot read {path}: {exc}") from exc
    except _MALFORMED as exc:
        raise GateError(f"corrupted {path}: {_error(exc)}") from exc
    return suite


def _check_described(name: str, meta) -> None:
    if not isinstance(meta, dict):
        raise ValueError(f"{name}: not a table")
    names, grid = meta.get("param_names"), meta.get("params")
    if not (isinstance(names, list) and all(isinstance(n, str) for n in names)):
        raise ValueError(f"{name}: param_names {names!r} is not a list of strings")
    _check_grid(grid, name)
    if len(names) != len(grid):
        raise ValueError(f"{name}: {len(names)} param_names for {len(grid)} parameters")
    if not isinstance(meta.get("unit", ""), str):
        raise ValueError(f"{name}: unit {meta['unit']!r} is not a string")


def _check_grid(grid, name: str) -> None:
    """asv writes each parameter's values as a list of their reprs."""
    if not (isinstance(grid, list) and all(isinstance(v, list) and all(isinstance(x, str) for x in v) for v in grid)):
        raise ValueError(f"{name}: params {grid!r} is not a list of lists of strings")


def load_runs(results_dir: Path, machine: str, base: str, head: str, base_suite: Path | None) -> tuple[Run, Run]:
    """The results of ``base`` and ``head`` (hashes or 8+ character prefixes) on ``machine``, refused
    unless they are comparable and agree with the machine file."""
    machine_file = results_dir / machine / "machine.json"
    if not machine_file.is_file():
        present = sorted(p.name for p in results_dir.iterdir() if p.is_dir()) if results_dir.is_dir() else []
        raise GateError(f"no results for machine {machine!r} in {results_dir} (machines there: {present or 'none'})")
    described = _machine_file(machine_file, machine)
    head_suite = load_suite(Path(Benchmarks.get_benchmark_file_path(str(results_dir))))
    if base_suite is None:
        base_run = _load_run(machine_file.parent, base, "base", head_suite, own_suite=False)
    else:
        base_run = _load_run(machine_file.parent, base, "base", load_suite(base_suite), own_suite=True)
    head_run = _load_run(machine_file.parent, head, "head", head_suite, own_suite=True)
    check_comparable(base_run, head_run)
    mismatch = _differences("machine.json", described, "results", head_run.machine)
    if mismatch:
        raise GateError(f"{machine_file} disagrees with the results filed under it: {mismatch}")
    return base_run, head_run


def _machine_file(path: Path, machine: str) -> dict:
    try:
        described = util.load_json(str(path), api_version=Machine.api_version)
        if not isinstance(described, dict):
            raise ValueError("not a table of machine keys")
    except OSError as exc:
        raise GateError(f"cannot read {path}: {exc}") from exc
    except _MALFORMED as exc:
        raise GateError(f"corrupted {path}: {_error(exc)}") from exc
    if described.get("machine") != machine:
        raise GateError(f"{path} describes machine {described.get('machine')!r}, not {machine!r}")
    return described


def _load_run(machine_dir: Path, commit: str, role: str, suite: dict[str, dict], own_suite: bool) -> Run:
    """``own_suite``: ``suite`` describes this commit's benchmarks (else head's describe base's)."""
    paths = sorted(machine_dir.glob(f"{commit[:8]}-*.json"))
    if len(paths) != 1:
        found = "none" if not paths else ", ".join(p.name for p in paths)
        raise GateError(
            f"expected one asv result file for {role} commit {commit[:8]} on {machine_dir.name!r}, found {found}"
        )
    path = paths[0]
    try:
        results = Results.load(str(path), machine_name=machine_dir.name)
        return _run(results, path, commit, role, suite, own_suite)
    except OSError as exc:
        raise GateError(f"{role} results: cannot read {path}: {exc}") from exc
    except _MALFORMED as exc:
        raise GateError(f"{role} results: corrupted {path}: {_error(exc)}") from exc


def _run(results: Results, path: Path, commit: str, role: str, suite: dict[str, dict], own_suite: bool) -> Run:
    if not results.commit_hash.startswith(commit):
        raise GateError(f"{path} holds commit {results.commit_hash}, not the {role} commit {commit}")
    measurements = {}
    for name in results.get_all_result_keys():
        if name not in suite and own_suite:
            raise GateError(f"{path}: {name} is not described in {role}'s benchmarks.json (stale or corrupted results)")
        measurements.update(_measurements(results, name, suite.get(name)))
    if not measurements:
        raise GateError(f"{path} holds no benchmark results")
    units = {name: suite.get(name, {}).get("unit", "") for name in results.get_all_result_keys()}
    cases = frozenset(suite_cases(suite)) if own_suite else None
    return Run(results.commit_hash, results.params, measurements, units, cases)


def _measurements(results: Results, name: str, meta: dict | None) -> dict[Case, Measurement]:
    """``meta`` is None for a benchmark the suite does not describe (base only): asv's default names then."""
    grid = results.get_result_params(name)
    _check_grid(grid, name)
    names = meta["param_names"] if meta else [f"param{i}" for i in range(1, len(grid) + 1)]
    if len(names) != len(grid):
        raise ValueError(f"{name} has {len(grid)} parameters, benchmarks.json names {len(names)}")
    columns = zip(
        itertools.product(*grid),
        results.get_result_value(name, grid),
        results.get_result_samples(name, grid),
        results.get_result_stats(name, grid),
        strict=True,
    )
    return {
        Case(name, tuple(zip(names, combo, strict=True))): _measurement(name, value, samples, stats)
        for combo, value, samples, stats in columns
    }


def _measurement(name: str, value, samples, stats) -> Measurement:
    if not (value is None or _is_number(value)):
        raise ValueError(f"{name}: result {value!r} is not a number")
    if not (
        samples is None or (isinstance(samples, list) and all(_is_number(s) and math.isfinite(s) for s in samples))
    ):
        raise ValueError(f"{name}: samples {samples!r} are not a list of finite numbers")
    # asv compare's test falls back on the 99% confidence interval when samples are few.
    if samples and not (isinstance(stats, dict) and all(_is_number(stats.get(k)) for k in ("ci_99_a", "ci_99_b"))):
        raise ValueError(f"{name}: samples recorded without their statistics (ci_99_a, ci_99_b): {stats!r}")
    return Measurement(None if value is None else float(value), samples, stats)


def _is_number(value) -> bool:
    return isinstance(value, int | float) and not isinstance(value, bool)


def _is_finite(value) -> bool:
    return _is_number(value) and math.isfinite(value)


def _error(exc: Exception) -> str:
    return str(exc) if isinstance(exc, util.UserError | ValueError) else f"{type(exc).__name__}: {exc}"


def check_comparable(base: Run, head: Run) -> None:
    """Base and head must have been measured on the same runner, GPU, settings and software, and say which GPU."""
    for key in REQUIRED_IDENTITY:
        if head.machine.get(key) is None:
            raise GateError(
                f"head results lack the machine's {key!r}: register the asv machine with the bench session's GPU fields"
            )
    mismatch = _differences("base", base.machine, "head", head.machine)
    if mismatch:
        raise GateError(f"base and head are not comparable, measured under different conditions: {mismatch}")


def _differences(a_name: str, a: dict, b_name: str, b: dict) -> str:
    """Each IDENTITY key on which two sets of machine keys differ, with both values; a key absent
    from both is not compared, one absent from a side only is a difference."""
    return "; ".join(
        f"{a_name} {key}={_shown(a.get(key))}, {b_name} {key}={_shown(b.get(key))}"
        for key in IDENTITY
        if a.get(key) != b.get(key)
    )


def _shown(value) -> str:
    return "(absent)" if value is None else repr(value)
