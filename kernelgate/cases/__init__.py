"""The one table of cases, per kernel family: shapes, dtypes, tolerances and
byte/FLOP models. Tests, asv benchmarks, pytest-benchmark and the gate all
read these modules. Append only: renaming or removing a case breaks the
comparability of past benchmark results.
"""
