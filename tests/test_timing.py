"""harness.timing's asv sample: calls_per_sample() calls back to back, recorded per call."""

import time

from harness import timing


def test_a_sample_runs_back_to_back_calls_and_the_clock_counts_per_call(monkeypatch):
    monkeypatch.setattr(timing, "calls_per_sample", lambda: 5)
    calls = []

    def call():
        calls.append(1)
        time.sleep(0.002)

    sample = timing.back_to_back(call)
    start = timing.sample_clock()
    sample()
    per_call = timing.sample_clock() - start
    assert len(calls) == 5
    assert 0.002 <= per_call < 0.004
