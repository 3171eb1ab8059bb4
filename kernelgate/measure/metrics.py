"""The derived metrics of benchmark cases, measured in one process: every kernel variant beside its
references, round after round (timing.interleaved_ms), so clock and thermal drift cancel in each ratio.
What a kernel's metrics are and how they are measured is its suite's (``Grid.measure``, ``Grid.metrics``).

A metrics class measures all its cases once, in its ``setup_cache`` (``measure_selected``), and asv hands
the result to each track_* benchmark (``kernelgate.measure.asv_classes``): one process with warm compile
caches (on an H100, ~3 minutes for 63 cases of one kernel rather than ~14 with a cold process per case, as
``asv run`` would start for each benchmark).

``python -m kernelgate.measure.metrics SUITE [--<parameter>s VALUE ...]`` measures a suite's cases in one
process and prints the table ``nox -s bench`` would (no time_* column, no history): the same numbers without
asv. The options are the suite's first grid's parameters, e.g. ``--shapes 4096x5000 --dtypes bfloat16``.
"""

import argparse
import functools
import itertools
import json
import os
import time
from collections.abc import Callable
from pathlib import Path

from kernelgate.measure import references, timing
from kernelgate.suite import Grid

# The parameter combinations a run needs, as a JSON list of lists (set by the benchmark worker,
# kernelgate.measure.worker, for one metrics class); unset, all of them. A metrics class's setup_cache
# measures only those.
SELECTED_ENV = "KERNELGATE_SELECTED_PARAMS"
# Beside it, a JSON list of the same length: the metric (a track_* benchmark's name less ``track_``) each
# combination is asked for. Unset, every metric of the grid. A case is measured for the metrics asked of it.
TRACKED_ENV = "KERNELGATE_TRACKED_METRICS"


def selected_params(params: list[list]) -> list[tuple]:
    """The combinations of an asv class's ``params`` that this run needs."""
    chosen = os.environ.get(SELECTED_ENV)
    if chosen is None:
        return list(itertools.product(*params))
    return [tuple(combo) for combo in json.loads(chosen)]


def case_key(*params: str) -> str:
    return "-".join(params)


def measure_cases(measures: dict[str, Callable[[], dict]]) -> dict[str, dict | str]:
    """Each case's metrics, measured in turn, each case's seconds printed (the PR check's shard
    balance is fitted to them). A case whose measurement raises keeps its error (a string) and the
    others are still measured: ``case_metrics`` then fails that case's benchmarks only."""
    results = {}
    for key, measure in measures.items():
        start = time.perf_counter()
        try:
            results[key] = measure()
        except Exception as err:  # recorded; case_metrics raises it for this case's benchmarks
            results[key] = f"{type(err).__name__}: {err}"
        print(f"measured {key} in {time.perf_counter() - start:.1f} s", flush=True)
    return results


def tracked_metrics(count: int) -> list[str | None]:
    """The metric each of the ``count`` selected combinations is asked for; None: every metric."""
    tracked = os.environ.get(TRACKED_ENV)
    names = json.loads(tracked) if tracked is not None else [None] * count
    if len(names) != count:
        raise ValueError(f"{TRACKED_ENV} names {len(names)} metrics for {count} selected combinations")
    return names


def measure_selected(grid: Grid, params: list[list]) -> dict[str, dict | str]:
    """The metrics of a metrics class's selected cases (its ``params``' combinations that ``selected_params``
    gives): each case (the leading parameters) once, its selected variants side by side, for the metrics asked
    of it (``tracked_metrics``; all where any combination asks for every one), against the references' stored
    times where the worker was given them; the references timed are recorded where it was told to
    (``kernelgate.measure.references``)."""
    variants: dict[tuple, set] = {}
    wanted: dict[tuple, set | None] = {}
    combos = selected_params(params)
    for (*case, variant), metric in zip(combos, tracked_metrics(len(combos)), strict=True):
        key = tuple(case)
        variants.setdefault(key, set()).add(variant)
        asked = wanted.setdefault(key, set())
        wanted[key] = None if asked is None or metric is None else {*asked, metric}
    stored = _stored_times()
    measured = measure_cases({
        case_key(*case): functools.partial(
            grid.measure, *case, variants=[v for v in grid.variants if v in chosen], metrics=wanted[case],
            stored=stored.get(references.case_name(grid.name, case)),
        )
        for case, chosen in sorted(variants.items())
    })  # fmt: skip
    _record_times(measured, {case_key(*case): references.case_name(grid.name, case) for case in variants})
    return measured


def _stored_times() -> dict[str, dict[str, float]]:
    path = os.environ.get(references.STORED_ENV)
    return json.loads(Path(path).read_text()) if path else {}


def _record_times(measured: dict[str, dict | str], names: dict[str, str]) -> None:
    """Append each case's timed references, under its name in the store (``names``), to the file the worker was
    told to record them in, a line each."""
    path = os.environ.get(references.RECORD_ENV)
    if not path:
        return
    with open(path, "a") as out:
        for key, result in measured.items():
            if isinstance(result, dict) and references.TIMES in result:
                out.write(json.dumps([names[key], result[references.TIMES]]) + "\n")


def case_metrics(results: dict[str, dict | str], key: str) -> dict:
    """One case's metrics from ``measure_cases``; raises what its measurement raised."""
    if key not in results:
        raise KeyError(f"{key} was not measured")
    if isinstance(results[key], str):
        raise RuntimeError(f"measuring {key} failed: {results[key]}")
    return results[key]


def parse_args(argv: list[str] | None) -> tuple[Grid, list[tuple], list[str]]:
    """(grid, its cases' leading parameters, variants) to measure: a suite's first grid, narrowed by the options."""
    from kernelgate.cases import SUITES

    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    by_suite = parser.add_subparsers(dest="suite", required=True, metavar="SUITE", help="the kernel's suite")
    for suite in SUITES:
        grid = suite.grids[0]
        options = by_suite.add_parser(suite.name, help=f"{suite.title}: the {grid.name} cases")
        for name, values in grid.params.items():
            checked = {"type": grid.open_params[name]} if name in grid.open_params else {"choices": values}
            options.add_argument(f"--{name}s", nargs="+", default=values, metavar=name.upper(), **checked)
        options.add_argument(f"--{grid.variant_name}s", nargs="+", default=grid.variants, choices=grid.variants)
    args = parser.parse_args(argv)
    grid = next(suite for suite in SUITES if suite.name == args.suite).grids[0]
    cases = list(itertools.product(*(getattr(args, f"{name}s") for name in grid.params)))
    return grid, cases, getattr(args, f"{grid.variant_name}s")


def main(argv: list[str] | None = None) -> None:
    from kernelgate.report.bench import markdown_table, row

    grid, cases, variants = parse_args(argv)
    if not timing.gpu_timing():
        raise SystemExit(
            "kernelgate.measure.metrics measures on a GPU; none is visible (the asv smoke run covers the CPU)"
        )
    import torch

    print(f"{torch.cuda.get_device_name(0)}: copy peak {timing.copy_peak_gbps():.0f} GB/s\n", flush=True)
    results = measure_cases(
        {case_key(*case): functools.partial(grid.measure, *case, variants=variants) for case in cases}
    )
    rows, failed = [], []
    for case in cases:
        measured = results[case_key(*case)]
        if isinstance(measured, str):
            failed.append(f"{case_key(*case)}: {measured}")
            continue
        rows += [row(grid, case, variant, None, measured[variant].get) for variant in variants]
    print(markdown_table(rows))
    if failed:
        raise SystemExit("measuring failed:\n" + "\n".join(failed))


if __name__ == "__main__":
    main()
