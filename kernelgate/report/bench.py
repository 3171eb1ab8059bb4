"""The summary of one asv run that ``nox -s bench`` prints: each kernel's rows, a case and variant each, with
its time and the metrics its suite tables (``Metric.title``: speedups over its references, GB/s or TFLOP/s,
% of the device's measured peak, ...), plus a PNG chart of the speedup over each kernel's baseline and % of
peak per case.

A smoke run (no GPU: Triton's interpreter at tiny sizes) says so, labels each case with the
size it really ran, and shows only what it measured: the interpreter's time per call.

``python -m kernelgate.report.bench --machine M --commit C`` reads ``.asv/results``.
"""

import argparse
import ast
import itertools
import math
from collections.abc import Callable
from pathlib import Path

from kernelgate.suite import Grid, Suite

DEVICE = "bench_device.Device"


def load_values(results_dir: Path, machine: str, commit: str) -> tuple[dict, dict]:
    """({benchmark: {param tuple: value}}, machine params) for one commit.

    Failed benchmarks are None, skipped ones NaN, as asv stores them.
    """
    # Imported here: kernelgate.measure.metrics prints its table with this module on GPU images without asv.
    from asv.results import iter_results_for_machine_and_hash

    values: dict[str, dict[tuple, float | None]] = {}
    params: dict = {}
    for result in iter_results_for_machine_and_hash(str(results_dir), machine, commit):
        params = result.params
        for key in result.get_all_result_keys():
            names = result.get_result_params(key)
            combos = [tuple(ast.literal_eval(p) for p in combo) for combo in itertools.product(*names)] or [()]
            values[key] = dict(zip(combos, result.get_result_value(key, names), strict=True))
    return values, params


def _value(values, name, key):
    v = values.get(name, {}).get(key)
    return None if v is None or (isinstance(v, float) and math.isnan(v)) else v


def row(grid: Grid, case: tuple, variant: str, time_s: float | None, value: Callable[[str], float | None]) -> dict:
    """A table's row for one case (the grid's leading parameters) and variant: its time and each metric its
    suite tables, by the metric's title (``value(name)``: None where none was recorded), and the speedup over
    the kernel's baseline (``baseline``, which the chart plots)."""
    shown = [metric for metric in grid.metrics if metric.title]
    return {
        "kernel": f"{grid.label}/{variant}",
        "case": " ".join(case),
        "time (us)": time_s * 1e6 if time_s is not None else None,
        **{metric.title: value(metric.name) for metric in shown},
        "baseline": next((value(metric.name) for metric in shown if metric.baseline), None),
    }


def _keyed_rows(suite: Suite, values: dict) -> list[tuple[tuple, dict]]:
    """(parameters, row) for each case and variant a grid of ``suite`` has a value for, in case order; a case
    two grids measure comes once, from the first."""
    rows = {}
    for grid in suite.grids:
        timed = f"{suite.module}.{grid.name}.{grid.time_method}"
        tracked = lambda name, grid=grid: f"{suite.module}.{grid.name}Metrics.track_{name}"
        keys = {key for key in values.get(timed, {}) if key[-1] in grid.variants}
        for metric in grid.metrics:
            keys |= set(values.get(tracked(metric.name), {}))
        for key in keys - rows.keys():
            value = lambda name, key=key, tracked=tracked: _value(values, tracked(name), key)
            rows[key] = row(grid, key[:-1], key[-1], _value(values, timed, key), value)
    order = {variant: i for i, variant in enumerate(v for grid in suite.grids for v in grid.variants)}
    return [(key, rows[key]) for key in sorted(rows, key=lambda key: (" ".join(key[:-1]), order[key[-1]]))]


def suite_rows(suite: Suite, values: dict) -> list[dict]:
    """The rows of ``suite``'s cases that asv recorded a value for."""
    return measured([r for _, r in _keyed_rows(suite, values)])


def smoke_rows(suite: Suite, values: dict) -> list[dict]:
    """A smoke run's rows of ``suite``: each labelled with the size that ran, its interpreter time only."""
    return [
        {"kernel": r["kernel"], "case": suite.smoke_label(*key[:-1]), "time (us)": r["time (us)"]}
        for key, r in _keyed_rows(suite, values)
        if r["time (us)"] is not None
    ]


def measured(rows: list[dict]) -> list[dict]:
    """The rows with a value: a case whose benchmarks all failed or were skipped has none."""
    return [r for r in rows if any(v is not None for k, v in r.items() if k not in ("kernel", "case"))]


def peak_lines(values: dict) -> list[str]:
    """The device peaks the % columns are read against, as this run measured them."""
    copy_peak = _value(values, f"{DEVICE}.track_copy_peak", ())
    matmul_peak = _value(values, f"{DEVICE}.track_bf16_matmul_peak", ())
    return [
        f"copy peak: {copy_peak:.0f} GB/s" if copy_peak else "copy peak: not in this run (not selected)",
        *([f"bf16 matmul peak: {matmul_peak:.0f} TFLOP/s"] if matmul_peak else []),
    ]


# A metric's format in the tables, by its unit.
FORMATS = {"x": "{:.2f}x", "%": "{:.1f}", "us": "{:.1f}", "GB/s": "{:.0f}", "TFLOP/s": "{:.0f}"}


def columns() -> dict[str, str]:
    """Every column a table may have, by title, with its format: the case's, then each suite's metrics, in
    the registry's order."""
    from kernelgate.cases import SUITES

    found = {"kernel": "{}", "case": "{}", "time (us)": FORMATS["us"]}
    for metric in (metric for suite in SUITES for grid in suite.grids for metric in grid.metrics if metric.title):
        found.setdefault(metric.title, FORMATS.get(metric.unit, "{:.3g}"))
    return found


def markdown_table(rows: list[dict]) -> str:
    """The columns that some row has a value for (a table of a kernel measured in GB/s has no TFLOP/s)."""
    shown = {title: fmt for title, fmt in columns().items() if any(r.get(title) is not None for r in rows)}

    def cell(row, title, fmt):
        return "n/a" if row.get(title) is None else fmt.format(row[title])

    lines = ["| " + " | ".join(shown) + " |", "|" + "---|" * len(shown)]
    lines += ["| " + " | ".join(cell(r, t, f) for t, f in shown.items()) + " |" for r in rows]
    return "\n".join(lines)


# What the chart plots per case: (value of a row, axis label, reference line or None).
GPU_PANELS = [
    (lambda row: row.get("baseline") or 0, "speedup over the kernel's baseline (x)", 1.0),
    (lambda row: row.get("% peak") or 0, "% of the measured peak the kernel is bound by", None),
]
SMOKE_PANELS = [(lambda row: row.get("time (us)", 0) / 1e3, "Triton interpreter time per call (ms), CPU", None)]


def chart(rows: list[dict], title: str, path: Path, panels=GPU_PANELS) -> None:
    """One panel per entry of ``panels``, horizontal bars per case, one per variant of its kernel."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    cases = sorted({r["case"] for r in rows}, reverse=True)  # top to bottom in reading order
    kernels = sorted({r["kernel"] for r in rows})
    slots = max(len({r["kernel"] for r in rows if r["case"] == c}) for c in cases)
    height = 0.8 / slots
    width = 7 * len(panels)
    fig, axes = plt.subplots(
        1, len(panels), figsize=(width, max(6, 0.16 * slots * len(cases))), sharey=True, squeeze=False
    )
    axes = axes[0]
    colors = dict(zip(kernels, plt.rcParams["axes.prop_cycle"].by_key()["color"] * 3, strict=False))
    for y, case in enumerate(cases):
        for i, row in enumerate(r for r in rows if r["case"] == case):
            kw = dict(height=height, color=colors[row["kernel"]], label=row["kernel"])
            for ax, (value, _, _) in zip(axes, panels, strict=True):
                ax.barh(y + i * height, value(row), **kw)
    for ax, (_, label, line) in zip(axes, panels, strict=True):
        ax.set_xlabel(label)
        if line is not None:
            ax.axvline(line, color="k", lw=0.8)
    axes[0].set_yticks([y + 0.4 - height / 2 for y in range(len(cases))], cases, fontsize=7)
    by_label = dict(zip(*reversed(axes[-1].get_legend_handles_labels()), strict=True))  # one entry per kernel
    axes[-1].legend(by_label.values(), by_label.keys(), fontsize=8, loc="lower right")
    fig.suptitle(title)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def summarize(results_dir: Path, machine: str, commit: str, out_dir: Path) -> tuple[str, Path]:
    values, params = load_values(results_dir, machine, commit)
    if not values:
        raise SystemExit(f"no asv results for machine {machine!r} at commit {commit[:8]} in {results_dir}")
    from kernelgate.cases import SUITES

    versions = f"torch {params.get('torch', '?')}, triton {params.get('triton', '?')}, commit {commit[:8]}"
    if params.get("gpu_class") == "interpreter":
        rows = [r for suite in SUITES if not suite.needs_gpu for r in smoke_rows(suite, values)]
        header = [
            f"SMOKE RUN, no GPU: Triton's interpreter on the CPU, {versions}.",
            "Each case ran at the tiny size shown (the GPU case it stands for in brackets); the times are",
            "interpreter times, which say the suite runs, not how fast a kernel is."
            + "".join(f" {suite.title} needs a GPU." for suite in SUITES if suite.needs_gpu),
        ]
        title, panels = f"smoke run (Triton interpreter, CPU) @ {commit[:8]}: not GPU performance", SMOKE_PANELS
    else:
        header = [
            f"GPU: {params.get('gpu', '?')} (driver {params.get('gpu_driver', '?')}, CUDA {params.get('cuda', '?')}), "
            + versions,
            *peak_lines(values),
        ]
        title, panels = f"{params.get('gpu', machine)} @ {commit[:8]}", GPU_PANELS
        rows = [r for suite in SUITES for r in suite_rows(suite, values)]
    if not rows:
        raise SystemExit(f"no benchmark of commit {commit[:8]} on {machine!r} has a value: every one failed")
    text = "\n".join(filter(None, header)) + "\n\n" + markdown_table(rows)
    stem = out_dir / f"bench-{machine}-{commit[:8]}"
    stem.with_suffix(".md").parent.mkdir(parents=True, exist_ok=True)
    stem.with_suffix(".md").write_text(text + "\n")
    chart(rows, title, stem.with_suffix(".png"), panels)
    return text, stem.with_suffix(".png")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--machine", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--results", type=Path, default=Path(".asv/results"))
    parser.add_argument("--out", type=Path, default=Path(".asv/report"))
    args = parser.parse_args()
    text, png = summarize(args.results, args.machine, args.commit, args.out)
    print(text)
    print(f"\nchart: {png}")


if __name__ == "__main__":
    main()
