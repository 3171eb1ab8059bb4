from kernelgate.kernels.layer_norm.module import LayerNorm
from kernelgate.kernels.layer_norm.ops import layer_norm

__all__ = ["LayerNorm", "layer_norm"]
