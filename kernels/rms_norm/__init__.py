from kernelgate.kernels.rms_norm.module import RMSNorm
from kernelgate.kernels.rms_norm.ops import rms_norm

__all__ = ["RMSNorm", "rms_norm"]
