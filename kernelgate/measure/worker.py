"""One commit's benchmark process for the main job and the PR check: runs asv benchmarks on request, in one
process.

    <checkout's python> -P worker.py BENCHMARK_DIR

The PR check starts one worker per commit (the main job one per GPU), each in that commit's environment
and checkout, and alternates them case by case (``kernelgate.measure.workers``). A worker reads one JSON
request per line on stdin and answers one JSON line on stdout (all else it prints goes to stderr):

* ``{"op": "discover"}`` -> ``{"benchmarks": [...]}``: the suite as asv's discovery describes it;
* ``{"op": "setup", "name": N, "index": I}`` -> ``{"status": "ok" | "skipped" | "failed", "message": M}``:
  set up one parameter combination of a time_* benchmark, once;
* ``{"op": "sample", "count": K}`` -> ``{"samples": [...], "number": [...]}`` or ``{"failed": M}``: K samples
  of the case set up (asv's own timing loop, its timer and ``number``), without re-running setup between
  samples;
* ``{"op": "teardown"}``;
* ``{"op": "track", "name": N, "indices": [I, ...], "selected": [[params], ...], "tracked": [metric, ...]}`` ->
  ``{"values": [...], "errors": [...]}``: the values of a track_* benchmark (None where one failed, and its
  error beside it), its ``setup_cache`` (once per cache key) told which parameter combinations the run needs
  through ``KERNELGATE_SELECTED_PARAMS``, and which metric each is for through ``KERNELGATE_TRACKED_METRICS``
  (without ``tracked``: every metric).

A failure that leaves the process's CUDA context unusable adds ``"fatal": REASON`` to its answer: every
later CUDA call of this process would fail too, so the cases after it need a fresh worker.

The script imports only asv_runner and the checkout's suite: the same file serves base and head,
whichever commit's ``kernelgate`` the environment holds.
"""

import io
import json
import math
import os
import sys
import traceback

from asv_runner.benchmarks.mark import SkipNotImplemented
from asv_runner.discovery import get_benchmark_from_name, list_benchmarks

SELECTED_ENV = "KERNELGATE_SELECTED_PARAMS"  # read by kernelgate.measure.metrics.selected_params
TRACKED_ENV = "KERNELGATE_TRACKED_METRICS"  # read by kernelgate.measure.metrics.tracked_metrics
# Per sample: one timed run of the benchmark body (its timer counts the calls inside it).
SAMPLE_ATTRIBUTES = {"number": 1, "warmup_time": 0.02, "min_run_count": 1}


class Worker:
    def __init__(self, root: str):
        self.root = root
        self.current = None  # the time_* benchmark set up, or None
        self.caches: dict[str, object] = {}  # setup_cache results by asv's cache key
        self.broken: str | None = None  # why this process's CUDA context can run no further case

    def discover(self) -> dict:
        listing = io.StringIO()
        list_benchmarks(self.root, listing)
        return {"benchmarks": json.loads(listing.getvalue())}

    def setup(self, name: str, index: int) -> dict:
        self.teardown()
        bench = get_benchmark_from_name(self.root, f"{name}-{index}", extra_params=SAMPLE_ATTRIBUTES)
        bench.set_cache(None)
        try:
            skipped = bench.do_setup()
        except Exception:
            return {"status": "failed", "message": self._failure()}
        if skipped:
            return {"status": "skipped", "message": "setup raised NotImplementedError"}
        bench.redo_setup = lambda: None  # set up once; samples then alternate with the other commit's
        self.current = bench
        return {"status": "ok", "message": ""}

    def sample(self, count: int) -> dict:
        if self.current is None:
            return {"error": "no case is set up"}
        self.current.repeat = count
        try:
            result = self.current.do_run()
        except Exception:
            return {"failed": self._failure()}
        return {"samples": result["samples"], "number": result["number"]}

    def teardown(self) -> dict:
        if self.current is not None:
            bench, self.current = self.current, None
            bench.do_teardown()
        return {}

    def track(self, name: str, indices: list[int], selected: list[list], tracked: list[str] | None = None) -> dict:
        values, errors = [], []
        for index in indices:
            bench = get_benchmark_from_name(self.root, f"{name}-{index}")
            try:
                bench.set_cache(self._cache(bench, selected, tracked))
                if bench.do_setup():
                    value = math.nan
                else:
                    try:
                        value = bench.do_run()
                    except SkipNotImplemented:
                        value = math.nan
                    finally:
                        bench.do_teardown()
            except Exception:
                error = self._failure()
                print(error, file=sys.stderr, flush=True)
                values.append(None)  # asv's mark of a failed benchmark
                errors.append(error[-2000:])
                if self.broken:
                    rest = len(indices) - len(values)
                    values += [None] * rest
                    errors += [f"not measured: the worker stopped, {self.broken}"] * rest
                    break
                continue
            values.append(value)
            errors.append(None)
        return {"values": values, "errors": errors}

    def _failure(self) -> str:
        """The traceback of the exception being handled, and whether it broke the CUDA context: a sticky
        error (an illegal address, a device-side assert) fails every later CUDA call of the process."""
        message = traceback.format_exc(limit=8)
        torch = sys.modules.get("torch")  # only if the suite imported it: the worker does not
        if torch is not None and torch.cuda.is_initialized():
            try:
                torch.cuda.synchronize()
            except Exception as exc:
                self.broken = f"its CUDA context is broken: {str(exc).strip().splitlines()[0]}"
                message += f"\nThe worker stops: {self.broken}\n"
        return message

    def _cache(self, bench, selected: list[list], tracked: list[str] | None):
        if bench.setup_cache_key is None:
            return None
        if bench.setup_cache_key not in self.caches:
            os.environ[SELECTED_ENV] = json.dumps(selected)
            if tracked is not None:
                os.environ[TRACKED_ENV] = json.dumps(tracked)
            try:
                self.caches[bench.setup_cache_key] = bench.do_setup_cache()
            finally:
                del os.environ[SELECTED_ENV]
                os.environ.pop(TRACKED_ENV, None)
        return self.caches[bench.setup_cache_key]


def answer(worker: Worker, request: dict) -> dict:
    op = request.pop("op")
    handler = {"discover": worker.discover, "setup": worker.setup, "sample": worker.sample,
               "teardown": worker.teardown, "track": worker.track}.get(op)  # fmt: skip
    if handler is None:
        return {"error": f"unknown op {op!r}"}
    return handler(**request)


def main() -> None:
    # The answers leave on a copy of stdout, and stdout itself becomes stderr: nothing that the suite, a
    # C library or a child process prints can corrupt them.
    protocol = os.fdopen(os.dup(sys.stdout.fileno()), "w")
    os.dup2(sys.stderr.fileno(), sys.stdout.fileno())
    worker = Worker(os.path.abspath(sys.argv[1]))
    for line in sys.stdin:
        try:
            reply = answer(worker, json.loads(line))
        except Exception:
            reply = {"error": traceback.format_exc(limit=8)}
        if worker.broken:
            reply["fatal"] = worker.broken
        protocol.write(json.dumps(reply, allow_nan=True) + "\n")
        protocol.flush()


if __name__ == "__main__":
    main()
