"""What each kernel of one call of a case did on the GPU, by Nsight Compute (``ncu``), and how two commits' differ.

The check runs ``ncu_argv(python, case_id)`` with each commit's own Python, in its checkout and as its user: ncu
starts ``python -m kernelgate.explain call CASE_ID``, which warms the case's call (``Suite.workload``) and runs it
once more between ``cudaProfilerStart`` and ``cudaProfilerStop``; ncu profiles each kernel launched there and prints
its raw CSV page. ``parse`` reads that page into a ``KernelProfile`` per kernel, in launch order, checking every
value (head's process printed it); ``changes`` weighs what differs, the way ``kernelgate.explain.diff`` weighs the
compiled code, and ``table`` shows both.
"""

import csv
import dataclasses
import difflib
import math
import os
import re
import shutil
import subprocess

NCU_ENV = "KERNELGATE_NCU"  # the ncu to run; unset: ncu on PATH, else CUDA's
CUDA_NCU = "/usr/local/cuda/bin/ncu"
# What ncu collects for each kernel: the sections whose raw metrics name the achieved occupancy, the launch and
# the warps' stall reasons, and the metrics the rest of the profile reads.
SECTIONS = ("LaunchStats", "Occupancy", "WarpStateStats")
METRICS = ("gpu__time_duration.sum", "dram__bytes_read.sum", "dram__bytes_write.sum", "smsp__inst_issued.sum")
# A column of the raw page: (the profile's field, the metric, the kind of quantity the field is).
FIELDS = (
    ("duration_us", "gpu__time_duration.sum", "time"),
    ("dram_read_mb", "dram__bytes_read.sum", "bytes"),
    ("dram_write_mb", "dram__bytes_write.sum", "bytes"),
    ("occupancy_pct", "sm__warps_active.avg.pct_of_peak_sustained_active", "%"),
    ("instructions", "smsp__inst_issued.sum", "count"),
    ("registers", "launch__registers_per_thread", "count"),
    ("block", "launch__block_size", "count"),
    ("grid", "launch__grid_size", "count"),
)
# The warps' stall reasons, a column each: issue cycles stalled for the reason per issued instruction.
STALL = re.compile(r"smsp__average_warps?_(?:latency_)?issue_stalled_(\w+?)(?:_per_issue_active)?\.ratio")
# ncu's base units (--print-units base): (kind, factor to the field's unit: us, MB, %); any other unit is a count's.
UNITS = {"ns": ("time", 1e-3), "us": ("time", 1.0), "ms": ("time", 1e3), "s": ("time", 1e6),
         "nsecond": ("time", 1e-3), "usecond": ("time", 1.0), "msecond": ("time", 1e3), "second": ("time", 1e6),
         "byte": ("bytes", 1e-6), "Kbyte": ("bytes", 1e-3), "Mbyte": ("bytes", 1.0), "Gbyte": ("bytes", 1e3),
         "%": ("%", 1.0)}  # fmt: skip
SHOWN_STALLS = 3
# A change this large is named: DRAM bytes and instructions by ratio, occupancy in points, time by ratio.
DRAM_RATIO, INSTRUCTIONS_RATIO, DURATION_RATIO = 1.1, 1.1, 1.05
OCCUPANCY_POINTS = 10.0


class ProfileError(ValueError):
    """ncu's output is not a profile of the call (ncu failed, or the page is not what it prints)."""


@dataclasses.dataclass(frozen=True)
class KernelProfile:
    kernel: str
    duration_us: float
    dram_read_mb: float
    dram_write_mb: float
    occupancy_pct: float  # achieved: the warps active on an SM over its maximum
    instructions: float  # issued, all SMs
    registers: float
    block: float  # threads a block
    grid: float  # blocks
    stalls: dict[str, float]  # the leading stall reasons, cycles a warp waited per issued instruction

    @property
    def dram_mb(self) -> float:
        return self.dram_read_mb + self.dram_write_mb


def ncu() -> str | None:
    """The ncu this check runs, None where there is none."""
    return os.environ.get(NCU_ENV) or shutil.which("ncu") or (CUDA_NCU if os.access(CUDA_NCU, os.X_OK) else None)


def ncu_argv(tool: str, python: str, case_id: str) -> list[str]:
    """The command that profiles one call of ``case_id`` with ``python`` (a commit's own); its page on stdout."""
    sections = [arg for section in SECTIONS for arg in ("--section", section)]
    return [tool, "--profile-from-start", "off", "--csv", "--page", "raw", "--print-units", "base",
            "--print-kernel-base", "function",
            *sections, "--metrics", ",".join(METRICS), python, "-m", "kernelgate.explain", "call", case_id]  # fmt: skip


def profile_case(tool: str, python: str, case_id: str, timeout: float, **popen) -> list[KernelProfile] | str:
    """The kernels of one call of ``case_id``, profiled by ncu with ``python`` (``popen``: the commit's checkout,
    environment and user); or why there is no profile."""
    try:
        done = subprocess.run(ncu_argv(tool, python, case_id), capture_output=True, text=True, timeout=timeout,
                              **popen)  # fmt: skip
    except (OSError, subprocess.SubprocessError) as exc:
        return f"{type(exc).__name__}: {exc}"
    try:
        kernels = parse(done.stdout)
    except ProfileError as exc:
        said = (done.stderr.strip().splitlines() or [""])[-1][:200]
        return f"{exc} (ncu exited {done.returncode}{': ' + said if said else ''})"
    return kernels or "ncu profiled no kernel in the call"


def call(case_id: str) -> None:
    """One call of an asv case (``Suite.workload``), warmed, then run once between the profiler's start and stop."""
    import torch

    from kernelgate.explain.cases import case_values

    suite, values = case_values(case_id)
    fn = suite.workload(*values)
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.start()
    fn()
    torch.cuda.synchronize()
    torch.cuda.profiler.stop()


def _number(text: str, unit: str, kind: str, column: str) -> float:
    """A value of the page in its field's unit; raises ProfileError where it is not one of ``kind``."""
    unit_kind, factor = UNITS.get(unit, ("count", 1.0))
    if unit_kind != kind:
        raise ProfileError(f"{column}: a {kind} in {unit!r}")
    try:
        value = float(text.replace(",", "")) * factor
    except ValueError:
        raise ProfileError(f"{column}: {text!r} is not a number") from None
    if not math.isfinite(value) or value < 0:
        raise ProfileError(f"{column}: {text!r} is not a finite, non-negative number")
    return value


def parse(page: str) -> list[KernelProfile]:
    """The kernels of ncu's raw CSV page (``--csv --page raw``: a header, a row of units, a row per kernel), in launch
    order. Lines before the header (ncu's own ``==PROF==`` lines, the program's output) are skipped."""
    lines = page.splitlines()
    start = next((i for i, line in enumerate(lines) if line.startswith('"ID"')), None)
    if start is None:
        errors = [line for line in lines if "ERR" in line or "rror" in line]
        raise ProfileError("no profile in ncu's output" + (f": {errors[-1].strip()[:200]}" if errors else ""))
    rows = list(csv.reader(line for line in lines[start:] if not line.startswith("==")))
    if len(rows) < 2:
        raise ProfileError("ncu's page has no units row")
    header, units, kernels = rows[0], rows[1], rows[2:]
    columns = {name: i for i, name in enumerate(header)}
    missing = [metric for _, metric, _ in FIELDS if metric not in columns] + [
        name for name in ("Kernel Name",) if name not in columns
    ]
    if missing:
        raise ProfileError(f"ncu's page lacks {', '.join(missing)}")
    stalls = {STALL.fullmatch(name)[1]: i for name, i in columns.items() if STALL.fullmatch(name)}
    profiles = []
    for row in kernels:
        if len(row) != len(header):
            raise ProfileError(f"a row of {len(row)} fields under a header of {len(header)}")
        name = re.sub(r"\W", "_", row[columns["Kernel Name"]])[:100] or "kernel"
        values = {field: _number(row[columns[metric]], units[columns[metric]], kind, metric)
                  for field, metric, kind in FIELDS}  # fmt: skip
        waits = {reason: _number(row[i], units[i], "count", header[i])
                 for reason, i in stalls.items() if row[i] not in ("", "n/a")}  # fmt: skip
        leading = dict(sorted(waits.items(), key=lambda item: -item[1])[:SHOWN_STALLS])
        profiles.append(KernelProfile(kernel=name, stalls=leading, **values))
    return profiles


def _pairs(base: list[KernelProfile], head: list[KernelProfile]) -> tuple[list[tuple], list, list]:
    """Base's and head's kernels paired by name in launch order (an added launch shifts no pair); and those only
    head runs and only base runs."""
    matcher = difflib.SequenceMatcher(a=[k.kernel for k in base], b=[k.kernel for k in head], autojunk=False)
    pairs, added, removed = [], [], []
    for op, b0, b1, h0, h1 in matcher.get_opcodes():
        if op == "equal":
            pairs += list(zip(base[b0:b1], head[h0:h1], strict=True))
            continue
        shared = min(b1 - b0, h1 - h0) if op == "replace" else 0
        pairs += list(zip(base[b0 : b0 + shared], head[h0 : h0 + shared], strict=True))
        removed += base[b0 + shared : b1]
        added += head[h0 + shared : h1]
    return pairs, added, removed


def _grown(before: float, after: float, ratio: float) -> bool:
    return min(before, after) > 0 and max(before, after) / min(before, after) >= ratio


def changes(base: list[KernelProfile], head: list[KernelProfile]) -> list[tuple[float, str]]:
    """(weight, phrase) for each difference of two profiles of one case's call, on the scale of
    ``kernelgate.explain.diff.kernel_changes``: a larger weight, a likelier cause."""
    pairs, added, removed = _pairs(base, head)
    found = []
    if added or removed:
        which = ", ".join([f"added {k.kernel}" for k in added] + [f"removed {k.kernel}" for k in removed])
        found.append((190.0, f"kernels the GPU ran for a call {len(base)} → {len(head)} ({which})"))
    for b, h in pairs:
        name = h.kernel if h.kernel == b.kernel else f"{b.kernel} → {h.kernel}"
        if _grown(b.dram_mb, h.dram_mb, DRAM_RATIO):
            found.append((70.0, f"{name}: DRAM traffic {b.dram_mb:.1f} → {h.dram_mb:.1f} MB"))
        if abs(h.occupancy_pct - b.occupancy_pct) >= OCCUPANCY_POINTS:
            found.append((45.0, f"{name}: achieved occupancy {b.occupancy_pct:.0f}% → {h.occupancy_pct:.0f}%"))
        lead = lambda k: next(iter(k.stalls), None)
        if lead(b) and lead(h) and lead(b) != lead(h):
            found.append((35.0, f"{name}: leading stall {lead(b)} → {lead(h)}"))
        if _grown(b.instructions, h.instructions, INSTRUCTIONS_RATIO):
            found.append((22.0, f"{name}: instructions issued {b.instructions:.3g} → {h.instructions:.3g} "
                                f"({h.instructions / b.instructions:.2f}x)"))  # fmt: skip
        if _grown(b.duration_us, h.duration_us, DURATION_RATIO):
            found.append((5.0, f"{name}: {b.duration_us:.1f} → {h.duration_us:.1f} us on the GPU"))
    return found


COLUMNS = (
    ("us", lambda k: f"{k.duration_us:.1f}"),
    ("DRAM MB read", lambda k: f"{k.dram_read_mb:.1f}"),
    ("DRAM MB written", lambda k: f"{k.dram_write_mb:.1f}"),
    ("achieved occupancy %", lambda k: f"{k.occupancy_pct:.0f}"),
    ("instructions issued", lambda k: f"{k.instructions:.3g}"),
    ("registers", lambda k: f"{k.registers:.0f}"),
    ("grid x block", lambda k: f"{k.grid:.0f} x {k.block:.0f}"),
    ("leading stalls", lambda k: ", ".join(f"{r} {c:.1f}" for r, c in k.stalls.items()) or "-"),
)


def table(base: list[KernelProfile], head: list[KernelProfile]) -> str:
    """A Markdown table, a row per kernel either commit ran (paired by name), each cell ``base → head`` where
    they differ."""
    pairs, added, removed = _pairs(base, head)
    rows = ["| kernel (Nsight Compute) | " + " | ".join(name for name, _ in COLUMNS) + " |",
            "|---" * (len(COLUMNS) + 1) + "|"]  # fmt: skip
    for b, h in pairs:
        cells = [(read(b), read(h)) for _, read in COLUMNS]
        name = h.kernel if h.kernel == b.kernel else f"{b.kernel} → {h.kernel}"
        rows.append(f"| {name} | " + " | ".join(y if x == y else f"{x} → {y}" for x, y in cells) + " |")
    for only, role in ((added, "head"), (removed, "base")):
        for k in only:
            rows.append(f"| {k.kernel} ({role} only) | " + " | ".join(read(k) for _, read in COLUMNS) + " |")
    return "\n".join(rows)
