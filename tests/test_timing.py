"""harness.timing: the asv sample (back-to-back calls, recorded per call) and the rotated copy."""

import time

import torch

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


def test_a_rotated_copy_cycles_through_disjoint_slices(cuda_device):
    # The same-size copy (harness.metrics) stands beside rotated kernel inputs: each call in a
    # batch must move other bytes than the previous one, or L2 would flatter the copy.
    src, dst = timing._copy_buffers()
    nbytes = 1 << 20
    n = nbytes // 4
    dst[: 4 * n].fill_(float("nan"))
    run = timing.copy(nbytes, rotate=3)
    for _ in range(3):
        run()
    torch.testing.assert_close(dst[: 3 * n], src[: 3 * n], rtol=0, atol=0)
    assert dst[3 * n : 4 * n].isnan().all()
