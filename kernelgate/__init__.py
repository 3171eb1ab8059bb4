"""kernelgate: GPU kernels kept correct and fast across commits.

* ``kernelgate.kernels``: the kernels the suite guards (source in ``kernels/``), usable on their own.
* ``kernelgate.cases``: the one table of benchmark and test cases (shapes, dtypes, tolerances, byte and FLOP models).
* ``kernelgate.measure``: GPU timing, the timed workloads, derived metrics, JIT warm-up, device metadata.
* ``kernelgate.tune``: launch-configuration sweeps.
* ``kernelgate.report``: tables and charts of asv results.
* ``kernelgate.gate``: the pull request's performance verdict.
* ``kernelgate.prcheck``: the PR check that runs tests, benchmarks, gate and report in one command.
"""
