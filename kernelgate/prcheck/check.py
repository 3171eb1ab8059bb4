"""The PR check, step by step: environment, selection, GPU tests beside cases and JIT warm-up, benchmarks, gate,
report.

Everything a step needs is in its output folder (``--out``): the manifest (commits, machine,
selection, shard, the cases measured, each step's time), each commit's suite, the raw measurements,
the tests' JUnit XML, logs, asv result files and the gate's report. A sharded run (``--shard K/N``)
stops after its own gate; ``merge`` joins the shards' folders into one verdict.

The code that judges runs from the checkout that started the check; the thresholds and the group
map are read from the base commit, so a pull request cannot loosen its own check, and what head's
copies add to them is read from git as data and can only add work and floors (``selected_plan``).
Head's processes run in a scratch folder of their own, as another user where one is given
(``isolation.py``): nothing they write reaches the output folder.
"""

import contextlib
import dataclasses
import json
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from kernelgate.asv_case import Case
from kernelgate.measure import references, results, shards, workers
from kernelgate.measure.device_info import machine_entry
from kernelgate.measure.parallel import available_cpus, default_jobs
from kernelgate.measure.progress import Progress, counted_in
from kernelgate.measure.steps import Steps
from kernelgate.prcheck import isolation, selection
from kernelgate.prcheck.environments import RunnerError, overlay

TRUSTED_FILES = ("perf-thresholds.toml", "pr-check.toml")
# Each time case's spread over identical-code checks (python -m kernelgate.gate.noise --record), base's where it
# has one: the report's resolution per case.
NOISE_FILE = "perf-noise.json"
# In the output folder: the judging files as the base commit has them, and head's (what it adds, never what it loosens).
TRUSTED, FROM_HEAD = Path("trusted"), Path("trusted", "head")
TEST_REPORT = Path("junit", "gpu-tests.xml")  # the GPU tests' JUnit XML, in the output folder
# In the output folder: each case's first reading, and the gate's re-measurements of some of them.
MEASUREMENTS, REMEASURED = "measurements.json", "remeasured.json"
FAILURES = "failures.json"  # why each failed case failed, for the gate's report
# pytest-xdist workers for the GPU tests: one per available core, each holding a CUDA context on the
# one GPU, at most 16 (the cores of a one-GPU runner; more contend for the GPU rather than add speed).
TEST_PROCESSES = 16
NO_GPU_GROUPS = "the PR check times kernels on a GPU; none is visible (nvidia-smi lists no device)"
# A file of the cases a commit's warm-up is for (read by kernelgate.measure.warm). An environment variable, so
# that a commit whose warm-up predates it warms every workload instead of failing.
WARM_CASES_ENV = "KERNELGATE_WARM_CASES"


class CheckError(Exception):
    """The check cannot go on; it fails closed with this reason in its report."""


def git(*args: str, cwd: Path | None = None) -> str:
    proc = subprocess.run(["git", *args], cwd=cwd, capture_output=True, text=True, check=False)
    if proc.returncode:
        raise CheckError(f"git {' '.join(args)}: {proc.stderr.strip()}")
    return proc.stdout


def resolve(ref: str) -> str:
    return git("rev-parse", "--verify", f"{ref}^{{commit}}").strip()


def checkout(repo: Path, commit: str, work: Path) -> Path:
    """A worktree of ``commit`` under ``work``, made once per commit."""
    tree = work / "trees" / commit[:12]
    if (tree / ".git").exists() and git("rev-parse", "HEAD", cwd=tree).strip() == commit:
        return tree
    git("worktree", "prune", cwd=repo)
    git("worktree", "add", "--force", "--detach", str(tree), commit, cwd=repo)
    return tree


def drop_scratch(scratch: Path) -> None:
    """Head's scratch folder gone, its worktree too."""
    shutil.rmtree(scratch, ignore_errors=True)
    subprocess.run(["git", "worktree", "prune"], capture_output=True, check=False)


def base_cache_env(cache: Path) -> dict[str, str]:
    """Base's JIT caches, kept between runs; head's are its scratch folder's (``isolation.head_env``)."""
    root = cache / "base"
    return {
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TILELANG_CACHE_DIR": str(root / "tilelang"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
    }


def judging_changes(base: str, head: str, cwd: Path | None = None) -> str:
    """The diff of the files that judge (``TRUSTED_FILES``) from base to head. Recorded in the manifest
    where both commits are at hand, so that every report, the merged one too, shows it."""
    return git("diff", base, head, "--", *TRUSTED_FILES, cwd=cwd)


def has_gpu() -> bool:
    try:
        return subprocess.run(["nvidia-smi", "-L"], capture_output=True, check=False).returncode == 0
    except OSError:
        return False


@dataclasses.dataclass
class Plan:
    """What one run of the check measures: read from and written to ``<out>/manifest.json``."""

    base: str
    head: str
    machine: dict
    groups: list[str]
    reasons: dict[str, list[str]]
    shard: tuple[int, int]  # (K, N): this run's share of N; (0, N): the merge of N shards
    tests: list[str]
    benchmarks: list[str]
    sides: dict[str, dict] = dataclasses.field(default_factory=dict)
    dates: dict[str, int] = dataclasses.field(default_factory=dict)  # commit dates, ms since the epoch (asv's)
    cases: dict[str, list[str]] = dataclasses.field(default_factory=dict)
    steps: list = dataclasses.field(default_factory=list)
    judging_changes: str = ""  # the pull request's diff of TRUSTED_FILES: reported, applied once merged
    # Per suite, the references' times found stored for head's environment: key, cases, stored, commit.
    references: dict[str, dict] = dataclasses.field(default_factory=dict)

    def save(self, out: Path) -> None:
        (out / "manifest.json").write_text(json.dumps(dataclasses.asdict(self), indent=1))

    @classmethod
    def load(cls, out: Path) -> "Plan":
        path = out / "manifest.json"
        try:
            data = json.loads(path.read_text())
            return cls(**{**data, "shard": tuple(data["shard"])})
        except (OSError, ValueError, TypeError, KeyError) as exc:
            raise CheckError(f"{path}: not a PR check manifest ({exc})") from exc

    def side(self, role: str) -> workers.Side:
        """The commit's side: its processes start with the check's environment, less what head must not see, and
        its own (``isolation``), as its user."""
        s = self.sides[role]
        env = isolation.environ(s["env"], untrusted=s.get("user") is not None)
        as_user = isolation.popen_user(s.get("user"))
        return workers.Side(role, s["commit"], Path(s["tree"]), Path(s["python"]), env, Path(s["log"]), as_user)


def commits(base_ref: str, head_ref: str) -> tuple[str, str]:
    """Both refs as commit hashes; one commit twice is refused: there would be nothing to compare."""
    base, head = resolve(base_ref), resolve(head_ref)
    if base == head:
        raise CheckError(f"base and head are the same commit ({base[:12]}): there is nothing to compare")
    return base, head


def write_trusted(base: str, head: str, out: Path) -> None:
    """The files that judge, as base has them in ``<out>/trusted`` and as head has them in ``<out>/trusted/head``,
    read from git: nothing of either commit runs."""
    for commit, folder in ((base, out / TRUSTED), (head, out / FROM_HEAD)):
        folder.mkdir(parents=True, exist_ok=True)
        for name in TRUSTED_FILES:
            (folder / name).write_text(git("show", f"{commit}:{name}"))
    if git("ls-tree", "--name-only", base, "--", NOISE_FILE).strip():
        (out / TRUSTED / NOISE_FILE).write_text(git("show", f"{base}:{NOISE_FILE}"))


def selected_plan(base: str, head: str, out: Path, full: str | None) -> "Plan":
    """What the change from base to head selects: base's group map and what head's adds to it (its new
    groups, its further tests and benchmarks), printed with why. ``select``, every shard and the merge
    compute it alike from git, so the merge refuses a shard whose manifest says otherwise."""
    write_trusted(base, head, out)
    groups = selection.load(out / TRUSTED / "pr-check.toml")
    try:
        groups = selection.with_additions(groups, selection.load(out / FROM_HEAD / "pr-check.toml"))
    except selection.SelectionError as exc:
        raise CheckError(f"head's pr-check.toml, whose added groups would run: {exc}") from exc
    changed = git("diff", "--name-only", base, head).split()
    chosen = selection.select(groups, changed, full=full)
    for name in chosen.groups:
        print(f"{name}: {', '.join(chosen.reasons[name][:6])}{' ...' if len(chosen.reasons[name]) > 6 else ''}")
    if not chosen.groups:
        print(f"no group selected by the {len(changed)} changed paths: nothing to run on the GPU")
    dates = {role: int(git("show", "-s", "--format=%ct", commit).strip()) * 1000
             for role, commit in (("base", base), ("head", head))}  # fmt: skip
    return Plan(base, head, {}, list(chosen.groups), chosen.reasons, (1, 1), chosen.tests(groups),
                chosen.benchmarks(groups), dates=dates, judging_changes=judging_changes(base, head))  # fmt: skip


def prepare(args, steps: Steps, scratch: Path) -> Plan:
    """The environment and selection steps. Head's worktree, environment and JIT caches go in ``scratch``
    (``isolation.scratch``), its processes run as ``args.head_user``."""
    out = args.out
    with steps("environment"):
        if not has_gpu():
            raise CheckError(NO_GPU_GROUPS)
        repo = Path(git("rev-parse", "--show-toplevel").strip())
        base, head = commits(args.base, args.head)
        machine = machine_entry()
        places = {"base": (args.work, base_cache_env(args.cache), None),
                  "head": (scratch, isolation.head_env(scratch), args.head_user)}  # fmt: skip
        sides = {}
        for role, commit in (("base", base), ("head", head)):
            work, env, user = places[role]
            tree = checkout(repo, commit, work)
            as_user = isolation.popen_user(user)
            if as_user:  # head's own tree: its build and tests may write there, and nowhere else
                subprocess.run(["chown", "-R", f"{as_user['user']}:{as_user['group']}", str(tree)], check=True)
            try:
                env_args = {**as_user, "env": isolation.environ(env, untrusted=user is not None)}
                python = overlay(args.runner_python, tree, work / "envs" / commit[:12], env_args)
            except RunnerError as exc:
                raise CheckError(str(exc)) from exc
            log = out / "logs" / f"{role}-worker.log"
            sides[role] = {"commit": commit, "tree": str(tree), "python": str(python),
                           "env": env, "log": str(log), "user": user}  # fmt: skip
            print(f"{role}: {commit[:12]} in {tree}, {python}{f', as {user}' if user else ''}", flush=True)
        print(f"machine: {machine['machine']} ({machine.get('gpu')}, driver {machine.get('gpu_driver')})", flush=True)
    with steps("select"):
        plan = selected_plan(base, head, out, args.full)
    if args.bench:  # narrowed by hand: every selected pattern, and this one too
        plan.benchmarks = [f"(?={pattern})(?=.*?(?:{args.bench}))" for pattern in plan.benchmarks]
    plan.machine, plan.shard, plan.sides = machine, args.shard, sides
    return plan


@contextlib.contextmanager
def tests_beside(plan: Plan, out: Path, steps: Steps):
    """The GPU tests run while the block runs (choosing the cases, the JIT warm-up: compiles, nothing timed),
    so that their compiles fill the cores the others leave idle. Leaving the block waits for them: no test
    runs while a benchmark is timed. Their output is printed when they end."""
    if not plan.tests:
        yield
        return
    head = plan.side("head")
    k, n = plan.shard
    # pytest is head's code: it writes its report where head may write, and the check copies it out.
    junit, log_path = Path(head.env["HOME"]) / TEST_REPORT.name, out / "logs" / "gpu-tests.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Correctness only: pytest-benchmark's timing is off (it would warn once per xdist worker). loadgroup:
    # the tests that build one kernel run on one worker (tests/conftest.py groups them), the others one by one.
    workers = str(min(TEST_PROCESSES, available_cpus()))
    argv = [str(head.python), "-m", "pytest", *plan.tests, "-p", "no:cacheprovider", "-q", "-n", workers,
            "--dist", "loadgroup", "--benchmark-disable", "--require-gpu", f"--shard={k}/{n}",
            f"--junitxml={junit}"]  # fmt: skip
    print(f"GPU tests started beside the next steps (log: {log_path})", flush=True)
    steps.watched["GPU tests"] = log_path
    start = time.perf_counter()
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=head.tree, env=head.env, stdout=log, stderr=subprocess.STDOUT,
                                **head.as_user)  # fmt: skip
    try:
        yield
    except BaseException:
        proc.kill()
        raise
    finally:
        code = proc.wait()
        steps.watched.pop("GPU tests", None)
        if junit.is_file():
            (out / TEST_REPORT).parent.mkdir(parents=True, exist_ok=True)
            shutil.copyfile(junit, out / TEST_REPORT)
        seconds = time.perf_counter() - start
        # 1: a test failed, 5: this shard drew none. Failures are the gate's to judge, from the JUnit XML.
        outcome = "ok" if code in (0, 1, 5) else "failed"
        steps.times.append(("GPU tests", seconds, outcome))
    print(f"\n==> GPU tests\n{log_path.read_text(errors='replace')}pytest exit code {code}", flush=True)
    print(f"<== GPU tests: {outcome}, {seconds:.1f} s", flush=True)


def choose(plan: Plan, out: Path, steps: Steps) -> dict[str, list[Case]]:
    """Discover both suites and choose this shard's cases of each (``plan.cases`` records their ids)."""
    with steps("choose cases"):
        suites = workers.discover([plan.side("base"), plan.side("head")])
        for role, suite in suites.items():
            results.write_suite(out / "suites" / f"{role}.json", suite)
        chosen = chosen_cases(suites, plan.benchmarks, bounded_tracks(out, plan.machine["gpu_class"]))
        k, n = plan.shard
        mine = set(shards.shard(sorted(set(chosen["base"]) | set(chosen["head"])), n)[k - 1])
        cases = {role: [c for c in role_cases if c in mine] for role, role_cases in chosen.items()}
        plan.cases = {role: [c.asv_id for c in role_cases] for role, role_cases in cases.items()}
        tracks = sum(c.kind == "track" for c in cases["head"])
        print(f"shard {k}/{n}: {len(cases['base'])} base and {len(cases['head'])} head cases, {tracks} of them "
              f"track_* values a rule bounds on {plan.machine['gpu_class']}", flush=True)  # fmt: skip
        return cases


def warm_up(plan: Plan, steps: Steps, cases: dict[str, list[Case]], stored: Path | None = None) -> None:
    """Both commits' JIT caches filled side by side, for the cases this run measures on each. Base times only
    this project's kernels: the references (each suite's ``jit_references``), which head's metrics compare
    against, are warmed on head alone, for the metrics cases whose references' times are not ``stored``
    (``stored_references``; the time cases warm this project's kernels). A failed warm-up is not fatal: the
    benchmark's setup compiles what is missing, outside the timed samples."""
    if stored is not None:
        found = json.loads(stored.read_text())
        cases = {**cases, "head": [c for c in cases["head"] if c.kind == "time" or store_name(c) not in found]}
    with steps("JIT warm-up"), contextlib.ExitStack() as stack:
        running, jobs = [], default_jobs(12)
        steps.progress.counting = lambda: counted_in([log for _, _, log in running])
        # A third of the processes for base: head's torch.compile work is the longer path.
        options = {"base": ["--without-references", f"--jobs={max(1, jobs // 3)}"], "head": [f"--jobs={jobs}"]}
        for role, extra in options.items():
            side = plan.side(role)
            argv = [str(side.python), "-m", "kernelgate.measure.warm", "--groups", *plan.groups, *extra]
            log_path = side.log.with_name(f"{role}-warm.log")
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = stack.enter_context(log_path.open("w"))
            steps.progress.logs[f"{role} warm-up"] = log_path
            warm_cases = log_path.with_name(f"{role}-warm-cases.json")
            warm_cases.write_text(json.dumps([[c.benchmark, c.values] for c in cases[role]]))
            env = {**side.env, WARM_CASES_ENV: str(warm_cases)}
            proc = subprocess.Popen(argv, cwd=side.tree, env=env, stdout=log, stderr=subprocess.STDOUT,
                                    **side.as_user)  # fmt: skip
            stack.callback(proc.kill)  # a no-op once it has exited; an interrupted check leaves no compiler behind
            running.append((role, proc, log_path))
        for role, proc, log_path in running:
            code = proc.wait()
            last = (log_path.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
            print(f"{role}: {last} ({log_path})", flush=True)
            if code:
                print(f"{role}'s warm-up exited {code}: its benchmarks' setup compiles what is missing", flush=True)


def measure(plan: Plan, steps: Steps, cases: dict[str, list[Case]], stored: Path | None = None) -> dict:
    """Measure the chosen cases, base and head interleaved, head's metrics against the references' ``stored``
    times (``stored_references``); returns the records."""
    with steps("benchmarks"):
        head = plan.side("head")
        if stored is not None:
            head = dataclasses.replace(head, env={**head.env, references.STORED_ENV: str(stored)})
        return workers.measure([plan.side("base"), head], cases, progress=steps.progress)


def store_name(case: Case) -> str:
    """A metrics case's name in the references' store (``references.case_name``): its grid and leading values."""
    return references.case_name(case.benchmark.split(".")[1].removesuffix("Metrics"), case.values[:-1])


def stored_references(plan: Plan, out: Path, head_cases: list[Case], store: Path) -> Path | None:
    """The references' times ``store`` holds for head's environment, for the metrics cases head measures, in a
    file head's worker reads (``kernelgate.measure.references``); ``plan.references`` says what was found for
    each suite. None where nothing was."""
    tree = Path(plan.sides["head"]["tree"])
    read = lambda path: (tree / path).read_bytes() if (tree / path).is_file() else None
    units: dict[str, set[str]] = {}  # suite: its metrics cases, by their name in the store
    for case in head_cases:
        if case.kind == "track":
            units.setdefault(case.benchmark.split(".")[0].removeprefix("bench_"), set()).add(store_name(case))
    found: dict[str, dict] = {}
    for suite, wanted in sorted(units.items()):
        env = references.environment(suite, read)
        entry = references.lookup(store, env) if env is not None else None
        times = {case: refs for case, refs in (entry or {}).get("times", {}).items() if case in wanted}
        plan.references[suite] = {"key": references.key(env) if env else None, "cases": len(wanted),
                                  "stored": len(times), "commit": (entry or {}).get("commit")}  # fmt: skip
        found.update(times)
        where = f" (timed by main at {entry['commit'][:12]})" if times else ""
        print(f"{suite}: the references' times of {len(times)} of {len(wanted)} metrics cases stored for this "
              f"environment{where}", flush=True)  # fmt: skip
    if not found:
        return None
    path = out / "references" / "head.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(found))
    path.parent.chmod(0o755)  # head's worker reads it, as head's user; it cannot write there
    path.chmod(0o644)
    return path


def bounded_tracks(out: Path, gpu_class: str) -> Callable[[Case], bool]:
    """Whether a track_* case is one the gate bounds on this GPU class (a rule's min or max, informational
    ones too, base's or one head adds): the check measures only those. The main job's history tracks every
    value."""
    from kernelgate.gate import GateError
    from kernelgate.gate.thresholds import load_thresholds, with_head_rules

    try:
        thresholds = load_thresholds(out / TRUSTED / "perf-thresholds.toml")
    except GateError as exc:
        raise CheckError(f"the base commit's perf-thresholds.toml: {exc}") from exc
    try:
        thresholds = with_head_rules(thresholds, out / FROM_HEAD / "perf-thresholds.toml")
    except GateError as exc:
        raise CheckError(str(exc)) from exc
    rules = [r for r in thresholds.applicable(gpu_class) if r.min is not None or r.max is not None]

    def bounded(case: Case) -> bool:
        return any(rule.matches(case) for rule in rules)

    return bounded


def chosen_cases(
    suites: dict[str, dict], patterns: list[str], bounded: Callable[[Case], bool]
) -> dict[str, list[Case]]:
    """The selected cases of each commit's suite: base's and head's time cases, and head's track cases
    that a floor or ceiling bounds (they judge head's values only)."""
    chosen = {role: workers.selected(workers.measured_cases(suite), patterns) for role, suite in suites.items()}
    chosen["base"] = [c for c in chosen["base"] if c.kind == "time"]
    chosen["head"] = [c for c in chosen["head"] if c.kind == "time" or bounded(c)]
    return chosen


def read_suites(out: Path) -> dict[str, dict]:
    """Each commit's suite as the run discovered it (asv's benchmarks.json, less its format version)."""
    suites = {}
    for role in ("base", "head"):
        suite = json.loads((out / "suites" / f"{role}.json").read_text())
        suites[role] = {name: entry for name, entry in suite.items() if name != "version"}
    return suites


def write_results(plan: Plan, out: Path, records: dict) -> Path:
    results_dir = out / "results"
    suites = read_suites(out)
    results.write_suite(results_dir / "benchmarks.json", suites["head"])
    results.write_machine(results_dir, plan.machine)
    for role, commit in (("base", plan.base), ("head", plan.head)):
        results.write_commit(results_dir, plan.machine, commit, plan.dates[role], suites[role], records[role])
    cases = sorted(set(plan.cases["base"]) | set(plan.cases["head"]))
    (out / "cases.json").write_text(json.dumps(cases, indent=0))
    reasons = {role: {i: r.get("reason", "") for i, r in by_case.items() if r["status"] == "failed"}
               for role, by_case in records.items()}  # fmt: skip
    (out / FAILURES).write_text(json.dumps(reasons, indent=1))
    return results_dir


def remeasured(out: Path) -> dict[str, dict]:
    """{role: {case id: record}} of the cases the gate had measured again (none yet: empty)."""
    path = out / REMEASURED
    return json.loads(path.read_text()) if path.exists() else {"base": {}, "head": {}}


def gate(plan: Plan, out: Path, junit: list[Path], steps: Steps, recorded: bool = False) -> int:
    """The gate on the run in ``out``; it re-measures its suspects and near misses on the GPU, or, merging
    shards (``recorded``), takes the readings the shards' own gates re-measured, so both judge alike."""
    with steps("gate"):
        argv = [sys.executable, "-m", "kernelgate.gate", "--base", plan.base, "--head", plan.head,
                "--machine", plan.machine["machine"], "--results-dir", str(out / "results"),
                "--thresholds", str(out / TRUSTED / "perf-thresholds.toml"),
                "--head-thresholds", str(out / FROM_HEAD / "perf-thresholds.toml"),
                "--base-suite", str(out / "suites" / "base.json"), "--cases", str(out / "cases.json"),
                "--failures", str(out / FAILURES), "--out", str(out / "gate"),
                *[f"--junit={j}" for j in junit]]  # fmt: skip
        if (out / TRUSTED / NOISE_FILE).is_file():
            argv += ["--noise", str(out / TRUSTED / NOISE_FILE)]
        remeasure = [sys.executable, "-m", "kernelgate.prcheck", "remeasure", "--out", str(out)]
        remeasure += ["--recorded"] if recorded else []
        argv += ["--confirm-cmd", " ".join(remeasure) + " --base {base} --head {head} --regex {regex}"]
        return subprocess.run(argv, check=False).returncode


# A red check explains its worst failing cases from the kernels each commit compiles for them, at most this many.
EXPLAINED_CASES = 5
EXPLAIN = "explain.md"  # in the output folder; the report includes it
# What the evidence may add to a red verdict, in seconds: both commits' compiles at once, then Nsight Compute
# profiles of the worst cases, base and head in turn, while time is left.
EXPLAIN_SECONDS, COMPILE_SECONDS = 90, 45


def explain(plan: Plan, out: Path, steps: Steps) -> None:
    """For a red verdict's worst failing cases, both commits' kernels compiled side by side and their calls profiled
    on the GPU (``kernelgate.explain``: each commit's own code, in its environment, as its user), with a "why" line
    each, in ``EXPLAIN``. It runs after the verdict and never changes it; what fails here is said there."""
    findings = json.loads((out / "gate" / "verdict.json").read_text()).get("findings", [])
    failing = sorted((f for f in findings if f.get("verdict") == "fail" and f.get("remeasure")),
                     key=lambda f: -(f.get("badness") or 0))  # fmt: skip
    from kernelgate.explain.cases import same_call
    from kernelgate.explain.report import report

    calls = same_call(list(dict.fromkeys(case for f in failing for role, case in f["remeasure"] if role == "head")))
    case_ids = list(calls)[:EXPLAINED_CASES]
    if not case_ids:
        return
    with steps("explain"), contextlib.suppress(Exception):  # evidence, never a verdict: what broke is said instead
        deadline = time.monotonic() + EXPLAIN_SECONDS
        (out / EXPLAIN).write_text("Not explained: the step stopped before it compared the kernels.\n")
        steps.progress.counted(0, 1 + 2 * len(case_ids))  # both compiles, then each call's two profiles
        codes = compiled_kernels(plan, case_ids)
        steps.progress.counted(1, 1 + 2 * len(case_ids))
        profiles, unprofiled = profiled_calls(plan, case_ids, deadline, steps.progress)
        (out / EXPLAIN).write_text(unprofiled + report(codes["base"], codes["head"], case_ids, profiles, calls))


def compiled_kernels(plan: Plan, case_ids: list[str]) -> dict[str, dict]:
    """{role: {case id: its kernels compiled, or {"error": why not}}}: both commits at once, each its own code."""
    argv = ["-m", "kernelgate.explain", "compiled", *case_ids, "--gpu-class", plan.machine.get("gpu_class", "")]
    running = {}
    for role in ("base", "head"):
        side = plan.side(role)
        running[role] = subprocess.Popen([str(side.python), *argv], cwd=side.tree, env=side.env, text=True,
                                         stdout=subprocess.PIPE, stderr=subprocess.PIPE, **side.as_user)  # fmt: skip
    codes = {}
    for role, proc in running.items():
        try:
            stdout, stderr = proc.communicate(timeout=COMPILE_SECONDS)
            codes[role] = json.loads(stdout) if proc.returncode == 0 else None
            why_not = (stderr.strip().splitlines() or ["no output"])[-1]
        except (subprocess.SubprocessError, ValueError) as exc:
            proc.kill()
            codes[role], why_not = None, f"{type(exc).__name__}: {exc}"
        if not isinstance(codes[role], dict):
            codes[role] = {case: {"error": f"its kernels were not compiled ({why_not})"} for case in case_ids}
    return codes


def profiled_calls(plan: Plan, case_ids: list[str], deadline: float, progress: Progress) -> tuple[dict, str]:
    """({case id: {role: [KernelProfile] or why not}}, a line saying why nothing was profiled, or ""): the worst
    cases first, base then head, each commit's call profiled by Nsight Compute until ``deadline``."""
    from kernelgate.explain import profile

    tool = profile.ncu()
    if tool is None:
        return {}, f"Not profiled: no Nsight Compute (ncu on PATH, ${profile.NCU_ENV} or {profile.CUDA_NCU}).\n\n"
    profiles = {}
    for case_id in case_ids:
        pair = {}
        for role in ("base", "head"):
            left = deadline - time.monotonic()
            if left < 5:
                return profiles, f"Profiled the first {len(profiles)} of {len(case_ids)} cases in the time it has.\n\n"
            side = plan.side(role)
            pair[role] = profile.profile_case(tool, str(side.python), case_id, timeout=left, cwd=side.tree,
                                              env=side.env, **side.as_user)  # fmt: skip
            progress.counted(progress.done + 1, progress.total)
        profiles[case_id] = pair
    return profiles, ""


def complete_test_report(path: Path) -> bool:
    """pytest wrote the whole file: it parses (a shard may draw no test, and its report is then empty)."""
    try:
        return ET.parse(path).getroot().tag in ("testsuites", "testsuite")
    except (OSError, ET.ParseError):
        return False


def junit_files(out: Path) -> list[Path]:
    """Test reports that hold tests (a shard may draw none)."""
    found = sorted(out.glob("junit/*.xml"))
    return [p for p in found if re.search(r"<testcase\b", p.read_text(errors="replace"))]


# Keys of the machine entry that name a runner, not what changes the numbers: shards differ there.
RUNNER_KEYS = ("machine", "arch", "cpu", "num_cpu", "os", "ram")


# The manifest's fields that must equal what the merge selects itself.
SELECTION_FIELDS = ("base", "head", "groups", "tests", "benchmarks")


def shard_folders(folder: Path, count: int) -> list[Path]:
    """``folder/shard-1`` .. ``shard-N``, each present, and nothing else that claims to be a shard."""
    wanted = [folder / f"shard-{k}" for k in range(1, count + 1)]
    missing = [d.name for d in wanted if not (d / "manifest.json").is_file()]
    if missing:
        raise CheckError(f"{', '.join(missing)} of {count} left no results in {folder}: "
                         "its GPU job failed, was cancelled or never ran")  # fmt: skip
    extra = sorted(d.name for d in folder.iterdir() if d not in wanted)
    if extra:
        raise CheckError(f"{folder} holds {', '.join(extra)} beside the {count} shards the run had")
    return wanted


def merge_shards(folder: Path, count: int, expected: "Plan", out: Path) -> Plan:
    """The shards' measurements as one run in ``out``, judged by ``expected``, the selection this process made
    (``selected_plan``, which also wrote the judging files into ``out``): every shard present once, each one's
    manifest that selection, every selected case measured by exactly one of them."""
    shard_dirs = shard_folders(folder, count)
    plans = [Plan.load(d) for d in shard_dirs]
    first = plans[0]
    runner_free = lambda machine: {k: v for k, v in machine.items() if k not in RUNNER_KEYS}
    for k, (d, p) in enumerate(zip(shard_dirs, plans, strict=True), start=1):
        for field in SELECTION_FIELDS:
            if getattr(p, field) != getattr(expected, field):
                raise CheckError(f"{d.name}'s manifest is not of this selection: its {field} is {getattr(p, field)!r}, "
                                 f"the selection's {getattr(expected, field)!r}")  # fmt: skip
        if tuple(p.shard) != (k, count):
            raise CheckError(f"{d.name}'s manifest says shard {p.shard[0]}/{p.shard[1]}, not {k}/{count}")
        if runner_free(p.machine) != runner_free(first.machine):
            keys = runner_free(first.machine) | runner_free(p.machine)
            diff = {
                k: (first.machine.get(k), p.machine.get(k)) for k in keys if first.machine.get(k) != p.machine.get(k)
            }
            raise CheckError(f"{d} ran on a runner that measures differently: {diff}")
    machine = {**first.machine, "machine": f"{first.machine['gpu_class'].lower()}-shards"}
    steps = [[f"shard {p.shard[0]}: {name}", *rest] for p in plans for name, *rest in p.steps]
    merged = dataclasses.replace(expected, machine=machine, shard=(0, count), steps=steps)
    if not expected.groups:  # the change selects nothing: no shard tested or measured anything
        return merged
    for d, p in zip(shard_dirs, plans, strict=True):
        if read_suites(d) != read_suites(shard_dirs[0]):
            raise CheckError(f"{d} discovered other suites than {shard_dirs[0]}")
        if p.tests and not complete_test_report(d / TEST_REPORT):
            raise CheckError(f"{d}: shard {p.shard[0]} has no complete report of its GPU tests (killed, or skipped)")
    bounded = bounded_tracks(out, first.machine["gpu_class"])
    chosen = chosen_cases(read_suites(shard_dirs[0]), expected.benchmarks, bounded)
    expected_cases = {role: {c.asv_id for c in cases} for role, cases in chosen.items()}
    records: dict[str, dict] = {"base": {}, "head": {}}
    again: dict[str, dict] = {"base": {}, "head": {}}
    for d, p in zip(shard_dirs, plans, strict=True):
        measured, fresh = json.loads((d / MEASUREMENTS).read_text()), remeasured(d)
        for role in records:
            if set(measured[role]) != set(p.cases[role]):
                raise CheckError(f"{d}: {role} measurements do not match the cases its manifest lists")
            if not set(fresh[role]) <= set(measured[role]):
                raise CheckError(f"{d}: {role} re-measured cases it did not measure")
            overlap = set(measured[role]) & set(records[role])
            if overlap:
                raise CheckError(f"{d}: {role} cases measured by two shards, e.g. {sorted(overlap)[0]}")
            records[role].update(measured[role])
            again[role].update(fresh[role])
    for role in records:
        missing = expected_cases[role] - set(records[role])
        if missing:
            raise CheckError(f"{len(missing)} {role} cases no shard measured, e.g. {sorted(missing)[0]}")
    shutil.copytree(shard_dirs[0] / "suites", out / "suites", dirs_exist_ok=True)
    for d, p in zip(shard_dirs, plans, strict=True):
        for xml in junit_files(d):
            (out / "junit").mkdir(exist_ok=True)
            shutil.copy(xml, out / "junit" / f"shard-{p.shard[0]}-{xml.name}")
    explained = [d / EXPLAIN for d in shard_dirs if (d / EXPLAIN).is_file()]  # each red shard's, for the report
    if explained:
        (out / EXPLAIN).write_text("\n".join(path.read_text() for path in explained))
    plan = dataclasses.replace(merged, cases={role: sorted(records[role]) for role in records})
    (out / MEASUREMENTS).write_text(json.dumps(records))
    (out / REMEASURED).write_text(json.dumps(again))
    write_results(plan, out, records)  # first readings: the merge's gate re-measures from the shards' records
    plan.save(out)
    return plan
