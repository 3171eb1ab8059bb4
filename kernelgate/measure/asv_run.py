"""The main job (``nox -s bench``): benchmark this checkout with asv, publish the history, print the table.

asv runs the checkout as it is in this interpreter's environment (asv's ``existing``
environment), files the results under the commit at HEAD and this machine's name
(``device_info``), publishes the HTML history, and ``kernelgate.report.bench`` prints the table
and writes the chart. With a GPU the JIT caches are filled first, in parallel
(``kernelgate.measure.warm``), so asv's per-benchmark processes load compiled code instead of
compiling it. Without one every benchmark runs once, in Triton's interpreter, at tiny sizes.

    python -m kernelgate.measure.asv_run [--gpu] [asv run arguments, e.g. -b two_pass]
"""

import os
import subprocess
import sys
from pathlib import Path

# Without a GPU: one sample of one call per benchmark; interpreter times only say the suite runs.
SMOKE_ATTRIBUTES = ["-a", "repeat=1", "-a", "rounds=1", "-a", "number=1", "-a", "warmup_time=0"]


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False)


def python_module(*args: str, **kwargs) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", *args], check=True, **kwargs)


def main(argv: list[str]) -> int:
    gpu = "--gpu" in argv
    asv_args = [a for a in argv if a != "--gpu"]
    if os.environ.get("PYTHONPATH"):  # asv drops PYTHONPATH from its benchmark processes, but not this
        os.environ.setdefault("ASV_PYTHONPATH", os.environ["PYTHONPATH"])
    head = git("rev-parse", "HEAD")
    if head.returncode:
        raise SystemExit(f"asv files results under a commit: this is not a git checkout ({head.stderr.strip()})")
    commit = head.stdout.strip()
    if git("diff", "--quiet", "HEAD").returncode:
        print(f"WARNING: uncommitted changes; their results are filed under HEAD ({commit[:8]})", flush=True)
    machine = python_module("kernelgate.measure.device_info", capture_output=True, text=True).stdout.split()[-1]
    if gpu:
        python_module("kernelgate.measure.warm")
    run = ["asv", "run", "--environment", f"existing:{sys.executable}", "--launch-method", "forkserver",
           "--machine", machine, "--set-commit-hash", commit, "--record-samples", "--show-stderr",
           *([] if gpu else SMOKE_ATTRIBUTES), *asv_args]  # fmt: skip
    # asv exits non-zero when one benchmark fails; the table below shows which, and this exits 1 after it.
    failed = subprocess.run([sys.executable, "-m", *run], check=False).returncode
    python_module("asv", "publish")
    python_module("kernelgate.report.bench", "--machine", machine, "--commit", commit)
    print(f"\nHTML history: {Path('.asv/html/index.html').resolve()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
