"""GPU kernels guarded by the suite: Triton LayerNorm and TileLang GQA varlen attention."""

from kernelgate.kernels.layer_norm import LayerNorm, layer_norm

__all__ = ["LayerNorm", "layer_norm"]
