"""Sessions: ``nox -s tests`` (the test command), ``lint``, ``accuracy``, ``bench`` (the main job),
``tune``, ``gate`` and ``perf``.

Environments
------------
* Default: a fresh virtualenv with the pinned torch/triton below (a CPU
  machine gets CPU torch and runs kernels in Triton's interpreter).
* ``nox --no-venv ...``: run in the current interpreter, keeping its torch and
  triton (a GPU runner's CUDA builds). Only missing packages are installed;
  add ``--no-install`` on an offline machine.
"""

import os
import subprocess
import sys
from pathlib import Path

import nox

ROOT = Path(__file__).parent
# What a fresh install gets. The PyTorch baseline's speed depends on this pin.
TORCH = "torch==2.13.0"
TRITON = "triton==3.6.0"

nox.options.sessions = ["lint", "tests"]
nox.options.default_venv_backend = "virtualenv"


def _passthrough(session: nox.Session) -> bool:
    return session.venv_backend == "none"


def install(session: nox.Session, *extras: str) -> None:
    """Install the project with ``extras``; torch/triton only into a fresh venv."""
    spec = f".[{','.join(extras)}]" if extras else "."
    if _passthrough(session):
        session.env["PYTHONPATH"] = os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))
        # asv drops PYTHONPATH from benchmark processes unless it is also given as ASV_PYTHONPATH.
        session.env["ASV_PYTHONPATH"] = session.env["PYTHONPATH"]
        if not session._runner.global_config.no_install:
            py(session, "-m", "pip", "install", "-q", "-e", spec)
        return
    session.install(TORCH, TRITON)
    session.install("-e", spec)


def has_cuda(session: nox.Session) -> bool:
    probe = "import torch, sys; sys.exit(0 if torch.cuda.is_available() else 1)"
    return subprocess.run([_python(session), "-c", probe], env=_env(session), check=False).returncode == 0


def gpu_or_smoke(session: nox.Session) -> bool:
    """True with a GPU; without one, says plainly that this is a smoke run."""
    gpu = has_cuda(session)
    if not gpu:
        session.warn(
            "NO GPU: smoke run. Kernels run in Triton's CPU interpreter at tiny sizes; "
            "the timings are INTERPRETER timings, not GPU timings."
        )
    return gpu


def _python(session: nox.Session) -> str:
    return sys.executable if _passthrough(session) else str(Path(session.bin) / "python")


def _env(session: nox.Session) -> dict:
    # session.env maps variables nox unsets to None
    return {k: v for k, v in {**os.environ, **session.env}.items() if v is not None}


def py(session: nox.Session, *args: str, **kwargs):
    """Run this session's Python (the venv's, or the current interpreter's with --no-venv)."""
    return session.run(_python(session), *args, **kwargs)


@nox.session
def lint(session: nox.Session) -> None:
    """ruff: lint and formatting."""
    if not _passthrough(session):
        session.install("ruff")
    session.run("ruff", "check", ".")
    session.run("ruff", "format", "--check", ".")


@nox.session
def tests(session: nox.Session) -> None:
    """Correctness: interpreter run, then the compiled run (codegen checks, and GPU tests when a GPU is present).

    Extra arguments go to both pytest runs, e.g. ``nox -s tests -- -k two_pass``.
    """
    install(session, "test", "attention", "bench")
    gpu = has_cuda(session)
    session.log("CUDA device found: GPU tests run and must pass" if gpu else "no CUDA device: GPU tests will SKIP")
    junit = os.environ.get("KERNELS_JUNIT_DIR")  # one JUnit XML per pytest run, for the gate
    report = lambda name: [f"--junitxml={Path(junit) / name}.xml"] if junit else []
    interpreted = ["-m", "kernel", *report("interpreter"), *session.posargs]
    py(session, "-m", "pytest", *interpreted, env={"TRITON_INTERPRET": "1"})
    py(session, "-m", "pytest", *(["--require-gpu"] if gpu else []), *report("compiled"), *session.posargs)


@nox.session
def accuracy(session: nox.Session) -> None:
    """Print the LayerNorm error table (GPU, or the interpreter on small shapes without one)."""
    install(session, "test")
    env = {} if has_cuda(session) else {"TRITON_INTERPRET": "1"}
    py(session, "-m", "harness.accuracy_report", *session.posargs, env=env)


SMOKE_ASV_ATTRIBUTES = ["-a", "repeat=1", "-a", "rounds=1", "-a", "number=1", "-a", "warmup_time=0"]


def _git_head() -> str:
    head = subprocess.run(["git", "rev-parse", "HEAD"], cwd=ROOT, capture_output=True, text=True, check=True)
    return head.stdout.strip()


def _asv_run_checkout(session: nox.Session, gpu: bool, *asv_args: str) -> tuple[str, str]:
    """Benchmark the checkout as it is (asv's 'existing' environment) under this
    machine's name; returns (machine, commit)."""
    machine = py(session, "-m", "harness.device_info", silent=True).strip().splitlines()[-1]
    commit = _git_head()
    if subprocess.run(["git", "diff", "--quiet", "HEAD"], cwd=ROOT, check=False).returncode:
        session.warn(f"uncommitted changes: their results are filed under HEAD ({commit[:8]})")
    py(
        session, "-m", "asv", "run", "--environment", f"existing:{_python(session)}", "--launch-method", "forkserver",
        "--machine", machine, "--set-commit-hash", commit, "--record-samples", "--show-stderr",
        *([] if gpu else SMOKE_ASV_ATTRIBUTES), *asv_args,
    )  # fmt: skip
    return machine, commit


@nox.session
def bench(session: nox.Session) -> None:
    """The main job: benchmark this checkout with asv, store the results, publish
    the HTML history, print the table and write the chart.

    Extra arguments go to ``asv run``, e.g. ``nox -s bench -- -b two_pass``.
    """
    install(session, "bench", "attention")
    gpu = gpu_or_smoke(session)
    if gpu:  # compile everything in parallel first: asv's per-benchmark processes then load, not compile
        py(session, "-m", "harness.warm")
    machine, commit = _asv_run_checkout(session, gpu, *session.posargs)
    py(session, "-m", "asv", "publish")
    py(session, "-m", "harness.report", "--machine", machine, "--commit", commit)
    session.log(f"HTML history: {ROOT / '.asv' / 'html' / 'index.html'} (serve it with `asv preview`)")


@nox.session
def gate(session: nox.Session) -> None:
    """The PR's performance verdict from asv results: ``nox -s gate -- --base SHA --head SHA --machine NAME ...``."""
    install(session, "bench")
    py(session, "-m", "harness.gate", *session.posargs)


@nox.session
def tune(session: nox.Session) -> None:
    """Sweep LayerNorm launch configs on the GPU and keep the best (``nox -s tune -- --help``)."""
    install(session, "bench")
    py(session, "-m", "harness.tune", *session.posargs)


# pytest-benchmark's table: the robust statistics first; a group is one case, kernels beside baselines.
PERF_REPORT = ["--benchmark-group-by=group", "--benchmark-columns=median,iqr,min,max,rounds,iterations"]
# Interpreter smoke: one measured round per benchmark (still saved and compared), no time budget.
SMOKE_PERF_ROUNDS = ["--benchmark-min-rounds=1", "--benchmark-max-time=0"]


@nox.session
def perf(session: nox.Session) -> None:
    """pytest-benchmark for the kernel developer's loop (docs/perf-loop.md): save a
    baseline, edit a kernel, compare. Extra arguments go to pytest, e.g.
    ``nox -s perf -- -k two_pass --benchmark-save=base``, then
    ``nox -s perf -- -k two_pass --benchmark-compare --benchmark-compare-fail=median:5%``.
    """
    install(session, "test", "bench", "attention")
    gpu = gpu_or_smoke(session)
    env = {} if gpu else {"TRITON_INTERPRET": "1"}
    rounds = [] if gpu else SMOKE_PERF_ROUNDS
    py(session, "-m", "pytest", "tests/perf", "--perf", *PERF_REPORT, *rounds, *session.posargs, env=env)
