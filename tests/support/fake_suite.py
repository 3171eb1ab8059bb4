"""A small asv suite for the benchmark process's tests (the PR check's and the main job's): time cases
that pass, skip, fail and print, a clock that ticks as told, and track values of a metrics class."""

from pathlib import Path

SUITE = """
import json
import os
import re
import subprocess

NOW = [0.0]


def fake_clock():
    # Advances FAKE_TICK seconds per sample: a sample reads the clock twice.
    NOW[0] += float(os.environ.get("FAKE_TICK", "1e-5")) / 2
    return NOW[0]


class Ticks:
    timer = staticmethod(fake_clock)

    def time_tick(self):
        pass


class Fast:
    params = [["a", "b"]]
    param_names = ["case"]

    def setup(self, case):
        if case == "b":
            raise NotImplementedError("b is skipped here")
        self.data = list(range(1000))

    def time_sum(self, case):
        sum(self.data)


class Broken:
    def setup(self):
        raise RuntimeError("setup fails")

    def time_nothing(self):
        pass


class Loud:
    def setup(self):
        os.write(1, b"a C library's line on stdout\\n")
        subprocess.run(["echo", "a child process's line"], check=True)

    def time_quiet(self):
        print("a benchmark's line")


class Metrics:
    params = [["s1", "s2"], ["v1", "v2"]]
    param_names = ["shape", "variant"]

    def setup_cache(self):
        chosen = json.loads(os.environ.get("KERNELGATE_SELECTED_PARAMS", "null"))
        tracked = json.loads(os.environ.get("KERNELGATE_TRACKED_METRICS", "null"))
        told = chosen is None or tracked == ["measured"] * len(chosen)  # the metric each combination is for
        return {"measured": sorted({tuple(c[:1]) for c in chosen}) if chosen else "all", "told": told}

    def track_measured(self, cache, shape, variant):
        if not cache["told"]:
            return -2.0
        return float(len(cache["measured"])) if cache["measured"] != "all" else -1.0


class Devices:
    params = [["a", "b"], ["v1", "v2"]]
    param_names = ["case", "variant"]

    def track_visible(self, case, variant):
        return float(os.environ.get("CUDA_VISIBLE_DEVICES", "-1"))
"""


def write(tree: Path) -> Path:
    """``tree/benchmarks/bench_fake.py``, the suite; returns ``tree``."""
    (tree / "benchmarks").mkdir(parents=True)
    (tree / "benchmarks" / "__init__.py").write_text("")
    (tree / "benchmarks" / "bench_fake.py").write_text(SUITE)
    return tree
