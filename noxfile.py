"""nox sessions. The README's two commands: ``nox -s bench`` (the main job) and ``nox -s tests``.

Environments
------------
* Default: each session makes a fresh virtualenv. With a GPU (``nvidia-smi`` lists one) it
  installs the GPU runner's lock, ``requirements/runner.txt`` (hashed: the one place the packages
  the numbers depend on are pinned). Without one it installs torch's CPU build and the lock's
  triton, tilelang, numpy and asv: kernels then run in Triton's interpreter, and the sm_90 code
  checks see the runner's compiler.
* ``nox --no-venv -s ...`` on a provisioned runner (docs/pr-check.md): the session runs on the
  current interpreter's packages and downloads nothing. The checkout is installed into a light
  virtualenv of its own on top of them (``kernelgate.prcheck.environments``), never into the
  runner's environment.
"""

import os
import re
import shutil
import subprocess
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
sys.path.insert(0, str(ROOT))  # kernelgate.prcheck.environments: standard library only
from kernelgate.prcheck.environments import RunnerError, overlay  # noqa: E402

RUNNER_LOCK = ROOT / "requirements" / "runner.txt"
# What the sessions that read recorded results (the selection, the merge of the shards, the gate, the HTML
# history) install: asv and matplotlib, no kernel stack, hash-pinned for the jobs that hold write tokens.
VERDICT_LOCK = ROOT / "requirements" / "verdict.txt"
# CPU-only machines get torch's CPU build, from PyTorch's CPU index: PyPI's Linux torch is the CUDA
# build (several GB), which also requires its own Triton, not the lock's. Nothing timed there is
# compared with anything, so this is not a pin the numbers depend on.
CPU_TORCH = "torch==2.13.0+cpu"
CPU_TORCH_INDEX = "https://download.pytorch.org/whl/cpu"
FROM_LOCK_ON_CPU = ("triton", "tilelang", "numpy", "asv", "asv-runner", "matplotlib")

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "virtualenv"


def has_gpu() -> bool:
    if not shutil.which("nvidia-smi"):
        return False
    return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0


def lock_pin(name: str) -> str:
    """``name==version`` as requirements/runner.txt pins it."""
    match = re.search(rf"^({re.escape(name)}==\S+)", RUNNER_LOCK.read_text(), re.MULTILINE)
    if not match:
        raise RuntimeError(f"{RUNNER_LOCK} pins no {name}")
    return match.group(1)


def install(session: nox.Session, *extras: str) -> str:
    """Make the checkout importable in the session; returns the Python to run."""
    if session.venv_backend == "none":
        try:
            return str(overlay(sys.executable, ROOT, ROOT / ".nox" / f"{session.name}-overlay"))
        except RunnerError as exc:
            session.error(str(exc))
    if has_gpu():
        session.install("--require-hashes", "-r", str(RUNNER_LOCK))
        session.install("--no-deps", "-e", ".")
    else:
        session.install("--no-deps", "--index-url", CPU_TORCH_INDEX, CPU_TORCH)  # that index for torch alone
        session.install(CPU_TORCH, *map(lock_pin, FROM_LOCK_ON_CPU))
        session.install("-e", f".[{','.join(extras)}]" if extras else ".")
    return str(Path(session.bin) / "python")


def install_for_results(session: nox.Session) -> str:
    """``install`` for sessions that read recorded results: no torch, Triton or TileLang, so that a
    GitHub-hosted job gives the verdict without downloading them. The checkout is not installed: these
    sessions run ``python -m`` from it, building nothing."""
    if session.venv_backend == "none":
        return sys.executable
    session.install("--require-hashes", "-r", str(VERDICT_LOCK))
    return str(Path(session.bin) / "python")


def gpu_or_smoke(session: nox.Session) -> bool:
    """True with a GPU; without one, says plainly that this is a smoke run."""
    if has_gpu():
        return True
    session.warn(
        "NO GPU: smoke run. Kernels run in Triton's CPU interpreter at tiny sizes; "
        "its times are interpreter times, not GPU times."
    )
    return False


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    if session.venv_backend != "none":
        session.install("ruff==0.17.6")  # the version .pre-commit-config.yaml runs
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Correctness: the interpreter run, then the compiled run (code checks, and the GPU tests when a GPU is present).

    Extra arguments go to both pytest runs, e.g. ``nox -s tests -- -k two_pass``.
    """
    python = install(session, "test", "attention", "bench")
    gpu = has_gpu()
    session.log("GPU found: GPU tests run and must pass" if gpu else "no GPU: GPU tests will SKIP")
    junit = os.environ.get("KERNELGATE_JUNIT_DIR")  # one JUnit XML per pytest run, for the gate
    report = lambda name: [f"--junitxml={Path(junit) / name}.xml"] if junit else []
    # Interpreted tests spread one by one (most live in one file); compiled ones one by one too, except
    # xdist groups (tests/conftest.py): a module's ahead-of-time compiles, or one attention kernel's tests.
    interpreted = ["-m", "kernel", "-n", "auto", *report("interpreter"), *session.posargs]
    session.run(python, "-m", "pytest", *interpreted, env={"TRITON_INTERPRET": "1"}, external=True)
    gpu_args = ["--require-gpu"] if gpu else []
    compiled = [*gpu_args, "-n", "auto", "--dist", "loadgroup", *report("compiled"), *session.posargs]
    session.run(python, "-m", "pytest", *compiled, external=True)


@nox.session
def accuracy(session: nox.Session) -> None:
    """Print the LayerNorm error table (GPU, or the interpreter on small shapes without one)."""
    python = install(session, "test")
    env = {} if has_gpu() else {"TRITON_INTERPRET": "1"}
    session.run(python, "-m", "kernelgate.accuracy", *session.posargs, env=env, external=True)


@nox.session
def bench(session: nox.Session) -> None:
    """The main job: benchmark this checkout with asv, store the results, publish the HTML
    history, print the table and write the chart.

    Extra arguments go to ``kernelgate.measure.main_job``: ``nox -s bench -- -b two_pass`` runs the
    cases whose id matches (as ``asv run --bench``), ``--gpus N`` spreads them over N GPUs.
    """
    python = install(session, "bench", "attention")
    gpu = gpu_or_smoke(session)
    session.run(
        python, "-m", "kernelgate.measure.main_job", *(["--gpu"] if gpu else []), *session.posargs, external=True
    )
    session.log("HTML history: serve it with `nox -s preview`")


@nox.session
def preview(session: nox.Session) -> None:
    """Serve the HTML history that ``nox -s bench`` published (asv preview)."""
    python = install_for_results(session)
    session.run(python, "-m", "asv", "preview", *session.posargs, external=True)


@nox.session
def gate(session: nox.Session) -> None:
    """The performance verdict from asv results: ``nox -s gate -- --base SHA --head SHA --machine NAME ...``."""
    python = install_for_results(session)
    session.run(python, "-m", "kernelgate.gate", *session.posargs, external=True)


@nox.session
def tune(session: nox.Session) -> None:
    """Sweep LayerNorm launch configs on the GPU and keep the best (``nox -s tune -- --help``)."""
    python = install(session, "bench")
    session.run(python, "-m", "kernelgate.tune.layer_norm", *session.posargs, external=True)


# pytest-benchmark's table: the robust statistics first; a group is one case, kernels beside baselines.
PERF_REPORT = ["--benchmark-group-by=group", "--benchmark-columns=median,iqr,min,max,rounds,iterations"]
# Interpreter smoke: one measured round per benchmark (still saved and compared), no time budget.
SMOKE_PERF_ROUNDS = ["--benchmark-min-rounds=1", "--benchmark-max-time=0"]


@nox.session
def perf(session: nox.Session) -> None:
    """pytest-benchmark for the kernel developer's loop (docs/measuring.md): save a baseline,
    edit a kernel, compare. Extra arguments go to pytest, e.g.
    ``nox -s perf -- -k two_pass --benchmark-save=base``, then
    ``nox -s perf -- -k two_pass --benchmark-compare --benchmark-compare-fail=median:5%``.
    """
    python = install(session, "test", "bench", "attention")
    gpu = gpu_or_smoke(session)
    env = {} if gpu else {"TRITON_INTERPRET": "1"}
    rounds = [] if gpu else SMOKE_PERF_ROUNDS
    args = ["tests/perf", "--perf", *PERF_REPORT, *rounds, *session.posargs]
    session.run(python, "-m", "pytest", *args, env=env, external=True)


@nox.session
def explain(session: nox.Session) -> None:
    """What a change does to the compiled kernels, without a GPU (docs/pr-check.md): every case of the suites the
    change selects, each commit compiled by its own code for sm_90. ``nox -s explain -- --base REF [--head REF]``;
    extra arguments go to ``python -m kernelgate.explain changes``."""
    python = install(session)
    if session.venv_backend != "none":  # each commit is installed on top of this environment's packages, offline
        session.install(lock_pin("setuptools"))
    session.run(python, "-m", "kernelgate.explain", "changes", *session.posargs, external=True)


@nox.session(name="pr-check")
def pr_check(session: nox.Session) -> None:
    """The pull request's GPU check (docs/pr-check.md): environment, the GPU tests of the affected
    kernels, base and head benchmarked case by case, the gate and the report, each step timed.

    ``nox -s pr-check -- --base REF --head REF [--full REASON] [--shard K/N]``;
    ``nox -s pr-check -- merge --out DIR SHARD_DIR...`` joins the shards into one verdict;
    ``nox -s pr-check -- select --base REF --head REF`` is the selection alone, without a GPU.
    """
    # The merge of the shards and the selection alone run on GitHub-hosted runners: no kernel stack.
    light = session.posargs[:1] in (["merge"], ["select"])
    python = install_for_results(session) if light else install(session, "test", "bench", "attention")
    # Each commit's environment is an overlay of the runner's packages: the current interpreter's
    # under --no-venv, the session's virtualenv otherwise.
    runner = sys.executable if session.venv_backend == "none" else python
    session.run(
        python, "-m", "kernelgate.prcheck", *session.posargs, env={"KERNELGATE_RUNNER_PYTHON": runner}, external=True
    )


@nox.session
def results(session: nox.Session) -> None:
    """Regenerate docs/results.md, the latest table per GPU, from a folder of asv results
    (``nox -s results -- --results PATH``; default ``.asv/results``)."""
    python = install(session, "bench")
    session.run(python, "-m", "kernelgate.report.results_page", *session.posargs, external=True)


@nox.session
def lock(session: nox.Session) -> None:
    """Re-lock, with hashes: the GPU runner's environment (requirements/runner.in -> runner.txt) and the
    tools that select and judge (verdict.in -> verdict.txt)."""
    session.install("uv")
    # The runner's Python; the verdict's tools for the oldest Python the project supports (they install on newer).
    for lock_file, python in ((RUNNER_LOCK, "3.12"), (VERDICT_LOCK, "3.11")):
        session.run(
            "uv", "pip", "compile", str(lock_file.with_suffix(".in")), "--generate-hashes", "--python-version", python,
            "--python-platform", "x86_64-manylinux_2_28", "-o", str(lock_file),
        )  # fmt: skip
