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
    """(weight, phrase) for each change between two compiles of a launch; a larger weight, a likelier cause."""
    name = head.kernel if head.kernel == base.kernel else f"{base.kernel} → {head.kernel}"
    found = []
    if head.spill_stores != base.spill_stores:
        now = f"spills ({head.spill_stores} stores to local memory)" if head.spill_stores else "no longer spills"
        found.append((100.0, f"{name} {now}, base {base.spill_stores}"))
    if head.occupancy != base.occupancy:
        found.append((50.0, f"{name} fits {head.occupancy} programs an SM, base {base.occupancy}"))
    wide = _sum(head, WIDE_LOADS), _sum(base, WIDE_LOADS)
    narrow = _sum(head, NARROW_LOADS), _sum(base, NARROW_LOADS)
    if wide[0] < wide[1] and narrow[0] > narrow[1]:
        lost = f"{wide[1]} → {wide[0]}, narrower ones {narrow[1]} → {narrow[0]}"
        found.append((80.0, f"{name} lost 128-bit loads: {lost}"))
    stores = head.mix.get("store 128", 0), base.mix.get("store 128", 0)
    narrower_stores = _sum(head, ("store 64", "store")), _sum(base, ("store 64", "store"))
    if stores[0] < stores[1] and narrower_stores[0] > narrower_stores[1]:
        found.append((80.0, f"{name} lost 128-bit stores: {stores[1]} → {stores[0]}"))
    if head.warps != base.warps:
        found.append((40.0, f"{name} runs {head.warps} warps a program, base {base.warps}"))
    if head.shared_bytes != base.shared_bytes:
        kib = head.shared_bytes // 1024, base.shared_bytes // 1024
        found.append((20.0, f"{name} takes {kib[0]} KiB of shared memory, base {kib[1]}"))
    if abs(head.registers - base.registers) >= 8:
        found.append((10.0, f"{name} takes {head.registers} registers a thread, base {base.registers}"))
    for cls, phrase in NOTED.items():
        if head.mix.get(cls, 0) != base.mix.get(cls, 0):
            found.append((30.0, f"{name}: {phrase} {base.mix.get(cls, 0)} → {head.mix.get(cls, 0)}"))
    total = head.mix.get("total", 0), base.mix.get("total", 0)
    if min(total) and max(total) / min(total) >= TOTAL_RATIO:
        found.append((25.0, f"{name} issues {total[0] / total[1]:.2f}x the instructions ({total[1]} → {total[0]})"))
    return found


def changes(base: list[KernelCode], head: list[KernelCode]) -> list[str]:
    """What changed from base's kernels to head's for one case, likeliest cause first."""
    found: list[tuple[float, str]] = []
    if len(head) != len(base):
        added = [k.kernel for k in head[len(base) :]] or [k.kernel for k in base[len(head) :]]
        found.append((200.0, f"a call launches {len(head)} kernels, base {len(base)} ({', '.join(added)})"))
    for b, h in zip(base, head, strict=False):
        found += kernel_changes(b, h)
    return [phrase for _, phrase in sorted(found, key=lambda item: -item[0])]


def why(base: list[KernelCode], head: list[KernelCode], most: int = 3) -> str:
    """A line of the ``most`` likeliest causes; what it means when the compiled code did not change."""
    found = changes(base, head)
    if not found:
        return "the compiled kernels are the same (registers, spills, shared memory, instructions): look elsewhere"
    return "; ".join(found[:most]) + (f"; {len(found) - most} more in the table" if len(found) > most else "")


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
