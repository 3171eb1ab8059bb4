"""The references' times, measured once per environment rather than beside every pull request's head.

Eager torch, torch.compile, Liger-Kernel and the copies that a metrics case reads a kernel against do not change
with a pull request: they are a property of the environment. Main's runs (``nox -s bench`` on a GPU) record each
metrics case's reference times, ms per call on the device and, where a metric reads it, us per eager call on the
host (``HOST``), in the store (``$KERNELGATE_REFERENCES``, else ``.asv/references``): one file per suite and
environment, named by a key of what changes them (``environment``): the GPU and its driver, clocks and power limit,
the host's CPU and Python, the torch, Triton and Liger-Kernel versions, and the code that defines and times the
references, by content (``DEFINITION_FILES``). A change to any of them finds no entry.
Main's workflow keeps the store on the ``asv-results`` branch, under ``references/``, each file checked before it
is committed (``kernelgate.report.reference_store``).

The PR check looks head's environment up there (``lookup``): head's worker then times each metrics case that the
store holds without its references and reads its speedups against the stored times, and times the others with
theirs beside them. A bound passed by less than ``near_bound`` (perf-thresholds.toml) is measured again
with its references beside it, in the gate's re-measurement, so that a verdict never rests on a stored time alone
where the two ways of measuring could disagree. Only main's runs write the store: a pull request's code never
records a time that a later verdict reads.

Standard library only: the PR check's own process computes the key without importing torch.
"""

import hashlib
import importlib.metadata
import json
import os
import platform
import subprocess
from collections.abc import Callable, Sequence
from pathlib import Path

STORE_ENV = "KERNELGATE_REFERENCES"  # the store's folder, written by main's runs, read by the PR check
DEFAULT_STORE = Path(".asv/references")
# Set in a benchmark worker's environment: the file the metrics classes append the references they time to
# (main's runs), or the file of stored times they read instead of timing (the PR check's first reading of head).
RECORD_ENV = "KERNELGATE_RECORD_REFERENCES"
STORED_ENV = "KERNELGATE_STORED_REFERENCES"
# A reference's host time in a case's stored times, us an eager call, under its name with this prefix.
HOST = "host:"
# The key under which a metrics case's measure returns its references' times, beside its variants' metrics.
TIMES = "(reference times)"

# What defines a suite's references and how they are timed: its cases module (inputs, calls) and the harness's
# modules that build and time workloads. Any change to one is a new environment.
DEFINITION_FILES = (
    "kernelgate/cases/{suite}.py",
    "kernelgate/cases/common.py",
    "kernelgate/measure/bandwidth.py",
    "kernelgate/measure/workloads.py",
    "kernelgate/measure/timing.py",
)
PACKAGES = ("torch", "triton", "liger-kernel")
# The host's, which its references' host times depend on: the CPU's model and the Python that makes the calls.
HOST_FIELDS = ("cpu", "python")
# nvidia-smi's fields for the GPU and the settings that change its timings.
GPU_FIELDS = ("name", "driver_version", "clocks.applications.graphics", "clocks.max.sm", "clocks.max.memory",
              "power.limit")  # fmt: skip


def store() -> Path:
    return Path(os.environ.get(STORE_ENV) or DEFAULT_STORE)


def definition(suite: str, read: Callable[[str], bytes | None]) -> str:
    """A digest of the files that define ``suite``'s references, ``read(path)`` giving one's bytes (None: absent)."""
    digest = hashlib.sha256()
    for template in DEFINITION_FILES:
        path = template.format(suite=suite)
        digest.update(f"{path}\0".encode() + (read(path) or b"\0absent") + b"\0")
    return digest.hexdigest()[:16]


def gpu_settings() -> dict[str, str]:
    """The first GPU's name and settings (``GPU_FIELDS``); empty when nvidia-smi cannot say."""
    try:
        out = subprocess.run(["nvidia-smi", f"--query-gpu={','.join(GPU_FIELDS)}", "--format=csv,noheader"],
                             capture_output=True, text=True, check=True, timeout=30)  # fmt: skip
        values = [value.strip() for value in out.stdout.splitlines()[0].split(",")]
    except (OSError, subprocess.SubprocessError, IndexError):
        return {}
    return dict(zip(GPU_FIELDS, values, strict=True)) if len(values) == len(GPU_FIELDS) else {}


def host_settings() -> dict[str, str]:
    """The host's CPU model (Linux's /proc/cpuinfo, else the machine's architecture) and Python version."""
    try:
        cpu = next(line.split(":", 1)[1].strip() for line in Path("/proc/cpuinfo").read_text().splitlines()
                   if line.startswith("model name"))  # fmt: skip
    except (OSError, StopIteration):
        cpu = platform.machine()
    return {"cpu": cpu, "python": platform.python_version()}


def _version(package: str) -> str:
    try:
        return importlib.metadata.version(package)
    except importlib.metadata.PackageNotFoundError:
        return "not installed"


def environment(suite: str, read: Callable[[str], bytes | None]) -> dict[str, str] | None:
    """What a suite's reference times depend on here; None without a GPU (nothing to store or look up)."""
    gpu = gpu_settings()
    if not gpu:
        return None
    return {"suite": suite, **gpu, **host_settings(), **{p: _version(p) for p in PACKAGES},
            "definition": definition(suite, read)}  # fmt: skip


def key(env: dict[str, str]) -> str:
    return hashlib.sha256(json.dumps(env, sort_keys=True).encode()).hexdigest()[:16]


def entry_path(folder: Path, env: dict[str, str]) -> Path:
    """Where the store in ``folder`` keeps ``env``'s entry."""
    return folder / env["suite"] / f"{key(env)}.json"


def case_name(grid: str, leading: Sequence[str]) -> str:
    """A metrics case's name in the store: its grid's (the time class's) and its leading parameters'."""
    return f"{grid}/{'-'.join(leading)}"


def lookup(folder: Path, env: dict[str, str]) -> dict | None:
    """The entry stored for ``env``: ``{"commit": the main commit whose run timed them, "times": {case:
    {reference: ms}}}``; None where there is none, or it is not one."""
    try:
        entry = json.loads(entry_path(folder, env).read_text())
    except (OSError, ValueError):
        return None
    if not (isinstance(entry, dict) and entry.get("environment") == env and isinstance(entry.get("times"), dict)):
        return None
    times = {case: refs for case, refs in entry["times"].items() if _valid(refs)}
    return {"commit": str(entry.get("commit", "")), "times": times}


def _valid(refs) -> bool:
    return isinstance(refs, dict) and all(
        isinstance(ms, (int, float)) and not isinstance(ms, bool) and 0 < ms < float("inf") for ms in refs.values()
    )


def record(folder: Path, env: dict[str, str], times: dict[str, dict[str, float]], commit: str) -> Path:
    """Add ``times`` ({case: {reference: ms}}) to ``env``'s entry, newer times replacing older ones."""
    path = entry_path(folder, env)
    earlier = (lookup(folder, env) or {}).get("times", {})
    merged = {**earlier, **{case: refs for case, refs in times.items() if _valid(refs)}}
    path.parent.mkdir(parents=True, exist_ok=True)
    partial = path.with_suffix(".partial")
    partial.write_text(json.dumps({"environment": env, "commit": commit, "times": merged}, indent=1, sort_keys=True))
    partial.replace(path)
    return path


def recorded(path: Path) -> dict[str, dict[str, float]]:
    """What a worker's metrics classes appended to ``path`` (``RECORD_ENV``): {case: {reference: ms}}."""
    times = {}
    try:
        lines = path.read_text().splitlines()
    except OSError:
        return times
    for line in lines:
        case, refs = json.loads(line)
        times[case] = refs
    return times
