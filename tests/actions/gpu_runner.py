"""The GPU runner's Python, stood in on a machine without a GPU: what the workflows' GPU jobs run as
``$KERNELGATE_RUNNER_PYTHON`` when act runs them (tests/test_workflows_act.py).

``write_runner`` makes that executable; it runs this file with the test session's interpreter, a config
file (``Config``) and the job's arguments, records each call, then:

* ``-m nox --no-venv -s pr-check -- ARGS``: the project's own nox session and PR check
  (``kernelgate.prcheck``: worktrees, overlays, selection, both suites discovered, the shard's share of
  the cases, result files, gate, report), with only its GPU parts stood in, in each of its processes
  (``gpu_site/sitecustomize.py`` on PYTHONPATH calls ``install``): the device (an H200's entry), the GPU
  tests (a JUnit report of the selected test files, all passed), the JIT warm-up (nothing to compile for)
  and the timing samples (``time_samples``: a function of the case alone, so every shard count reads the
  same, with head slower on one case where the config says so).
  A hostile head's doing follows where the config asks for it: the shard's files rewritten, exit 0.
* ``-m nox --no-venv -s bench``: the main job's asv result files and HTML (asv's writers; one case), and
  that case's references' times added to the store (``kernelgate.measure.references``' writer).

Each call's record names the files of the references' store the session was pointed at, as it starts.
"""

import contextlib
import dataclasses
import json
import os
import re
import subprocess
import sys
import zlib
from pathlib import Path

SITE = Path(__file__).with_name("gpu_site")
CONFIG_ENV = "KERNELGATE_GPU_STANDIN"
GPU = "NVIDIA H200"
# What nvidia-smi says of the stood-in H200 (kernelgate.measure.references.GPU_FIELDS).
GPU_SETTINGS = {"name": GPU, "driver_version": "580.159.04", "clocks.applications.graphics": "1980 MHz",
                "clocks.max.sm": "1980 MHz", "clocks.max.memory": "3201 MHz", "power.limit": "700.00 W"}  # fmt: skip
STORED_CASE = "RMSNorm/8192x1024-bfloat16-fwd"  # the case whose references' times the stood-in main job stores


@dataclasses.dataclass
class Config:
    record: str  # a folder: calls.jsonl (each call's arguments and store), slowed.txt (the case head is slower on)
    slower: float = 1.0  # head's time on one selected case, as a multiple of base's
    tamper: str = ""  # "groups" (the manifest selects nothing) or "thresholds" (limits loosened)

    def save(self, path: Path) -> Path:
        path.write_text(json.dumps(dataclasses.asdict(self)))
        return path

    @classmethod
    def load(cls, path: str | Path) -> "Config":
        return cls(**json.loads(Path(path).read_text()))


def write_runner(folder: Path, config: Config) -> Path:
    """The executable the GPU job's runner environment names as its Python."""
    folder.mkdir(parents=True, exist_ok=True)
    Path(config.record).mkdir(parents=True, exist_ok=True)
    saved = config.save(folder / "gpu-runner.json")
    runner = folder / "runner-python"
    runner.write_text(f'#!/bin/sh\nexec "{sys.executable}" "{Path(__file__).resolve()}" "{saved}" "$@"\n')
    runner.chmod(0o755)
    return runner


def calls(config: Config) -> list[dict]:
    path = Path(config.record) / "calls.jsonl"
    return [json.loads(line) for line in path.read_text().splitlines()] if path.is_file() else []


def slowed(config: Config) -> str | None:
    path = Path(config.record) / "slowed.txt"
    return path.read_text() if path.is_file() else None


def reference_environment(suite: str, tree: Path) -> dict[str, str]:
    """What the references' store keys ``suite``'s times by on the stood-in H200, ``tree`` defining them."""
    from unittest import mock

    from kernelgate.measure import references

    read = lambda path: (tree / path).read_bytes() if (tree / path).is_file() else None
    with mock.patch.object(references, "gpu_settings", lambda: dict(GPU_SETTINGS)):
        return references.environment(suite, read)


def store_files(folder: Path) -> list[str]:
    return sorted(path.relative_to(folder).as_posix() for path in folder.rglob("*.json"))


# --- the stood-in GPU parts, installed in the PR check's processes -----------------------------------


def device_info() -> dict[str, str]:
    """An H200's entry (kernelgate.measure.device_info's keys); the package versions are this machine's."""
    import importlib.metadata

    from kernelgate.kernels.device import gpu_class

    version = lambda name: importlib.metadata.version(name)
    return {"gpu": GPU, "gpu_class": gpu_class(GPU), "gpu_driver": "580.159.04", "gpu_app_clock_sm": "1980 MHz",
            "gpu_sm_clock_max": "1980 MHz", "gpu_power_limit": "700.00 W", "cuda": "13.0",
            "torch": version("torch"), "triton": version("triton"), "tilelang": version("tilelang")}  # fmt: skip


def time_samples(case, count: int) -> list[float]:
    """One commit's samples of a time case: a function of the case's parameters less its implementation
    (the unit a shard takes whole), so that implementations compared by an ordering rule read alike."""
    seconds = 20e-6 * (1 + zlib.crc32(json.dumps(case.unit).encode()) % 500 / 50)
    return [seconds * (1 + 0.003 * ((7 * i) % 5 - 2)) for i in range(count)]


def track_value(rules: list) -> float:
    """A value inside every bound of ``rules`` (the base commit's floors and ceilings)."""
    low = max((r.min for r in rules if r.min is not None), default=None)
    high = min((r.max for r in rules if r.max is not None), default=None)
    if low is not None and high is not None:
        return (low + high) / 2
    return low * 1.25 if low is not None else high * 0.8


class Measurements:
    """workers.measure's records, stood in; the plan of the run is known once check.measure is called (the
    first readings), or from the manifest (the gate's re-measurement, a process of its own)."""

    def __init__(self, config: Config):
        self.config = config
        self.plan = None

    def first(self, plan, steps, cases, stored=None):
        self.plan = plan
        with steps("benchmarks"):
            return self.measure(None, cases)

    def measure(self, sides, cases, rounds: int | None = None, samples: int | None = None, **_options) -> dict:
        from kernelgate.gate.thresholds import load_thresholds, with_head_rules
        from kernelgate.measure import workers
        from kernelgate.prcheck import check

        plan = self.plan or check.Plan.load(Path(sides[0].log).parents[1])
        out = Path(plan.sides["head"]["log"]).parents[1]
        suites = check.read_suites(out)
        chosen = check.chosen_cases(suites, plan.benchmarks, check.bounded_tracks(out, standin_gpu_class()))
        # The case head is slower on: the first selected time case both commits have, whatever the shard.
        slow = min(c for c in chosen["head"] if c.kind == "time" and c in chosen["base"])
        if self.config.slower != 1.0:
            (Path(self.config.record) / "slowed.txt").write_text(slow.asv_id)
        # The floors and ceilings the gate applies: base's, and those head adds.
        thresholds = load_thresholds(out / check.TRUSTED / "perf-thresholds.toml")
        thresholds = with_head_rules(thresholds, out / check.FROM_HEAD / "perf-thresholds.toml")
        rules = thresholds.applicable(standin_gpu_class())
        count = (rounds or workers.ROUNDS) * (samples or workers.SAMPLES_PER_ROUND)
        records: dict[str, dict] = {}
        for role, role_cases in cases.items():
            records[role] = {}
            for case in role_cases:
                record = {"benchmark": case.benchmark, "index": case.index, "kind": case.kind, "status": "ok"}
                if case.kind == "time":
                    factor = self.config.slower if role == "head" and case == slow else 1.0
                    record["samples"] = [s * factor for s in time_samples(case, count)]
                    record["number"] = [1] * count
                else:
                    record["value"] = track_value([r for r in rules if r.matches(case)])
                records[role][case.asv_id] = record
        return records


def standin_gpu_class() -> str:
    from kernelgate.kernels.device import gpu_class

    return gpu_class(GPU)


@contextlib.contextmanager
def gpu_tests(plan, out: Path, steps):
    """The GPU tests' JUnit report: each selected test file, passed (a stand-in for pytest on the GPU)."""
    from kernelgate.prcheck import check

    yield
    k, n = plan.shard
    cases = "".join(f'<testcase classname="{path}" name="stood in for its GPU tests, shard {k} of {n}"/>'
                    for path in plan.tests)  # fmt: skip
    report = out / check.TEST_REPORT
    report.parent.mkdir(parents=True, exist_ok=True)
    report.write_text(
        f'<testsuites><testsuite name="pytest" tests="{len(plan.tests)}">{cases}</testsuite></testsuites>'
    )
    steps.times.append(("GPU tests", 0.0, "ok"))


def warm_up(plan, steps, cases, stored=None) -> None:
    with steps("JIT warm-up"):
        print("stood in: no GPU to compile for", flush=True)


def install() -> None:
    """Stand in for the GPU parts of the PR check in this process (gpu_site/sitecustomize.py calls it)."""
    from kernelgate.measure import device_info as device_module
    from kernelgate.measure import workers
    from kernelgate.prcheck import check

    config = Config.load(os.environ[CONFIG_ENV])
    measurements = Measurements(config)
    device_module.device_info = device_info
    check.has_gpu = lambda: True
    check.tests_beside = gpu_tests
    check.warm_up = warm_up
    check.measure = measurements.first
    workers.measure = measurements.measure


# --- the runner's Python ---------------------------------------------------------------------------


def option(argv: list[str], name: str) -> str | None:
    return argv[argv.index(name) + 1] if name in argv else None


def tamper(out: Path, how: str) -> None:
    """What a hostile head could do to the shard's folder, its code running in the job that writes it."""
    if how == "groups":  # the shard says its change selects nothing
        manifest = json.loads((out / "manifest.json").read_text())
        (out / "manifest.json").write_text(json.dumps({**manifest, "groups": []}))
    elif how == "thresholds":  # the limits the merge would judge by, loosened
        path = out / "trusted" / "perf-thresholds.toml"
        path.write_text(re.sub(r"(?m)^max_slowdown = .*$", "max_slowdown = 9.0", path.read_text()))
    else:
        raise SystemExit(f"unknown tampering {how!r}")


def main_job(cwd: Path) -> int:
    """The main job's asv result files and HTML, as ``nox -s bench`` leaves them in ``.asv/``, and the references'
    times of one case in the store."""
    from kernelgate.measure import references, results
    from kernelgate.measure.device_info import machine_name

    commit = subprocess.run(["git", "rev-parse", "HEAD"], cwd=cwd, capture_output=True, text=True, check=True)
    machine = {"machine": machine_name(device_info()), **device_info(), "python": "3.12"}
    suite = {"bench_a.A.time_x": {"name": "bench_a.A.time_x", "type": "time", "params": [["'s1'"]],
                                  "param_names": ["s"], "version": "1", "unit": "seconds"}}  # fmt: skip
    record = {"benchmark": "bench_a.A.time_x", "index": 0, "kind": "time", "status": "ok",
              "samples": [1e-4] * 4, "number": [1] * 4}  # fmt: skip
    folder = cwd / ".asv" / "results"
    results.write_suite(folder / "benchmarks.json", suite)
    results.write_machine(folder, machine)
    results.write_commit(folder, machine, commit.stdout.strip(), 0, suite, {"s1": record}, env_name="existing-py")
    (cwd / ".asv" / "html").mkdir(parents=True, exist_ok=True)
    (cwd / ".asv" / "html" / "index.html").write_text("<html>asv</html>\n")
    times = {STORED_CASE: {"torch": 0.021, "liger": 0.018, "copy": 0.012}}
    references.record(references.store(), reference_environment("rms_norm", cwd), times, commit.stdout.strip())
    return 0


def main(argv: list[str]) -> int:
    from kernelgate.measure import references

    config_path, argv = argv[0], argv[1:]
    config = Config.load(config_path)
    env = {k: os.environ[k] for k in ("KERNELGATE_GPU_LOCK", "KERNELGATE_HEAD_USER") if k in os.environ}
    store = store_files(Path(option(argv, "--references") or references.store()))
    with (Path(config.record) / "calls.jsonl").open("a") as fh:
        fh.write(json.dumps({"argv": argv, "cwd": os.getcwd(), "env": env, "store": store}) + "\n")
    if argv[:4] != ["-m", "nox", "--no-venv", "-s"] or len(argv) < 5:
        raise SystemExit(f"the stood-in GPU runner runs `-m nox --no-venv -s SESSION` only, not {argv}")
    if argv[4] == "bench":
        return main_job(Path.cwd())
    if argv[4] != "pr-check":
        raise SystemExit(f"the stood-in GPU runner has no session {argv[4]!r}")
    site = os.pathsep.join(filter(None, [str(SITE), os.environ.get("PYTHONPATH")]))
    # Head's processes run as the check: another user could not run this interpreter, which lives where the
    # test session's does (under /root, say), so the runner's head user is not handed on.
    env = {k: v for k, v in os.environ.items() if k != "KERNELGATE_HEAD_USER"}
    code = subprocess.run([sys.executable, *argv], env={**env, "PYTHONPATH": site, CONFIG_ENV: config_path}).returncode
    if config.tamper:
        tamper(Path(option(argv, "--out") or ".pr-check/out"), config.tamper)
        return 0
    return code


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
