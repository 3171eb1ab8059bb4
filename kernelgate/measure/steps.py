"""A run's steps, each one's start, end and time printed as it goes and tabled at the end: the main job's and
the PR check's."""

import contextlib
import time
from pathlib import Path

from kernelgate.measure.progress import Progress, heartbeat


class Steps:
    """``with steps(name):`` runs a step; ``table()`` gives every step's time and outcome. While a step runs it
    prints, at least every 15 seconds, where it stands (``progress``: counts the step reports, the logs it watches)."""

    def __init__(self):
        self.times: list[tuple[str, float, str]] = []
        self.start = time.perf_counter()
        self.watched: dict[str, Path] = {}  # logs of work that spans steps (the PR check's GPU tests)
        self.progress = Progress()

    @contextlib.contextmanager
    def __call__(self, name: str):
        print(f"\n==> {name}", flush=True)
        start = time.perf_counter()
        outcome = "ok"
        self.progress = Progress()
        self.progress.logs.update(self.watched)
        try:
            with heartbeat(name, self.progress):
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
