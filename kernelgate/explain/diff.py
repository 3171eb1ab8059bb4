"""Base's kernels against head's for one case: what changed in the compiled code, as a table and as a "why" line
of the largest changes (``kernelgate.explain.compiled`` says what each field is).

Kernels are paired in launch order; a call that launches more or fewer kernels says so first, since an added
launch costs a kernel's whole fixed time.
"""

from kernelgate.explain.compiled import KernelCode

# Instruction classes the "why" line reads, with the phrase a change of each makes.
WIDE_LOADS = ("load 128", "cp.async 128")
NARROW_LOADS = ("load 64", "load", "cp.async")
NOTED = {"atomic/reduction": "atomics and reductions", "tensor core": "tensor-core instructions",
         "barrier": "barriers", "local": "local-memory accesses", "TMA": "TMA copies"}  # fmt: skip
# A change to the instruction count this large is named.
TOTAL_RATIO = 1.1


def _sum(code: KernelCode, names: tuple[str, ...]) -> int:
    return sum(code.mix.get(name, 0) for name in names)


def kernel_changes(base: KernelCode, head: KernelCode) -> list[tuple[float, str]]:
    """(weight, phrase) for each change between two compiles of a launch; a larger weight, a likelier cause. A
    phrase reads ``kernel: what base → head``."""
    name = head.kernel if head.kernel == base.kernel else f"{base.kernel} → {head.kernel}"
    found = []

    def changed(weight: float, what: str, before, after, note: str = "") -> None:
        found.append((weight, f"{name}: {what} {before} → {after}{note}"))

    if head.spill_stores != base.spill_stores:
        changed(100.0, "spill stores to local memory", base.spill_stores, head.spill_stores)
    wide = _sum(base, WIDE_LOADS), _sum(head, WIDE_LOADS)
    narrow = _sum(base, NARROW_LOADS), _sum(head, NARROW_LOADS)
    if wide[1] < wide[0] and narrow[1] > narrow[0]:
        changed(80.0, "128-bit loads", *wide, f" (narrower ones {narrow[0]} → {narrow[1]})")
    stores = base.mix.get("store 128", 0), head.mix.get("store 128", 0)
    narrow_stores = _sum(base, ("store 64", "store")), _sum(head, ("store 64", "store"))
    if stores[1] < stores[0] and narrow_stores[1] > narrow_stores[0]:
        changed(80.0, "128-bit stores", *stores, f" (narrower ones {narrow_stores[0]} → {narrow_stores[1]})")
    if head.occupancy != base.occupancy:
        changed(50.0, "programs an SM", base.occupancy, head.occupancy)
    if head.warps != base.warps:
        changed(40.0, "warps a program", base.warps, head.warps)
    for cls, phrase in NOTED.items():
        if head.mix.get(cls, 0) != base.mix.get(cls, 0):
            changed(30.0, phrase, base.mix.get(cls, 0), head.mix.get(cls, 0))
    total = base.mix.get("total", 0), head.mix.get("total", 0)
    if min(total) and max(total) / min(total) >= TOTAL_RATIO:
        changed(25.0, "instructions", *total, f" ({total[1] / total[0]:.2f}x)")
    if head.shared_bytes // 1024 != base.shared_bytes // 1024:
        changed(20.0, "shared memory, KiB", base.shared_bytes // 1024, head.shared_bytes // 1024)
    if abs(head.registers - base.registers) >= 8:
        changed(10.0, "registers a thread", base.registers, head.registers)
    return found


def weighted_changes(base: list[KernelCode], head: list[KernelCode]) -> list[tuple[float, str]]:
    """(weight, phrase) for what changed from base's kernels to head's for one case."""
    found: list[tuple[float, str]] = []
    if len(head) != len(base):
        extra = [k.kernel for k in head[len(base) :]] or [k.kernel for k in base[len(head) :]]
        which = "added" if len(head) > len(base) else "removed"
        found.append((200.0, f"kernels a call launches {len(base)} → {len(head)} ({which}: {', '.join(extra)})"))
    for b, h in zip(base, head, strict=False):
        found += kernel_changes(b, h)
    return found


def changes(base: list[KernelCode], head: list[KernelCode]) -> list[str]:
    """What changed from base's kernels to head's for one case, likeliest cause first."""
    return ranked(weighted_changes(base, head))


def ranked(found: list[tuple[float, str]]) -> list[str]:
    return [phrase for _, phrase in sorted(found, key=lambda item: -item[0])]


def why(base: list[KernelCode], head: list[KernelCode], most: int = 3, measured: list[tuple[float, str]] = ()) -> str:
    """A line of the ``most`` likeliest causes, from the compiled code and what was ``measured`` on the GPU
    (``kernelgate.explain.profile.changes``); what it means when neither changed."""
    found = ranked([*weighted_changes(base, head), *measured])
    if not found:
        return "the compiled kernels are the same (registers, spills, shared memory, instructions): look elsewhere"
    return "; ".join(found[:most]) + (f"; {len(found) - most} more" if len(found) > most else "")


COLUMNS = (
    ("warps", lambda k: k.warps),
    ("registers", lambda k: k.registers),
    ("spill stores", lambda k: k.spill_stores),
    ("shared KiB", lambda k: k.shared_bytes // 1024),
    ("programs/SM", lambda k: k.occupancy),
    ("128-bit loads", lambda k: _sum(k, WIDE_LOADS)),
    ("narrower loads", lambda k: _sum(k, NARROW_LOADS)),
    ("128-bit stores", lambda k: k.mix.get("store 128", 0)),
    ("atomics", lambda k: k.mix.get("atomic/reduction", 0)),
    ("tensor core", lambda k: k.mix.get("tensor core", 0)),
    ("barriers", lambda k: k.mix.get("barrier", 0)),
    ("instructions", lambda k: k.mix.get("total", 0)),
)


def table(base: list[KernelCode], head: list[KernelCode]) -> str:
    """A Markdown table, a row per kernel, each cell ``base → head`` where they differ."""
    rows = ["| kernel | " + " | ".join(name for name, _ in COLUMNS) + " |", "|---" * (len(COLUMNS) + 1) + "|"]
    for i in range(max(len(base), len(head))):
        b, h = (base[i] if i < len(base) else None), (head[i] if i < len(head) else None)
        name = h.kernel if h is not None else f"{b.kernel} (base only)"
        if h is not None and (b is None or b.kernel != h.kernel):
            name = f"{h.kernel} (head only)" if b is None else f"{b.kernel} → {h.kernel}"
        cells = []
        for _, read in COLUMNS:
            values = [read(k) if k is not None else "-" for k in (b, h)]
            cells.append(str(values[1]) if values[0] == values[1] else f"{values[0]} → {values[1]}")
        rows.append(f"| {name} | " + " | ".join(cells) + " |")
    return "\n".join(rows)
