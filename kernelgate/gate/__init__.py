"""The performance gate: a pull request's verdict from asv results measured on one runner.

Checks, in order: the tests passed on that machine (JUnit XML); base and head
were measured under the same conditions (GPU, clocks, power limit, driver,
software); head keeps every case of base's suite unless it is declared removed;
head's values respect the floors of base's ``perf-thresholds.toml`` and those
head's adds (which only tighten: kernelgate/gate/thresholds.py); head is not slower
than base beyond the allowed change (asv's own statistics, as ``asv compare``);
suspected regressions are re-measured and only those that persist fail.
Anything the gate cannot evaluate fails it (``GateError``): it never turns
green because nothing, or too little, was compared, and it always leaves its
report behind. ``python -m kernelgate.gate --help``.
"""


class GateError(Exception):
    """The inputs cannot be evaluated (missing, corrupted or inconsistent); the gate fails closed."""
