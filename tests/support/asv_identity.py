"""What asv files a benchmark's history under, and how the benchmark is measured, as asv's discovery
sees the suite: each benchmark's name, type, parameters, unit and version, and its timing settings.

    python -P tests/support/asv_identity.py benchmarks > tests/fixtures/asv_identity.json

recorded the suite as it was before its modules were generated from the kernels' suites;
tests/test_asv_suite.py runs this script on the suite as it is and compares the two.
"""

import json
import sys

from asv_runner.discovery import disc_benchmarks

# Benchmark attributes asv's history and timing depend on (asv's source text, ``code``, and the setup_cache
# key, which names the line a setup_cache is defined on, are neither).
KEYS = (
    "name", "type", "param_names", "params", "unit", "version", "timeout", "setup_cache_timeout",
    "rounds", "repeat", "number", "min_run_count", "sample_time", "warmup_time", "timer",
)  # fmt: skip


def identity(benchmark_dir: str) -> dict[str, dict]:
    found = {}
    for benchmark in disc_benchmarks(benchmark_dir):
        described = {key: getattr(benchmark, key, None) for key in KEYS}
        if callable(described["timer"]):  # a time benchmark's clock, by name
            described["timer"] = f"{described['timer'].__module__}.{described['timer'].__qualname__}"
        found[benchmark.name] = json.loads(json.dumps(described))  # tuples as lists, as the record holds them
    return dict(sorted(found.items()))


if __name__ == "__main__":
    sys.path.insert(0, ".")
    print(json.dumps(identity(sys.argv[1]), indent=1))
