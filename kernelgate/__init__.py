"""kernelgate: GPU kernels kept correct and fast across commits.

* ``kernelgate.kernels``: the kernels the suite guards (source in ``kernels/``), usable on their own.
* ``kernelgate.cases``: the one table of benchmark and test cases (shapes, dtypes, tolerances, byte and FLOP models),
  each kernel's workloads and metrics, and its suite (``kernelgate.suite``), which ``SUITES`` lists.
* ``kernelgate.measure``: GPU timing, the asv classes, derived metrics, JIT warm-up, the benchmark workers and
  shards the main job and the PR check share, device metadata.
* ``kernelgate.tune``: launch-configuration sweeps.
* ``kernelgate.report``: tables and charts of asv results.
* ``kernelgate.gate``: the pull request's performance verdict.
* ``kernelgate.prcheck``: the PR check that runs tests, benchmarks, gate and report in one command.
"""
