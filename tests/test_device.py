"""GPU classes: the name tuned tables and perf thresholds are filed under."""

import pytest

from kernelgate.kernels.device import gpu_class


@pytest.mark.parametrize(
    ("name", "expected"),
    [
        ("NVIDIA H100 80GB HBM3", "H100"),
        ("NVIDIA H100 PCIe", "H100"),
        ("NVIDIA H200", "H200"),
        ("NVIDIA GH200 480GB", "GH200"),  # contains "H200", but is another class
        ("NVIDIA H20", "H20"),
        ("NVIDIA A100-SXM4-80GB", "A100"),
        ("NVIDIA RTX 6000 Ada Generation", "RTX"),
        ("", "unknown"),
    ],
)
def test_gpu_class(name, expected):
    assert gpu_class(name) == expected
