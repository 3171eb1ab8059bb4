"""A long step's progress, printed at least every ``EVERY`` seconds, so that no minute of a run is silent:
what is done of how many, the time elapsed, an estimate of what is left, and the last line of each log
being watched (a worker's, the tests', the warm-ups')."""

import contextlib
import re
import threading
import time
from collections.abc import Callable
from pathlib import Path

EVERY = 15.0  # seconds between two lines, at most


def last_line(path: Path, width: int = 100) -> str:
    """The last non-empty line of a log (the end of a line pytest or a warm-up is still writing included)."""
    try:
        with path.open("rb") as fh:
            fh.seek(max(0, fh.seek(0, 2) - 4096))
            tail = fh.read().decode(errors="replace")
    except OSError:
        return "(no log yet)"
    lines = [line.strip() for line in tail.splitlines() if line.strip()]
    text = lines[-1] if lines else "(empty)"
    return text if len(text) <= width else "…" + text[-width + 1 :]


class Progress:
    """Counts and logs a step reports; ``line()`` says where it stands."""

    def __init__(self):
        self.start = time.perf_counter()
        self.done, self.total = 0, 0
        self.logs: dict[str, Path] = {}
        # Items under way that finish together, and the fraction of their work done so far (a metrics class's
        # values, whose one setup_cache measures every case): counted in proportion.
        self.pending: tuple[int, Callable[[], float]] | None = None
        # Where the count is read from the work's own output rather than reported: () -> (done, total).
        self.counting: Callable[[], tuple[int, int]] | None = None

    def counted(self, done: int, total: int) -> None:
        self.done, self.total, self.pending = done, total, None

    def line(self) -> str:
        elapsed = time.perf_counter() - self.start
        parts = [f"{elapsed:.0f} s"]
        if self.counting is not None:
            self.done, self.total = self.counting()
        if self.total:
            done = self.done
            if self.pending is not None:
                items, fraction = self.pending
                done += int(items * min(1.0, max(0.0, fraction())))
            parts.append(f"{done}/{self.total} done")
            if done:
                parts.append(f"about {elapsed / done * (self.total - done):.0f} s left")
        parts += [f"{label}: {last_line(path)}" for label, path in self.logs.items()]
        return "; ".join(parts)


@contextlib.contextmanager
def heartbeat(label: str, progress: Progress, every: float = EVERY):
    """While the block runs, print ``label`` and ``progress.line()`` every ``every`` seconds."""
    stop = threading.Event()

    def beat() -> None:
        while not stop.wait(every):
            print(f"  ... {label}: {progress.line()}", flush=True)

    thread = threading.Thread(target=beat, name=f"progress of {label}", daemon=True)
    thread.start()
    try:
        yield progress
    finally:
        stop.set()
        thread.join()


def lines_since(path: Path, offset: int, prefix: str) -> int:
    """Lines of a log past byte ``offset`` that start with ``prefix``."""
    try:
        with path.open("rb") as fh:
            fh.seek(offset)
            text = fh.read().decode(errors="replace")
    except OSError:
        return 0
    return sum(line.startswith(prefix) for line in text.splitlines())


def counted_in(paths: list[Path]) -> tuple[int, int]:
    """(done, total) of the ``[done/total]`` lines that JIT warm-ups print, summed over their logs: each log's
    last such line, its ``warming N workloads`` before the first, all N once it is done."""
    done = total = 0
    for path in paths:
        try:
            text = path.read_text(errors="replace")
        except OSError:
            continue
        counts = COUNT.findall(text)
        planned = PLANNED.search(text)
        if counts:
            done, total = done + int(counts[-1][0]), total + int(counts[-1][1])
        elif planned:
            total += int(planned[1])
    return done, total


COUNT = re.compile(r"^\[(\d+)/(\d+)\] ", re.MULTILINE)
PLANNED = re.compile(r"^warming (\d+) workloads", re.MULTILINE)


def log_size(path: Path) -> int:
    try:
        return path.stat().st_size
    except OSError:
        return 0
