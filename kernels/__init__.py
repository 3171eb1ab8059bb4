"""GPU kernels guarded by the suite: Triton LayerNorm and RMSNorm, TileLang GQA varlen attention."""

from kernelgate.kernels.layer_norm import LayerNorm, layer_norm
from kernelgate.kernels.rms_norm import RMSNorm, rms_norm

__all__ = ["LayerNorm", "RMSNorm", "layer_norm", "rms_norm"]
