"""asv benchmarks. Importing this package decides the timing mode for the process.

Without a GPU the suite runs as a smoke test: Triton's interpreter on tiny
shapes. TRITON_INTERPRET must be set before any kernel is decorated, hence here.
PYTORCH_NVML_BASED_CUDA_CHECK keeps the GPU probe from initializing CUDA in
asv's fork server, whose children each open their own context.
"""

import os

os.environ.setdefault("PYTORCH_NVML_BASED_CUDA_CHECK", "1")

import torch

if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")
