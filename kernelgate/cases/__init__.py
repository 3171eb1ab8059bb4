"""The one table of cases, per kernel: shapes, dtypes, tolerances and byte/FLOP models, and each kernel's suite
(``kernelgate.suite``). Tests, asv benchmarks, pytest-benchmark and the gate all read these modules. Append
only: renaming or removing a case breaks the comparability of past benchmark results.

``SUITES`` lists every kernel's suite: adding a kernel adds its line.
"""

from kernelgate.cases import attention, layer_norm, rms_norm
from kernelgate.suite import Suite

SUITES: tuple[Suite, ...] = (layer_norm.SUITE, attention.SUITE, rms_norm.SUITE)


def suite_of(benchmark: str) -> Suite | None:
    """The suite whose asv module declares ``benchmark`` (asv's name, module.Class.method); None for one no
    kernel owns (the device's peaks) or a kernel this code does not know."""
    return next((suite for suite in SUITES if benchmark.startswith(f"{suite.module}.")), None)


def named(name: str) -> Suite:
    """The suite of that name (a pr-check.toml group's)."""
    return next(suite for suite in SUITES if suite.name == name)
