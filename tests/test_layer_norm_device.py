"""Checks that need the compiled (non-interpreter) process but no GPU."""

import pytest
import torch

from kernelgate import kernels
from kernelgate.kernels.device import interpreter_mode

pytestmark = pytest.mark.skipif(interpreter_mode(), reason="compiled-mode check; runs in the other pytest process")


def test_cpu_tensor_is_refused_outside_the_interpreter():
    with pytest.raises(ValueError, match="x is on cpu; the Triton kernels need a CUDA tensor"):
        kernels.layer_norm(torch.randn(4, 8), 8)
