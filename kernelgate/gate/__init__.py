"""The performance gate: a pull request's verdict from asv results measured on one runner.

Checks, in order: the tests passed on that machine (JUnit XML); head's values
respect the floors of ``perf-thresholds.toml``; head is not slower than base
beyond the allowed change (asv's own statistics, as ``asv compare``);
suspected regressions are re-measured and only those that persist fail.
Anything the gate cannot evaluate fails it (``GateError``): it never turns
green because nothing was compared. ``python -m kernelgate.gate --help``.
"""


class GateError(Exception):
    """The inputs cannot be evaluated (missing, corrupted or inconsistent); the gate fails closed."""
