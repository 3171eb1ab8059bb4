"""``kernels.LayerNorm``: ``torch.nn.LayerNorm`` with the Triton kernels behind it."""

import torch

from kernelgate.kernels.layer_norm.ops import layer_norm


class LayerNorm(torch.nn.LayerNorm):
    """Same constructor, parameters and state_dict as ``torch.nn.LayerNorm``.

    ``variant`` ("auto", "fused", "two_pass") picks the kernel.
    """

    def __init__(self, *args, variant: str = "auto", **kwargs):
        super().__init__(*args, **kwargs)
        self.variant = variant

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return layer_norm(x, self.normalized_shape, self.weight, self.bias, self.eps, self.variant)

    def extra_repr(self) -> str:
        return f"{super().extra_repr()}, variant={self.variant!r}"
