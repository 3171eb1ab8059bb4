"""kernelgate.report.bench's markdown table, shared by nox -s bench and python -m kernelgate.measure.metrics."""

from kernelgate.report.bench import attention_rows, layer_norm_rows, markdown_table


def test_report_tables_leave_out_columns_no_row_has():
    table = markdown_table(
        [
            {"kernel": "layer_norm/fused", "case": "4096x4096 float32 fwd", "speedup_torch": 1.39, "gbps": 3417.0},
            {"kernel": "layer_norm/auto", "case": "4096x4096 float32 fwd", "speedup_torch": 1.38, "gbps": None},
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
    rows = {row["case"]: (row["time_us"], row["speedup_liger"]) for row in layer_norm_rows(values)}
    assert rows == {"8192x8192 float32 fwd": (50, 1.2), "8192x768 bfloat16 fwd+bwd": (30, 2.5)}


def test_attention_rows_read_each_mode_against_fa2_and_cudnn():
    tma, fa2 = ("gqa8-128-causal", "tma"), ("gqa8-128-causal", "fa2_varlen")
    metrics = "bench_attention.AttentionBackwardMetrics"
    values = {
        "bench_attention.AttentionBackward.time_backward": {tma: 2.2e-3, fa2: 2.3e-3},
        f"{metrics}.track_speedup_vs_fa2": {tma: 1.05},
        f"{metrics}.track_speedup_vs_cudnn": {tma: 0.76},
    }
    (row,) = attention_rows(values)
    assert (row["kernel"], row["time_us"], row["speedup_fa2"], row["speedup_cudnn"]) == (
        "attention_bwd/tma",
        2200,
        1.05,
        0.76,
    )
    assert markdown_table([row]).splitlines()[0] == "| kernel | case | time (us) | vs FA2 | vs cuDNN |"
