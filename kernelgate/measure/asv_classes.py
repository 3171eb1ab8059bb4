"""The asv classes of a kernel's suite (``kernelgate.suite``): each grid's time class and metrics class, which
``benchmarks/bench_<op>.py`` names so that asv discovers them, for a grid named ``Op``::

    Op = asv_classes.time_class(SUITE, "Op", VERSIONS)


    class OpMetrics(asv_classes.Metrics, suite=SUITE, grid="Op", versions=VERSIONS):
        def setup_cache(self):  # its own: asv shares a setup_cache's result between classes by its line
            return self.measure_selected()

A benchmark's name, parameters, unit and version are what asv files its history under, and what the gate's
rules and the PR check's groups match: tests/test_asv_suite.py holds them to a record. ``VERSIONS`` gives a
benchmark's version by "Class.method": asv's hash of the source the benchmark had before these classes were
generated, or a name for how it is measured. A benchmark it does not list is at version "1"; a new version
starts a new history.

A time class's ``time_*`` calls the sample ``Grid.timed`` built in setup: back-to-back calls, timed per call by
the device clock (``timing.sample_clock``). A metrics class measures every selected case once, in its
``setup_cache`` (``kernelgate.measure.metrics.measure_selected``), and asv hands the result to each
``track_*``: one process with warm compile caches, rather than a cold process per benchmark as ``asv run``
starts. Without a GPU, a suite whose kernels need one skips every benchmark.
"""

import sys
from collections.abc import Callable

from asv_runner.benchmarks.mark import SkipNotImplemented

from kernelgate.measure import metrics, timing
from kernelgate.suite import Suite

TIMEOUT_S = 600  # a case's: a cold torch.compile can take minutes
SETUP_CACHE_TIMEOUT_S = 1800  # every case of a metrics class, JIT compiles (TileLang, torch.compile) included


def _skipped_without_gpu(suite: Suite) -> None:
    if suite.needs_gpu and not timing.gpu_timing():
        raise NotImplementedError(f"{suite.title} kernels need a GPU")


def time_class(suite: Suite, name: str, versions: dict[str, str]) -> type:
    """The time class of the suite's grid ``name``: a class of the module that calls this, as a namedtuple is."""
    grid = suite.grid(name)

    def setup(self, *params):
        _skipped_without_gpu(suite)
        self.sample = grid.timed(*params)

    def time(self, *params):
        self.sample()

    time.version = versions.get(f"{name}.{grid.time_method}", "1")
    attributes = {
        "params": [*grid.params.values(), grid.impls],
        "param_names": [*grid.params, "impl"],
        "timer": staticmethod(timing.sample_clock),  # per call of a back-to-back sample
        "rounds": 1,
        "repeat": grid.repeat,  # the gate tests on these samples
        "timeout": TIMEOUT_S,
        "setup": setup,
        grid.time_method: time,
        "__module__": sys._getframe(1).f_globals["__name__"],
    }
    return type(name, (), attributes)


def _track(name: str, unit: str, version: str) -> Callable:
    def track(self, measured, *params):
        if name not in self.metrics:
            raise SkipNotImplemented(f"{name} was not measured for this case")
        return self.metrics[name]

    track.unit, track.version = unit, version
    return track


class Metrics:
    """The base of a grid's metrics class: ``class <Grid>Metrics(Metrics, suite=..., grid=..., versions=...)``, whose
    body defines its own ``setup_cache`` returning ``self.measure_selected()`` (the module's docstring)."""

    rounds = 1  # each value is already a median over interleaved rounds
    timeout = TIMEOUT_S

    def __init_subclass__(cls, suite: Suite, grid: str, versions: dict[str, str], **kwargs):
        super().__init_subclass__(**kwargs)
        if "setup_cache" not in vars(cls):
            raise TypeError(f"{cls.__name__} must define its own setup_cache: asv shares one between classes")
        cls.setup_cache.timeout = SETUP_CACHE_TIMEOUT_S
        cls.suite, cls.grid = suite, suite.grid(grid)
        cls.params = [*cls.grid.params.values(), cls.grid.variants]
        cls.param_names = [*cls.grid.params, cls.grid.variant_name]
        for metric in cls.grid.metrics:
            version = versions.get(f"{cls.__name__}.track_{metric.name}", "1")
            setattr(cls, f"track_{metric.name}", _track(metric.name, metric.unit, version))

    def measure_selected(self) -> dict:
        """Every case the run selected, measured once, in this one process."""
        if self.suite.needs_gpu and not timing.gpu_timing():
            return {}  # setup skips every benchmark
        return metrics.measure_selected(self.grid, self.params)

    def setup(self, measured, *params):
        _skipped_without_gpu(self.suite)
        *case, variant = params
        self.metrics = metrics.case_metrics(measured, metrics.case_key(*case))[variant]
