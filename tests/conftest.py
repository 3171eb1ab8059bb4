"""Where kernel tests run, and how they are reported.

* ``TRITON_INTERPRET=1``: kernels run in Triton's CPU interpreter on CPU
  tensors (small shapes). Must be set before ``kernels`` is imported, so it
  gets a pytest process of its own (``nox -s tests`` runs both).
* otherwise: kernels run on the CUDA device. Without one, those tests SKIP
  and the session ends with a banner saying so; ``--require-gpu`` (or
  ``KERNELGATE_REQUIRE_GPU=1``) turns the skips into failures, as on GPU runners.
"""

import os
from pathlib import Path

import pytest
import torch
from support import split

from kernelgate.kernels.device import interpreter_mode

NO_GPU_REASON = "NO GPU: this kernel test needs a CUDA device (it ran nowhere)"
PERF_DIR = Path(__file__).with_name("perf")


def pytest_addoption(parser):
    parser.addoption(
        "--require-gpu",
        action="store_true",
        default=os.environ.get("KERNELGATE_REQUIRE_GPU") == "1",
        help="fail instead of skipping tests that need a CUDA device",
    )
    parser.addoption("--perf", action="store_true", help="collect the pytest-benchmark suite in tests/perf")
    parser.addoption(
        "--explain",
        action="store_true",
        help="with --perf: keep each kernel's compiled code (and on a GPU, its Nsight Compute profile) in the "
        "benchmark's extra_info; with --benchmark-compare, say what changed from the saved run",
    )
    parser.addoption("--shard", default="1/1", metavar="K/N", help="run the K-th of N disjoint shares of the tests")


def pytest_ignore_collect(collection_path, config):
    # The benchmarks are a developer's inner loop (nox -s perf), not tests: keep them out of CI's test runs.
    if collection_path.is_relative_to(PERF_DIR) and not config.getoption("--perf"):
        return True
    return None


def compiled(item) -> tuple[str, str] | None:
    """The ``compiles`` marker's (kernel shape, kernels), or None for a test that compiles little."""
    marker = item.get_closest_marker("compiles")
    return marker.args if marker else None


def kernel_shape(item) -> str | None:
    group = compiled(item)
    return group[0] if group else None


def pytest_collection_modifyitems(config, items):
    """Tests that compile slow kernels (marker ``compiles``) stay together where that saves compiles.

    ``--shard K/N`` keeps share K (``support.split``): one kernel shape's tests on one shard. Under
    ``--dist loadgroup`` one worker runs the tests that build the same kernels, and these run first,
    so that their compiles start at once on separate workers."""
    k, n = (int(v) for v in config.getoption("--shard").split("/"))
    if n > 1:
        share = split.shares([(item.nodeid, kernel_shape(item)) for item in items], n)
        config.hook.pytest_deselected(items=[item for item, s in zip(items, share, strict=True) if s != k - 1])
        items[:] = [item for item, s in zip(items, share, strict=True) if s == k - 1]
    for item in items:
        if group := compiled(item):
            item.add_marker(pytest.mark.xdist_group(":".join(group)))
    items.sort(key=lambda item: compiled(item) is None)


def pytest_configure(config):
    config.addinivalue_line("markers", "kernel: runs Triton kernels (interpreter or GPU)")
    config.addinivalue_line("markers", "gpu: needs a CUDA device even for kernels run by other backends")
    config.addinivalue_line("markers", "compiles(shape, kernels): builds slow kernels (grouped below)")


def pytest_report_header(config):
    if interpreter_mode():
        mode = "Triton interpreter on CPU tensors (TRITON_INTERPRET=1)"
    elif torch.cuda.is_available():
        mode = f"CUDA device: {torch.cuda.get_device_name(0)}"
    else:
        mode = "no CUDA device: GPU tests will SKIP"
    return f"kernel tests: {mode}; torch {torch.__version__}"


@pytest.fixture(scope="session")
def kernel_device(request) -> torch.device:
    """The device Triton kernels run on in this process."""
    if interpreter_mode():
        return torch.device("cpu")
    if torch.cuda.is_available():
        return torch.device("cuda")
    if request.config.getoption("--require-gpu"):
        pytest.fail("--require-gpu: no CUDA device is visible to torch")
    pytest.skip(NO_GPU_REASON)


@pytest.fixture(scope="session")
def cuda_device(request) -> torch.device:
    """A real CUDA device (tests of kernels that have no interpreter)."""
    if torch.cuda.is_available():
        return torch.device("cuda")
    if request.config.getoption("--require-gpu"):
        pytest.fail("--require-gpu: no CUDA device is visible to torch")
    pytest.skip(NO_GPU_REASON)


@pytest.fixture(autouse=True)
def fresh_seed():
    """Fresh random inputs on every run; the seed is printed so a failure can be replayed."""
    seed = torch.seed()
    print(f"torch seed: {seed}")
    return seed


def pytest_terminal_summary(terminalreporter):
    skipped = [r for r in terminalreporter.stats.get("skipped", []) if NO_GPU_REASON in str(r.longrepr)]
    if skipped:
        terminalreporter.write_sep("!", f"{len(skipped)} GPU TESTS SKIPPED: no CUDA device; they did not run", red=True)
