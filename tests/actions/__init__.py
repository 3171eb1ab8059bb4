"""GitHub Actions' side of tests/test_workflows_act.py: act and what GitHub provides, stood in locally
(``engine``), and the GPU runner's Python (``gpu_runner``). Not under tests/support, whose changes select
every group of the PR check: nothing here runs on the GPU."""
