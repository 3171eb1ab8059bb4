"""A long step says where it stands at least every few seconds: counts, time, what is left, its logs' last lines."""

import time

from kernelgate.measure.progress import Progress, counted_in, heartbeat, last_line, lines_since, log_size


def test_a_step_prints_where_it_stands_until_it_ends(tmp_path, capsys):
    log = tmp_path / "worker.log"
    log.write_text("setting up\n[3/10] a case: ok\n\n")
    progress = Progress()
    progress.logs["head worker"] = log
    with heartbeat("benchmarks", progress, every=0.05):
        progress.counted(3, 10)
        time.sleep(0.3)
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) >= 3, lines
    assert all(line.startswith("  ... benchmarks: ") for line in lines)
    assert "3/10 done; about " in lines[-1] and "s left; head worker: [3/10] a case: ok" in lines[-1]
    time.sleep(0.15)
    assert capsys.readouterr().out == "", "silent once the step has ended"


def test_a_log_line_is_cut_to_its_end_and_a_missing_log_is_said(tmp_path):
    log = tmp_path / "tests.log"
    log.write_text("." * 300 + " [ 45%]")
    assert last_line(log, width=20) == "…" + ("." * 300 + " [ 45%]")[-19:]
    assert last_line(tmp_path / "none.log") == "(no log yet)"


def test_values_that_finish_together_are_counted_as_their_log_says(tmp_path):
    """A metrics class's values all finish when its setup_cache has measured every case: until then they count in
    proportion to the cases its worker's log says are measured, so the estimate of what is left keeps moving."""
    log = tmp_path / "worker.log"
    log.write_text("measured a case from an earlier class in 1.0 s\n")
    offset = log_size(log)
    progress = Progress()
    progress.counted(90, 360)
    progress.pending = (270, lambda: lines_since(log, offset, "measured ") / 90)
    assert "90/360 done" in progress.line()
    log.write_text(log.read_text() + "".join(f"measured case {i} in 1.2 s\nnoise\n" for i in range(45)))
    assert "225/360 done" in progress.line()
    progress.counted(360, 360)
    assert "360/360 done" in progress.line() and progress.pending is None


def test_warm_ups_are_counted_from_their_logs(tmp_path):
    """The JIT warm-up's step line counts both commits' workloads as their logs say: those planned before the
    first is done, then each log's last [done/total]; a log not yet written counts nothing."""
    base, head, later = tmp_path / "base.log", tmp_path / "head.log", tmp_path / "later.log"
    base.write_text("warming 10 workloads on 4 processes\n[1/10] rms_norm 8192x1024 bfloat16 fwd auto: 0.5 s\n"
                    "[2/10] rms_norm 8192x1024 bfloat16 bwd auto: 0.4 s\n")  # fmt: skip
    head.write_text("warming 30 workloads on 12 processes\n")
    progress = Progress()
    progress.counting = lambda: counted_in([base, head, later])
    line = progress.line()
    assert "2/40 done" in line and "s left" in line
    head.write_text("warming 30 workloads on 12 processes\n[30/30] layer_norm 4096x4096 float32 fwd liger: 1 s\n")
    assert "32/40 done" in progress.line()
