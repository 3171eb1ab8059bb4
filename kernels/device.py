"""Where kernels run: a CUDA device, or Triton's CPU interpreter."""

import functools
import os
import re

import torch


def interpreter_mode() -> bool:
    """True when Triton runs kernels in its CPU interpreter (TRITON_INTERPRET=1).

    The variable is read when kernels are decorated, so it must be set before
    ``kernels`` is imported; a process is either interpreted or compiled.
    """
    return os.environ.get("TRITON_INTERPRET", "0") == "1"


@functools.cache
def sm_count(device_index: int) -> int:
    return torch.cuda.get_device_properties(device_index).multi_processor_count


@functools.cache
def is_sm90_or_newer(device_index: int) -> bool:
    """Hopper (sm_90) and newer: programmatic dependent launch (griddepcontrol) and the TMA unit's
    bulk prefetch (cp.async.bulk.prefetch)."""
    return torch.cuda.get_device_capability(device_index)[0] >= 9


GPU_CLASSES = ("GH200", "H200", "H100", "H20", "A100", "L40S", "B200")


def gpu_class(name: str) -> str:
    """The class a GPU's tuned configs and perf thresholds are filed under ("H100", "H200", ...).

    Whole words of the device name are matched, so "NVIDIA GH200 480GB" is a GH200, not an H200.
    """
    words = re.split(r"[^A-Z0-9]+", name.upper())
    known = next((word for word in words if word in GPU_CLASSES), None)
    if known:
        return known
    return name.replace("NVIDIA ", "").split()[0] if name.strip() else "unknown"
