"""The PR check, step by step: environment, selection, GPU tests beside cases and JIT warm-up, benchmarks, gate,
report.

Everything a step needs is in its output folder (``--out``): the manifest (commits, machine,
selection, shard, the cases measured, each step's time), each commit's suite, the raw measurements,
the tests' JUnit XML, logs, asv result files and the gate's report. A sharded run (``--shard K/N``)
stops after its own gate; ``merge`` joins the shards' folders into one verdict.

The code that judges runs from the checkout that started the check; the thresholds and the group
map are read from the base commit, so a pull request cannot loosen its own check.
"""

import contextlib
import dataclasses
import json
import os
import re
import shutil
import subprocess
import sys
import time
import xml.etree.ElementTree as ET
from collections.abc import Callable
from pathlib import Path

from kernelgate.measure.parallel import available_cpus, default_jobs
from kernelgate.prcheck import bench, results, selection
from kernelgate.prcheck.environments import RunnerError, overlay

TRUSTED_FILES = ("perf-thresholds.toml", "pr-check.toml")
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


class Steps:
    """Runs the check's steps, printing each one's start, end and time."""

    def __init__(self):
        self.times: list[tuple[str, float, str]] = []
        self.start = time.perf_counter()

    @contextlib.contextmanager
    def __call__(self, name: str):
        print(f"\n==> {name}", flush=True)
        start = time.perf_counter()
        outcome = "ok"
        try:
            yield
        except BaseException:
            outcome = "failed"
            raise
        finally:
            seconds = time.perf_counter() - start
            self.times.append((name, seconds, outcome))
            print(f"<== {name}: {outcome}, {seconds:.1f} s", flush=True)

    def table(self, earlier: list | None = None) -> str:
        """The steps' times, after ``earlier`` ones (the shards' steps, in a merge)."""
        rows = [f"| {name} | {seconds:.1f} | {outcome} |" for name, seconds, outcome in [*(earlier or []), *self.times]]
        total = f"| **total{', this run' if earlier else ''}** | **{time.perf_counter() - self.start:.1f}** | |"
        return "\n".join(["| step | seconds | outcome |", "|---|---|---|", *rows, total])


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


def cache_env(cache: Path, role: str) -> dict[str, str]:
    """JIT caches of one role: a pull request's head never writes where base or main's runs read."""
    root = cache / role
    return {
        "TRITON_CACHE_DIR": str(root / "triton"),
        "TILELANG_CACHE_DIR": str(root / "tilelang"),
        "TORCHINDUCTOR_CACHE_DIR": str(root / "inductor"),
    }


def machine_entry() -> dict:
    """This runner as asv's machine file records it, with the GPU and package versions (device_info)."""
    from asv.machine import Machine

    from kernelgate.measure.device_info import device_info, machine_name

    info = device_info()
    python = f"{sys.version_info.major}.{sys.version_info.minor}"
    return {**Machine.get_defaults(), **info, "machine": machine_name(info), "python": python}


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

    def side(self, role: str) -> bench.Side:
        s = self.sides[role]
        return bench.Side(role, s["commit"], Path(s["tree"]), Path(s["python"]), s["env"], Path(s["log"]))


def commits(base_ref: str, head_ref: str) -> tuple[str, str]:
    """Both refs as commit hashes; one commit twice is refused: there would be nothing to compare."""
    base, head = resolve(base_ref), resolve(head_ref)
    if base == head:
        raise CheckError(f"base and head are the same commit ({base[:12]}): there is nothing to compare")
    return base, head


def write_trusted(base: str, out: Path) -> Path:
    """The files that judge, as the base commit has them, in ``<out>/trusted``."""
    trusted = out / "trusted"
    trusted.mkdir(parents=True, exist_ok=True)
    for name in TRUSTED_FILES:
        (trusted / name).write_text(git("show", f"{base}:{name}"))
    return trusted


def select_groups(
    base: str, head: str, trusted: Path, full: str | None
) -> tuple[selection.GroupMap, selection.Selection]:
    """The groups the change from base to head selects by the trusted ``pr-check.toml``, printed with why."""
    groups = selection.load(trusted / "pr-check.toml")
    changed = git("diff", "--name-only", base, head).split()
    chosen = selection.select(groups, changed, full=full)
    for name in chosen.groups:
        print(f"{name}: {', '.join(chosen.reasons[name][:6])}{' ...' if len(chosen.reasons[name]) > 6 else ''}")
    if not chosen.groups:
        print(f"no group selected by the {len(changed)} changed paths: nothing to run on the GPU")
    return groups, chosen


def prepare(args, steps: Steps) -> Plan:
    """The environment and selection steps."""
    out = args.out
    with steps("environment"):
        if not has_gpu():
            raise CheckError(NO_GPU_GROUPS)
        repo = Path(git("rev-parse", "--show-toplevel").strip())
        base, head = commits(args.base, args.head)
        trusted = write_trusted(base, out)
        machine = machine_entry()
        sides = {}
        for role, commit in (("base", base), ("head", head)):
            tree = checkout(repo, commit, args.work)
            try:
                python = overlay(args.runner_python, tree, args.work / "envs" / commit[:12])
            except RunnerError as exc:
                raise CheckError(str(exc)) from exc
            log = out / "logs" / f"{role}-worker.log"
            sides[role] = {"commit": commit, "tree": str(tree), "python": str(python),
                           "env": cache_env(args.cache, role), "log": str(log)}  # fmt: skip
            print(f"{role}: {commit[:12]} in {tree}, {python}", flush=True)
        print(f"machine: {machine['machine']} ({machine.get('gpu')}, driver {machine.get('gpu_driver')})", flush=True)
    with steps("select"):
        groups, chosen = select_groups(base, head, trusted, args.full)
    dates = {
        role: int(git("show", "-s", "--format=%ct", commit).strip()) * 1000
        for role, commit in (("base", base), ("head", head))
    }
    benchmarks = chosen.benchmarks(groups)
    changes = judging_changes(base, head)
    if args.bench:  # narrowed by hand: every selected pattern, and this one too
        benchmarks = [f"(?={pattern})(?=.*?(?:{args.bench}))" for pattern in benchmarks]
    return Plan(base, head, machine, list(chosen.groups), chosen.reasons, args.shard,
                chosen.tests(groups), benchmarks, sides, dates, judging_changes=changes)  # fmt: skip


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
    junit, log_path = out / TEST_REPORT, out / "logs" / "gpu-tests.log"
    log_path.parent.mkdir(parents=True, exist_ok=True)
    # Correctness only: pytest-benchmark's timing is off (it would warn once per xdist worker). loadgroup:
    # the tests that build one kernel run on one worker (tests/conftest.py groups them), the others one by one.
    workers = str(min(TEST_PROCESSES, available_cpus()))
    argv = [str(head.python), "-m", "pytest", *plan.tests, "-p", "no:cacheprovider", "-q", "-n", workers,
            "--dist", "loadgroup", "--benchmark-disable", "--require-gpu", f"--shard={k}/{n}",
            f"--junitxml={junit}"]  # fmt: skip
    print(f"GPU tests started beside the next steps (log: {log_path})", flush=True)
    start = time.perf_counter()
    env = {**os.environ, **head.env}
    with log_path.open("w") as log:
        proc = subprocess.Popen(argv, cwd=head.tree, env=env, stdout=log, stderr=subprocess.STDOUT)
    try:
        yield
    except BaseException:
        proc.kill()
        raise
    finally:
        code = proc.wait()
        seconds = time.perf_counter() - start
        # 1: a test failed, 5: this shard drew none. Failures are the gate's to judge, from the JUnit XML.
        outcome = "ok" if code in (0, 1, 5) else "failed"
        steps.times.append(("GPU tests", seconds, outcome))
    print(f"\n==> GPU tests\n{log_path.read_text(errors='replace')}pytest exit code {code}", flush=True)
    print(f"<== GPU tests: {outcome}, {seconds:.1f} s", flush=True)


def choose(plan: Plan, out: Path, steps: Steps) -> dict[str, list[bench.Case]]:
    """Discover both suites and choose this shard's cases of each (``plan.cases`` records their ids)."""
    with steps("choose cases"):
        suites = bench.discover([plan.side("base"), plan.side("head")])
        for role, suite in suites.items():
            results.write_suite(out / "suites" / f"{role}.json", suite)
        chosen = chosen_cases(suites, plan.benchmarks, bounded_tracks(out / "trusted", plan.machine["gpu_class"]))
        k, n = plan.shard
        mine = set(bench.shard(sorted(set(chosen["base"]) | set(chosen["head"])), n)[k - 1])
        cases = {role: [c for c in role_cases if c in mine] for role, role_cases in chosen.items()}
        plan.cases = {role: [c.id for c in role_cases] for role, role_cases in cases.items()}
        tracks = sum(c.kind == "track" for c in cases["head"])
        print(f"shard {k}/{n}: {len(cases['base'])} base and {len(cases['head'])} head cases, {tracks} of them "
              f"track_* values a rule bounds on {plan.machine['gpu_class']}", flush=True)  # fmt: skip
        return cases


def warm_up(plan: Plan, steps: Steps, cases: dict[str, list[bench.Case]]) -> None:
    """Both commits' JIT caches filled side by side, for the cases this run measures on each. Base times only
    this project's kernels: the references (torch.compile, Liger-Kernel), which head's metrics compare
    against, are warmed on head alone. A failed warm-up is not fatal: the benchmark's setup compiles what is
    missing, outside the timed samples."""
    with steps("JIT warm-up"), contextlib.ExitStack() as stack:
        running, jobs = [], default_jobs(12)
        # A third of the processes for base: head's torch.compile work is the longer path.
        options = {"base": ["--without-references", f"--jobs={max(1, jobs // 3)}"], "head": [f"--jobs={jobs}"]}
        for role, extra in options.items():
            side = plan.side(role)
            argv = [str(side.python), "-m", "kernelgate.measure.warm", "--groups", *plan.groups, *extra]
            log_path = side.log.with_name(f"{role}-warm.log")
            log_path.parent.mkdir(parents=True, exist_ok=True)
            log = stack.enter_context(log_path.open("w"))
            warm_cases = log_path.with_name(f"{role}-warm-cases.json")
            warm_cases.write_text(json.dumps([[c.kind, c.values] for c in cases[role]]))
            env = {**os.environ, **side.env, WARM_CASES_ENV: str(warm_cases)}
            proc = subprocess.Popen(argv, cwd=side.tree, env=env, stdout=log, stderr=subprocess.STDOUT)
            stack.callback(proc.kill)  # a no-op once it has exited; an interrupted check leaves no compiler behind
            running.append((role, proc, log_path))
        for role, proc, log_path in running:
            code = proc.wait()
            last = (log_path.read_text(errors="replace").strip().splitlines() or ["(no output)"])[-1]
            print(f"{role}: {last} ({log_path})", flush=True)
            if code:
                print(f"{role}'s warm-up exited {code}: its benchmarks' setup compiles what is missing", flush=True)


def measure(plan: Plan, steps: Steps, cases: dict[str, list[bench.Case]]) -> dict:
    """Measure the chosen cases, base and head interleaved; returns the records."""
    with steps("benchmarks"):
        return bench.measure([plan.side("base"), plan.side("head")], cases)


def bounded_tracks(trusted: Path, gpu_class: str) -> Callable[[bench.Case, dict], bool]:
    """Whether a track_* case is one the gate bounds on this GPU class (a rule's min or max, informational
    ones too): the check measures only those. The main job's history tracks every value."""
    from kernelgate.gate import GateError
    from kernelgate.gate.asv_results import Case
    from kernelgate.gate.thresholds import load_thresholds

    try:
        rules = [r for r in load_thresholds(trusted / "perf-thresholds.toml").applicable(gpu_class)
                 if r.min is not None or r.max is not None]  # fmt: skip
    except GateError as exc:
        raise CheckError(f"the base commit's perf-thresholds.toml: {exc}") from exc

    def bounded(case: bench.Case, suite: dict) -> bool:
        named = Case(case.benchmark, tuple(zip(suite[case.benchmark].get("param_names", []), case.params, strict=True)))
        return any(rule.matches(named) for rule in rules)

    return bounded


def chosen_cases(
    suites: dict[str, dict], patterns: list[str], bounded: Callable[[bench.Case, dict], bool]
) -> dict[str, list[bench.Case]]:
    """The selected cases of each commit's suite: base's and head's time cases, and head's track cases
    that a floor or ceiling bounds (they judge head's values only)."""
    chosen = {role: bench.selected(bench.suite_cases(suite), patterns) for role, suite in suites.items()}
    chosen["base"] = [c for c in chosen["base"] if c.kind == "time"]
    chosen["head"] = [c for c in chosen["head"] if c.kind == "time" or bounded(c, suites["head"])]
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
                "--thresholds", str(out / "trusted" / "perf-thresholds.toml"),
                "--base-suite", str(out / "suites" / "base.json"), "--cases", str(out / "cases.json"),
                "--failures", str(out / FAILURES), "--out", str(out / "gate"),
                *[f"--junit={j}" for j in junit]]  # fmt: skip
        remeasure = [sys.executable, "-m", "kernelgate.prcheck", "remeasure", "--out", str(out)]
        remeasure += ["--recorded"] if recorded else []
        argv += ["--confirm-cmd", " ".join(remeasure) + " --base {base} --head {head} --regex {regex}"]
        return subprocess.run(argv, check=False).returncode


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


def merge_shards(shard_dirs: list[Path], out: Path) -> Plan:
    """The shards' measurements as one run in ``out``: every shard present once, all of one run,
    every selected case measured by exactly one of them."""
    plans = [Plan.load(d) for d in shard_dirs]
    first = plans[0]
    runner_free = lambda machine: {k: v for k, v in machine.items() if k not in RUNNER_KEYS}
    for d, p in zip(shard_dirs, plans, strict=True):
        if (p.base, p.head, p.groups, p.benchmarks) != (first.base, first.head, first.groups, first.benchmarks):
            raise CheckError(f"{d} is a shard of another run ({p.base[:12]}..{p.head[:12]}, groups {p.groups})")
        if runner_free(p.machine) != runner_free(first.machine):
            keys = runner_free(first.machine) | runner_free(p.machine)
            diff = {
                k: (first.machine.get(k), p.machine.get(k)) for k in keys if first.machine.get(k) != p.machine.get(k)
            }
            raise CheckError(f"{d} ran on a runner that measures differently: {diff}")
    count = first.shard[1]
    got = sorted(p.shard[0] for p in plans)
    if any(p.shard[1] != count for p in plans) or got != list(range(1, count + 1)):
        raise CheckError(f"expected shards 1..{count} once each, got {[f'{p.shard[0]}/{p.shard[1]}' for p in plans]}")
    machine = {**first.machine, "machine": f"{first.machine['gpu_class'].lower()}-shards"}
    steps = [[f"shard {p.shard[0]}: {name}", *rest] for p in plans for name, *rest in p.steps]
    if not first.groups:  # the change selects nothing: no shard tested or measured anything
        return dataclasses.replace(first, machine=machine, shard=(0, count), steps=steps)
    for d, p in zip(shard_dirs, plans, strict=True):
        if read_suites(d) != read_suites(shard_dirs[0]):
            raise CheckError(f"{d} discovered other suites than {shard_dirs[0]}")
        if p.tests and not complete_test_report(d / TEST_REPORT):
            raise CheckError(f"{d}: shard {p.shard[0]} has no complete report of its GPU tests (killed, or skipped)")
    bounded = bounded_tracks(shard_dirs[0] / "trusted", first.machine["gpu_class"])
    chosen = chosen_cases(read_suites(shard_dirs[0]), first.benchmarks, bounded)
    expected = {role: {c.id for c in cases} for role, cases in chosen.items()}
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
        missing = expected[role] - set(records[role])
        if missing:
            raise CheckError(f"{len(missing)} {role} cases no shard measured, e.g. {sorted(missing)[0]}")
    for name in ("trusted", "suites"):
        shutil.copytree(shard_dirs[0] / name, out / name, dirs_exist_ok=True)
    for d, p in zip(shard_dirs, plans, strict=True):
        for xml in junit_files(d):
            (out / "junit").mkdir(exist_ok=True)
            shutil.copy(xml, out / "junit" / f"shard-{p.shard[0]}-{xml.name}")
    cases = {role: sorted(records[role]) for role in records}
    plan = dataclasses.replace(first, machine=machine, shard=(0, count), cases=cases, steps=steps)
    (out / MEASUREMENTS).write_text(json.dumps(records))
    (out / REMEASURED).write_text(json.dumps(again))
    write_results(plan, out, records)  # first readings: the merge's gate re-measures from the shards' records
    plan.save(out)
    return plan
