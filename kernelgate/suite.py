"""What the harness needs to know of a kernel, declared once, in the kernel's cases module.

A kernel is a package, ``kernels/<op>/``, and a cases module, ``kernelgate/cases/<op>.py``, whose ``SUITE``
the registry, ``kernelgate.cases.SUITES``, lists. The harness reads nothing else of it:

* ``kernelgate.measure.asv_classes`` builds each grid's asv classes, which ``benchmarks/bench_<op>.py`` names:
  a time class (``Grid.timed``) and a metrics class (``Grid.measure``, ``Grid.metrics``);
* ``kernelgate.measure.metrics`` measures the metrics, for asv or on its own (``python -m kernelgate.measure.metrics``);
* ``kernelgate.measure.warm`` fills the JIT caches (``Suite.workload``, ``Suite.jit_references``);
* ``kernelgate.measure.shards`` balances the PR check's shards and the main job's GPUs (``Suite.seconds``);
* ``kernelgate.report`` prints the tables, the chart and the results page (``Grid.label``, ``Metric.title``,
  ``Suite.smoke_label``, ``Suite.notes``);
* ``pr-check.toml`` has a group of the suite's name (``tests/test_suites.py`` holds the two to each other).

Parameters are asv's: a time case's are its grid's leading parameters (``Grid.params``) and the
implementation, a variant or a reference; a metrics case's are the leading ones and the variant. Every
callable takes them as asv passes them, strings. A callable that raises NotImplementedError skips its case.
Cases are append only: a renamed case, grid or metric starts a new history.

The LayerNorm's suite is the worked example (``kernelgate/cases/layer_norm.py``); ``LAYER_NORM`` is its
``bandwidth.RowOp``, which builds a memory-bound kernel's callables from its cases and its calls::

    SHAPES_GRID = Grid(
        name="LayerNorm",  # the time class; its metrics class is LayerNormMetrics
        time_method="time_layer_norm",
        params={"shape": shape_names(), "dtype": BENCH_DTYPES, "direction": BENCH_DIRECTIONS},
        variants=LAYER_NORM_VARIANTS,  # this project's kernels: the metrics class's last parameter
        references=bandwidth.REFERENCES,  # timed beside them: the time class's last parameter is "impl"
        variant_name="variant",
        timed=LAYER_NORM.timed,  # (shape, dtype, direction, impl) -> the back-to-back sample asv times
        measure=LAYER_NORM.measure,  # (shape, dtype, direction, variants=[...], ...) -> {variant: {metric: value}}
        metrics=bandwidth.METRICS,  # Metric("gbps", "GB/s", "GB/s"): its name, unit and table column; ...
        label="layer_norm",  # the tables' kernel column: layer_norm/<variant>
        open_params={"shape": cli.shape},  # the metrics command takes any MxN shape
    )
    SUITE = Suite(
        name="layer_norm",  # pr-check.toml's group; benchmarks/bench_layer_norm.py
        title="LayerNorm",
        grids=(SHAPES_GRID, WIDTHS_GRID),  # WIDTHS_GRID: dataclasses.replace(SHAPES_GRID, name=..., params=...)
        workload=LAYER_NORM.warm_call,  # (shape, dtype, direction, impl) -> one call, untimed: the warm-up's
        jit_references=bandwidth.JIT_REFERENCES,  # the references the warm-up compiles too
        seconds=LAYER_NORM.seconds,  # a case's seconds to measure (shards); None: the averages
        smoke_label=LAYER_NORM.smoke_label,  # (shape, dtype, direction) -> the tiny case an interpreter run ran
        notes=NOTES,  # what its tables' columns mean, on the results page
    )

and ``benchmarks/bench_layer_norm.py`` names the classes (``kernelgate.measure.asv_classes``)::

    LayerNorm = asv_classes.time_class(SUITE, "LayerNorm", VERSIONS)


    class LayerNormMetrics(asv_classes.Metrics, suite=SUITE, grid="LayerNorm", versions=VERSIONS):
        def setup_cache(self):  # its own: asv shares a setup_cache's result between classes by its line
            return self.measure_selected()
"""

import dataclasses
from collections.abc import Callable

from kernelgate.asv_case import Case


@dataclasses.dataclass(frozen=True)
class Metric:
    """One value a metrics class tracks for each case and variant: asv's ``track_<name>``."""

    name: str  # the key of its value in what ``Grid.measure`` returns
    unit: str  # asv's unit; the tables format its values by it (kernelgate.report.bench.FORMATS)
    # Its column in the tables, which suites share by title ("% peak": the % of the device's peak the kernel is
    # bound by, which the chart plots); None: asv's history only.
    title: str | None = None
    baseline: bool = False  # the speedup over the kernel's baseline, which the chart plots
    # The references its value needs timed beside the variants (the warm-up compiles those); None: every one of
    # the grid's, which its measure times together.
    references: tuple[str, ...] | None = None


@dataclasses.dataclass(frozen=True)
class Grid:
    """The cases of one asv parameter grid: a time class, ``name``, and a metrics class, ``name + "Metrics"``."""

    name: str
    time_method: str  # the time class's benchmark method, time_<...>
    params: dict[str, list[str]]  # the leading parameters, by name, in asv's order
    variants: list[str]  # this project's kernels: the metrics class's last parameter, and first of the time class's
    references: list[str]  # what the variants are timed beside: the rest of the time class's last parameter, "impl"
    variant_name: str  # the metrics class's name for its last parameter
    timed: Callable[..., Callable[[], object]]  # (*leading, impl) -> what asv times; NotImplementedError: skipped
    # (*leading, variants=[...], metrics={names} or None for all, stored={reference: ms} or None) ->
    # {variant: {metric: value}}; it may measure more than it is asked for, never less. ``stored``: the references'
    # times for this environment (kernelgate.measure.references), which it may read instead of timing them, and
    # then it returns the times of those it timed under references.TIMES.
    measure: Callable[..., dict[str, dict[str, float]]]
    metrics: tuple[Metric, ...]
    label: str  # the tables' kernel column: <label>/<variant>
    repeat: tuple[int, int, float] = (10, 20, 1.0)  # asv's (min samples, max samples, seconds) of a time case
    # A leading parameter that ``python -m kernelgate.measure.metrics`` takes beyond the grid's values, and the
    # argparse type that checks it (a shape: any MxN); the others must be among the grid's.
    open_params: dict[str, Callable[[str], str]] = dataclasses.field(default_factory=dict)

    @property
    def impls(self) -> list[str]:
        return [*self.variants, *self.references]


@dataclasses.dataclass(frozen=True)
class Suite:
    """A kernel, as the harness sees it (this module's docstring)."""

    name: str  # the kernel's: its pr-check.toml group, and its asv module, benchmarks/bench_<name>.py
    title: str  # how reports name it
    grids: tuple[Grid, ...]
    workload: Callable[..., Callable[[], object]]  # (*time case parameters) -> one call: the JIT warm-up runs it
    jit_references: tuple[str, ...] = ()  # the references with JIT work to warm (this project's kernels have)
    seconds: Callable[[Case], float | None] = lambda case: None  # a time case's or metrics unit's; None: averages
    # (*leading) -> the case a smoke run (Triton's interpreter) ran in its place; None: its kernels need a GPU.
    smoke_label: Callable[..., str] | None = None
    notes: str = ""  # markdown bullets: what its tables' columns mean (the results page)
    # (*leading, impl, gpu_class or None) -> the Triton launches one call makes, built by the kernel's own launchers
    # on meta tensors, which kernelgate.explain compiles for sm_90 to compare two commits' kernels; [] for a
    # reference. None: the suite's kernels are not compared so.
    launches: Callable[..., list] | None = None

    def grid(self, name: str) -> Grid:
        return next(grid for grid in self.grids if grid.name == name)

    @property
    def module(self) -> str:
        """Its asv module: the prefix of its benchmarks' names."""
        return f"bench_{self.name}"

    @property
    def needs_gpu(self) -> bool:
        return self.smoke_label is None
