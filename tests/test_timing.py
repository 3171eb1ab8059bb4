"""kernelgate.measure.timing: the asv sample (calls back to back, recorded per call), ratios of interleaved
rounds, and host costs measured alternately."""

import gc
import time

from kernelgate.measure import timing


def test_a_sample_runs_back_to_back_calls_and_the_clock_counts_per_call(monkeypatch):
    monkeypatch.setattr(timing, "gpu_timing", lambda: True)
    monkeypatch.setattr(timing, "sync", lambda: None)
    calls = []

    def call():
        calls.append(1)
        time.sleep(0.002)

    # asv sets a case up, then samples it: the clock counts in the calls of the sample built last.
    for tflop_per_call, count in [(0.0, timing.SAMPLE_CALLS), (timing.SAMPLE_TFLOP / 3, 3)]:
        sample = timing.back_to_back(call, tflop_per_call)
        calls.clear()
        start = timing.sample_clock()
        sample()
        per_call = timing.sample_clock() - start
        assert len(calls) == count
        assert 0.002 <= per_call < 0.004


def test_a_sample_of_runs_that_make_several_calls_each_counts_every_call(monkeypatch):
    # A CUDA graph of back-to-back calls says how many calls a replay makes: the sample replays it as
    # often as makes a sample's calls, and the clock counts per call, not per replay.
    monkeypatch.setattr(timing, "gpu_timing", lambda: True)
    monkeypatch.setattr(timing, "sync", lambda: None)

    def graph(per_replay: int, runs: list):
        def replay():
            runs.append(1)
            time.sleep(0.001 * per_replay)

        replay.calls = per_replay
        return replay

    for per_replay, replays in [(10, 5), (8, 6), (16, 3), (80, 1)]:
        runs = []
        replay = graph(per_replay, runs)
        sample = timing.back_to_back(replay)
        start = timing.sample_clock()
        sample()
        per_call = timing.sample_clock() - start
        assert len(runs) == replays
        assert 0.001 <= per_call < 0.002, "the clock counts per call"


def test_calls_of_much_work_fill_a_sample_with_fewer_of_them():
    assert timing.sample_calls(0.0) == timing.sample_calls(timing.SAMPLE_TFLOP / timing.SAMPLE_CALLS) == 50
    for tflop in (2.6, 6.9, 100.0):  # a wide varlen batch, 8k + 16k tokens, more than a sample's worth
        calls = timing.sample_calls(tflop)
        assert calls < timing.SAMPLE_CALLS
        assert calls * tflop >= timing.SAMPLE_TFLOP > (calls - 1) * tflop


def test_percent_of_a_reference_rate_pairs_each_round_with_its_own_reference():
    # Half the reference's work per call; round 1 as fast as it, round 2 at half its speed: the
    # median of the per-round ratios (1.0, 0.5, and 0.8 in round 3) is 0.8, so 40% of its rate.
    reference_ms, ms = [1.0, 2.0, 4.0], [1.0, 4.0, 5.0]
    assert timing.pct_of_reference(50, 100, reference_ms, ms) == 40.0


def test_host_costs_are_measured_alternately_round_by_round_in_rotating_order():
    """A ratio of two host costs pairs loops taken moments apart, so the host's CPU cancels; each
    timed loop follows untimed calls of its own, and each round starts one callable further on, so
    that a reading does not depend on which callables share the rotation."""
    order = []
    fns = {name: lambda name=name: order.append(name) for name in ("ours", "torch", "compile")}
    host = timing.interleaved_enqueue_us(fns, calls=2, rounds=4)
    assert all(order[i : i + 4] == [order[i]] * 4 for i in range(0, len(order), 4))  # two untimed calls, two timed
    rounds = [order[i : i + 12 : 4] for i in range(0, len(order), 12)]
    assert rounds == [["ours", "torch", "compile"], ["torch", "compile", "ours"],
                      ["compile", "ours", "torch"], ["ours", "torch", "compile"]]  # fmt: skip
    assert {name: len(us) for name, us in host.items()} == {"ours": 4, "torch": 4, "compile": 4}
    assert all(us > 0 for series in host.values() for us in series)


def test_host_loops_run_without_the_garbage_collector_and_restore_it():
    collecting = []
    host = timing.interleaved_enqueue_us({"ours": lambda: collecting.append(gc.isenabled())}, calls=2, rounds=2)
    assert collecting == [False] * 8
    assert gc.isenabled()
    assert len(host["ours"]) == 2


def test_a_host_ratio_compares_the_least_loops():
    # The slow second loop of "ours" (interference) and torch's slow first one do not count.
    assert timing.least_ratio([30.0, 90.0, 32.0], [20.0, 15.0, 16.0]) == 2.0
