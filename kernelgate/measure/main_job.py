"""The main job (``nox -s bench``): benchmark this checkout, file asv results, publish the history, print the table.

The asv suite in ``benchmarks/`` runs in the benchmark worker the PR check runs too (``kernelgate.measure.workers``):
one process keeps the suite loaded and takes each case's samples with asv's own timing loop, instead
of a process per benchmark as ``asv run`` starts (about 4 s each, longer than most cases take to
measure). So main's history and a pull request's verdict come from the same samples. With several
identical GPUs, each runs its own process on a share of the cases (``--gpus``). The results are asv
result files under the commit at HEAD and this machine's name; ``asv publish`` then builds the HTML
history and ``kernelgate.report.bench`` prints the table and writes the chart. On a GPU the references'
times the metrics took are stored for the PR check (``kernelgate.measure.references``).

With a GPU, each GPU's JIT caches are filled first for its share, in parallel processes
(``kernelgate.measure.warm``). Without one every case is sampled once, in Triton's interpreter, at
tiny sizes.

    python -m kernelgate.measure.main_job [--gpu] [-b REGEX ...] [--gpus N]
"""

import argparse
import concurrent.futures
import json
import os
import subprocess
import sys
from pathlib import Path

from kernelgate import cli
from kernelgate.asv_case import Case
from kernelgate.measure import references, results, shards, workers
from kernelgate.measure.device_info import machine_entry
from kernelgate.measure.parallel import default_jobs
from kernelgate.measure.steps import Steps
from kernelgate.measure.warm import WARM_CASES_ENV

RESULTS_DIR = Path(".asv/results")
LOGS_DIR = Path(".asv/main-job")
ENV_NAME = "main"  # results files are <commit[:8]>-main.json
# As many samples of each time case as the PR check takes of each commit; one without a GPU.
GPU_SAMPLES = workers.ROUNDS * workers.SAMPLES_PER_ROUND


def git(*args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], capture_output=True, text=True, check=False)


def parse_args(argv: list[str]) -> argparse.Namespace:
    parser = argparse.ArgumentParser(prog="python -m kernelgate.measure.main_job", description=__doc__.split("\n")[0])
    parser.add_argument("--gpu", action="store_true", help="time on the GPU (otherwise: interpreter smoke run)")
    parser.add_argument(
        "-b", "--bench", type=cli.regex, action="append", metavar="REGEX",
        help="only the cases whose id (name(params)) this matches, as asv run's --bench; repeatable",
    )  # fmt: skip
    parser.add_argument("--gpus", type=cli.positive_int, help="GPUs to spread the cases over (default: every visible)")
    return parser.parse_args(argv)


def visible_gpus(wanted: int | None) -> list[str]:
    """CUDA_VISIBLE_DEVICES values, one per worker: identical GPUs only, since their results are filed
    under one machine."""
    import torch

    count = torch.cuda.device_count()
    if count == 0:
        raise SystemExit("nvidia-smi lists a GPU but torch sees none: check the driver and CUDA_VISIBLE_DEVICES")
    if wanted is not None and wanted > count:
        raise SystemExit(f"--gpus {wanted}: this machine has {count} visible GPU(s)")
    count = wanted or count
    names = {torch.cuda.get_device_name(i) for i in range(count)}
    if len(names) > 1:
        differ = ", ".join(sorted(names))
        raise SystemExit(f"the visible GPUs differ ({differ}): choose one kind with CUDA_VISIBLE_DEVICES")
    listed = os.environ.get("CUDA_VISIBLE_DEVICES")
    ids = [i.strip() for i in listed.split(",")] if listed else [str(i) for i in range(count)]
    return ids[:count]


def head_side(commit: str, gpu: str | None) -> workers.Side:
    """The worker of ``gpu`` (None: the interpreter's), which records the references its metrics time
    (``reference_times``)."""
    env = {**os.environ, **({} if gpu is None else {"CUDA_VISIBLE_DEVICES": gpu})}
    log = LOGS_DIR / f"worker-gpu{gpu}.log" if gpu is not None else LOGS_DIR / "worker.log"
    env[references.RECORD_ENV] = str(_times_file(gpu).resolve())
    return workers.Side("head", commit, Path.cwd(), Path(sys.executable), env, log.resolve())


def _times_file(gpu: str | None) -> Path:
    return LOGS_DIR / f"reference-times-gpu{gpu}.jsonl"


def record_references(commit: str, gpus: list[str]) -> None:
    """The references' times the GPUs' workers recorded, added to the store (``kernelgate.measure.references``)
    under each suite's environment, for the PR check to read head's metrics against."""
    from kernelgate.cases import SUITES

    suite_of = {grid.name: suite.name for suite in SUITES for grid in suite.grids}
    times: dict[str, dict[str, dict[str, float]]] = {}
    for gpu in gpus:
        for case, refs in references.recorded(_times_file(gpu)).items():
            times.setdefault(suite_of[case.split("/")[0]], {})[case] = refs
    read = lambda path: Path(path).read_bytes() if Path(path).is_file() else None
    for suite, suite_times in sorted(times.items()):
        env = references.environment(suite, read)
        if env is not None:
            stored = references.record(references.store(), env, suite_times, commit)
            print(f"{suite}: {len(suite_times)} cases' reference times in {stored}", flush=True)


def warm_up(cases: list[Case], side: workers.Side, jobs: int) -> None:
    """Fill the JIT caches for ``cases`` on the side's GPU; a failure is not fatal (setup compiles what is missing)."""
    chosen = side.log.with_name(side.log.stem + "-warm-cases.json")
    chosen.parent.mkdir(parents=True, exist_ok=True)
    chosen.write_text(json.dumps([[c.benchmark, c.values] for c in cases]))
    env = {**side.env, WARM_CASES_ENV: str(chosen)}
    argv = [sys.executable, "-m", "kernelgate.measure.warm", f"--jobs={jobs}"]
    code = subprocess.run(argv, env=env, check=False).returncode
    if code:
        print(f"the JIT warm-up exited {code}: each benchmark's setup compiles what is missing", flush=True)


def measure(commit: str, cases: list[Case], gpus: list[str] | None, samples: int) -> dict[str, dict]:
    """{case id: record}. Each GPU takes a share of the cases (a case's variants, which its metrics
    measure together, stay on one) and warms its JIT caches; once every GPU's warm-up has ended, each
    measures its share in its own process. A GPU that measured while another's warm-up still compiled
    would read host costs on a busy CPU."""
    if not gpus:
        return workers.measure([head_side(commit, None)], {"head": cases}, rounds=1, samples=samples)["head"]
    jobs = default_jobs(12, shares=len(gpus))  # warm.py's own default, on each GPU's part of the cores
    shares = [(head_side(commit, gpu), share) for gpu, share in zip(gpus, shards.shard(cases, len(gpus)), strict=True)]
    shares = [(side, share) for side, share in shares if share]
    with concurrent.futures.ThreadPoolExecutor(len(shares)) as pool:
        for warming in [pool.submit(warm_up, share, side, jobs) for side, share in shares]:
            warming.result()
        runs = [pool.submit(workers.measure, [side], {"head": p}, rounds=1, samples=samples) for side, p in shares]
        return {case_id: record for run in runs for case_id, record in run.result()["head"].items()}


def print_table(machine: str, commit: str) -> None:
    """The run's table and chart (``kernelgate.report.bench``)."""
    report = [sys.executable, "-m", "kernelgate.report.bench", "--machine", machine, "--commit", commit]
    subprocess.run(report, check=True)


def main(argv: list[str]) -> int:
    args = parse_args(argv)
    head = git("rev-parse", "HEAD")
    if head.returncode:
        raise SystemExit(f"asv files results under a commit: this is not a git checkout ({head.stderr.strip()})")
    commit = head.stdout.strip()
    if git("diff", "--quiet", "HEAD").returncode:
        print(f"WARNING: uncommitted changes; their results are filed under HEAD ({commit[:8]})", flush=True)
    date_ms = int(git("show", "-s", "--format=%ct", commit).stdout.strip()) * 1000

    steps = Steps()
    with steps("machine and suite"):
        machine = machine_entry()
        gpus = visible_gpus(args.gpus) if args.gpu else None
        try:
            suite = workers.discover([head_side(commit, None)])["head"]
        except workers.WorkerError as exc:
            raise SystemExit(str(exc)) from None
        cases = workers.selected(workers.measured_cases(suite), args.bench or [".*"])
        if not cases:
            raise SystemExit(f"no benchmark case matches {args.bench}")
        where = f"{len(gpus)} GPU(s)" if gpus else "Triton's interpreter"
        print(f"{len(cases)} cases of {commit[:8]} on {machine['machine']}, {where}", flush=True)
    with steps("JIT warm-up and benchmarks" if args.gpu else "benchmarks"):
        for gpu in gpus or [None]:
            _times_file(gpu).unlink(missing_ok=True)
        try:
            records = measure(commit, cases, gpus, GPU_SAMPLES if args.gpu else 1)
        except workers.WorkerError as exc:
            raise SystemExit(f"the benchmark process stopped; nothing was recorded:\n{exc}") from None
    with steps("results and history"):
        results.write_suite(RESULTS_DIR / "benchmarks.json", suite)
        results.write_machine(RESULTS_DIR, machine)
        results.write_commit(RESULTS_DIR, machine, commit, date_ms, suite, records, env_name=ENV_NAME, update=True)
        if gpus:
            record_references(commit, gpus)
        subprocess.run([sys.executable, "-m", "asv", "publish"], check=True)
    print_table(machine["machine"], commit)
    print(f"\nHTML history: {Path('.asv/html/index.html').resolve()}\n\n{steps.table()}", flush=True)
    failed = {case_id: r for case_id, r in records.items() if r["status"] == "failed"}
    for case_id, record in sorted(failed.items()):
        print(f"FAILED {case_id}: {record['reason']}", flush=True)
    if failed:
        print(f"{len(failed)} of {len(records)} cases failed; workers' logs: {LOGS_DIR.resolve()}", flush=True)
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
