"""kernelgate.report.bench's markdown table, shared by nox -s bench and python -m kernelgate.measure.metrics."""

from kernelgate.report.bench import markdown_table


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
