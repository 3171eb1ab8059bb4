"""The summary of one asv run that ``nox -s bench`` prints: kernel, case,
time, speedup over torch (and torch.compile and Liger-Kernel; FA2 for attention), GB/s or
TFLOP/s and % of the device's measured peak (copy bandwidth for LayerNorm,
bf16 matmul for attention), the host cost of an eager LayerNorm call and its ratio to
eager torch's, plus a PNG chart of speedup and % of peak per case.

A smoke run (no GPU: Triton's interpreter at tiny sizes) says so, labels each case with the
size it really ran, and shows only what it measured: the interpreter's time per call.

``python -m kernelgate.report.bench --machine M --commit C`` reads ``.asv/results``.
"""

import argparse
import ast
import itertools
import math
from pathlib import Path

from kernelgate.cases.layer_norm import LAYER_NORM_VARIANTS, bench_case

LN = "bench_layer_norm.LayerNorm"
LN_METRICS = "bench_layer_norm.LayerNormMetrics"
LN_WIDTHS = "bench_layer_norm.LayerNormWidths"
LN_WIDTHS_METRICS = "bench_layer_norm.LayerNormWidthsMetrics"
DEVICE = "bench_device.Device"
ATT = "bench_attention.AttentionBackward.time_backward"
ATT_METRICS = "bench_attention.AttentionBackwardMetrics"


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


# (time benchmark class, metrics class): the benchmark shapes, then the model widths (``auto``).
LAYER_NORM_CLASSES = [(LN, LN_METRICS), (LN_WIDTHS, LN_WIDTHS_METRICS)]


def layer_norm_rows(values: dict) -> list[dict]:
    """One row per (shape, dtype, direction, variant); a case both classes measure is shown once."""
    rows = {}
    for time_class, metrics in LAYER_NORM_CLASSES:
        keys = {k for k in values.get(f"{time_class}.time_layer_norm", {}) if k[3] in LAYER_NORM_VARIANTS}
        for name in (f"{metrics}.track_gbps", f"{metrics}.track_speedup_vs_torch"):
            keys |= set(values.get(name, {}))
        for key in keys - rows.keys():
            shape, dtype, direction, variant = key
            time_s = _value(values, f"{time_class}.time_layer_norm", key)
            metric = lambda name, key=key, metrics=metrics: _value(values, f"{metrics}.track_{name}", key)
            rows[key] = {
                "kernel": f"layer_norm/{variant}",
                "case": f"{shape} {dtype} {direction}",
                "time_us": time_s * 1e6 if time_s is not None else None,
                "speedup_torch": metric("speedup_vs_torch"),
                "speedup_compile": metric("speedup_vs_compile"),
                "speedup_liger": metric("speedup_vs_liger"),
                "gbps": metric("gbps"),
                "pct_peak": metric("pct_peak"),
                "pct_tensor_copy": metric("pct_tensor_copy"),
                "host_us": metric("host_us"),
                "host_vs_torch": metric("host_vs_torch"),
            }
    order = {v: i for i, v in enumerate(LAYER_NORM_VARIANTS)}
    return sorted(rows.values(), key=lambda r: (r["case"], order.get(r["kernel"].split("/")[1], 99)))


def attention_rows(values: dict) -> list[dict]:
    """One row per (config, accumulation mode): backward time, TFLOP/s, % of the bf16 matmul peak."""
    rows = []
    keys = {k for k in values.get(ATT, {}) if k[1] not in ("fa2_varlen", "cudnn_sdpa")}
    for config, accum in sorted(keys | set(values.get(f"{ATT_METRICS}.track_tflops", {}))):
        time_s = _value(values, ATT, (config, accum))
        rows.append(
            {
                "kernel": f"attention_bwd/{accum}",
                "case": config,
                "time_us": time_s * 1e6 if time_s is not None else None,
                "speedup_fa2": _value(values, f"{ATT_METRICS}.track_speedup_vs_fa2", (config, accum)),
                "speedup_cudnn": _value(values, f"{ATT_METRICS}.track_speedup_vs_cudnn", (config, accum)),
                "tflops": _value(values, f"{ATT_METRICS}.track_tflops", (config, accum)),
                "pct_peak": _value(values, f"{ATT_METRICS}.track_pct_matmul_peak", (config, accum)),
            }
        )
    return rows


# A row is worth a line when asv recorded one of these for it.
MEASURED = ("time_us", "speedup_torch", "speedup_fa2", "speedup_cudnn", "gbps", "tflops", "pct_peak")


def measured(rows: list[dict]) -> list[dict]:
    """The rows with a value for some MEASURED key: a case whose benchmarks all failed or were skipped has none."""
    return [r for r in rows if any(r.get(k) is not None for k in MEASURED)]


def peak_lines(values: dict) -> list[str]:
    """The device peaks the % columns are read against, as this run measured them."""
    copy_peak = _value(values, f"{DEVICE}.track_copy_peak", ())
    matmul_peak = _value(values, f"{DEVICE}.track_bf16_matmul_peak", ())
    return [
        f"copy peak: {copy_peak:.0f} GB/s" if copy_peak else "copy peak: not in this run (not selected)",
        *([f"bf16 matmul peak: {matmul_peak:.0f} TFLOP/s"] if matmul_peak else []),
    ]


COLUMNS = [
    ("kernel", "kernel", "{}"),
    ("case", "case", "{}"),
    ("time_us", "time (us)", "{:.1f}"),
    ("speedup_torch", "vs torch", "{:.2f}x"),
    ("speedup_compile", "vs compile", "{:.2f}x"),
    ("speedup_liger", "vs Liger", "{:.2f}x"),
    ("speedup_fa2", "vs FA2", "{:.2f}x"),
    ("speedup_cudnn", "vs cuDNN", "{:.2f}x"),
    ("gbps", "GB/s", "{:.0f}"),
    ("tflops", "TFLOP/s", "{:.0f}"),
    ("pct_peak", "% peak", "{:.1f}"),
    ("pct_tensor_copy", "% tensor copy", "{:.1f}"),
    ("host_us", "host (us)", "{:.1f}"),
    ("host_vs_torch", "host ÷ torch", "{:.2f}x"),
    ("host_vs_compile", "host ÷ compile", "{:.2f}x"),
]


def markdown_table(rows: list[dict]) -> str:
    """The COLUMNS that some row has a value for (a LayerNorm-only table has no TFLOP/s)."""
    columns = [c for c in COLUMNS if any(r.get(c[0]) is not None for r in rows)]

    def cell(row, key, fmt):
        return "n/a" if row.get(key) is None else fmt.format(row[key])

    lines = ["| " + " | ".join(title for _, title, _ in columns) + " |", "|" + "---|" * len(columns)]
    lines += ["| " + " | ".join(cell(r, k, f) for k, _, f in columns) + " |" for r in rows]
    return "\n".join(lines)


def _baseline_speedup(row: dict) -> float:
    return row.get("speedup_torch") or row.get("speedup_fa2") or 0


# What the chart plots per case: (value of a row, axis label, reference line or None).
GPU_PANELS = [
    (_baseline_speedup, "speedup over baseline (x): eager torch; FA2 for attention", 1.0),
    (lambda row: row.get("pct_peak") or 0, "% of measured peak: copy bandwidth; bf16 matmul for attention", None),
]
SMOKE_PANELS = [(lambda row: row.get("time_us", 0) / 1e3, "Triton interpreter time per call (ms), CPU", None)]


def smoke_rows(rows: list[dict]) -> list[dict]:
    """A smoke run's LayerNorm rows: labelled with the size that ran, its interpreter time only."""
    smoke = []
    for row in rows:
        shape, dtype, direction = row["case"].split()
        ran = bench_case(shape, dtype).smoke()
        case = f"{ran.m}x{ran.n} {dtype} {direction} (for {shape})"
        smoke.append({"kernel": row["kernel"], "case": case, "time_us": row["time_us"]})
    return [r for r in smoke if r["time_us"] is not None]


def chart(rows: list[dict], title: str, path: Path, panels=GPU_PANELS) -> None:
    """One panel per entry of ``panels``, horizontal bars per case, one per kernel of the case's
    family (LayerNorm variants, attention modes)."""
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
    rows = measured(layer_norm_rows(values) + attention_rows(values))
    versions = f"torch {params.get('torch', '?')}, triton {params.get('triton', '?')}, commit {commit[:8]}"
    if params.get("gpu_class") == "interpreter":
        rows = smoke_rows([r for r in rows if r["kernel"].startswith("layer_norm/")])
        header = [
            f"SMOKE RUN, no GPU: Triton's interpreter on the CPU, {versions}.",
            "Each case ran at the tiny size shown (the GPU case it stands for in brackets); the times are",
            "interpreter times, which say the suite runs, not how fast a kernel is. Attention needs a GPU.",
        ]
        title, panels = f"smoke run (Triton interpreter, CPU) @ {commit[:8]}: not GPU performance", SMOKE_PANELS
    else:
        header = [
            f"GPU: {params.get('gpu', '?')} (driver {params.get('gpu_driver', '?')}, CUDA {params.get('cuda', '?')}), "
            + versions,
            *peak_lines(values),
        ]
        title, panels = f"{params.get('gpu', machine)} @ {commit[:8]}", GPU_PANELS
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
