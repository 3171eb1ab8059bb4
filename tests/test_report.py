"""kernelgate.report.bench's rows and markdown table, shared by nox -s bench, the results page and
python -m kernelgate.measure.metrics: each kernel's rows as its suite declares them."""

from kernelgate.cases import attention, layer_norm
from kernelgate.report.bench import markdown_table, smoke_rows, suite_rows


def test_report_tables_leave_out_columns_no_row_has():
    table = markdown_table(
        [
            {"kernel": "layer_norm/fused", "case": "4096x4096 float32 fwd", "vs torch": 1.39, "GB/s": 3417.0},
            {"kernel": "layer_norm/auto", "case": "4096x4096 float32 fwd", "vs torch": 1.38, "GB/s": None},
        ]
    )
    header, _, first, second = table.splitlines()
    assert header == "| kernel | case | vs torch | GB/s |"
    assert first == "| layer_norm/fused | 4096x4096 float32 fwd | 1.39x | 3417 |"
    assert second.endswith("| 1.38x | n/a |")


def test_the_model_widths_join_the_table_and_a_case_both_classes_measure_shows_once():
    key = ("8192x8192", "float32", "fwd", "auto")
    widths_only = ("8192x768", "bfloat16", "fwd+bwd", "auto")
    values = {
        "bench_layer_norm.LayerNorm.time_layer_norm": {key: 50e-6},
        "bench_layer_norm.LayerNormMetrics.track_speedup_vs_liger": {key: 1.2},
        "bench_layer_norm.LayerNormWidths.time_layer_norm": {key: 51e-6, widths_only: 30e-6},
        "bench_layer_norm.LayerNormWidthsMetrics.track_speedup_vs_liger": {key: 1.1, widths_only: 2.5},
    }
    rows = {row["case"]: (row["time (us)"], row["vs Liger"]) for row in suite_rows(layer_norm.SUITE, values)}
    assert rows == {"8192x8192 float32 fwd": (50, 1.2), "8192x768 bfloat16 fwd+bwd": (30, 2.5)}


def test_rows_come_in_case_order_with_the_variants_in_declared_order():
    shapes, impls = ("4096x5000", "4096x1024"), ("auto", "fused", "torch")
    timed = {(shape, "float32", "fwd", impl): 1e-6 for shape in shapes for impl in impls}
    values = {"bench_layer_norm.LayerNorm.time_layer_norm": timed}
    rows = [(row["case"], row["kernel"]) for row in suite_rows(layer_norm.SUITE, values)]
    assert rows == [(f"{shape} float32 fwd", f"layer_norm/{variant}")
                    for shape in ("4096x1024", "4096x5000") for variant in ("fused", "auto")]  # fmt: skip


def test_attention_rows_read_each_mode_against_fa2_and_cudnn():
    tma, fa2 = ("gqa8-128-causal", "tma"), ("gqa8-128-causal", "fa2_varlen")
    metrics = "bench_attention.AttentionBackwardMetrics"
    values = {
        "bench_attention.AttentionBackward.time_backward": {tma: 2.2e-3, fa2: 2.3e-3},
        f"{metrics}.track_speedup_vs_fa2": {tma: 1.05},
        f"{metrics}.track_speedup_vs_cudnn": {tma: 0.76},
    }
    (row,) = suite_rows(attention.SUITE, values)
    assert (row["kernel"], row["time (us)"], row["vs FA2"], row["vs cuDNN"], row["baseline"]) == (
        "attention_bwd/tma",
        2200,
        1.05,
        0.76,
        1.05,
    )
    assert markdown_table([row]).splitlines()[0] == "| kernel | case | time (us) | vs FA2 | vs cuDNN |"


def test_a_smoke_row_names_the_size_that_ran_and_its_time_alone():
    values = {
        "bench_layer_norm.LayerNorm.time_layer_norm": {("4096x5000", "bfloat16", "bwd", "auto"): 2e-3},
        "bench_layer_norm.LayerNormMetrics.track_speedup_vs_torch": {("4096x5000", "bfloat16", "bwd", "auto"): 0.9},
    }
    (row,) = smoke_rows(layer_norm.SUITE, values)
    assert row == {"kernel": "layer_norm/auto", "case": "4x312 bfloat16 bwd (for 4096x5000)", "time (us)": 2000}
