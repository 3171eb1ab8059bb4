"""TileLang GQA attention over packed variable-length sequences (flash-attn varlen interface)."""

from kernelgate.kernels.attention.ops import FlashAttnVarlenFunction, flash_attn_varlen_func
from kernelgate.kernels.attention.tilelang_kernels import ACCUM_MODES

__all__ = ["ACCUM_MODES", "FlashAttnVarlenFunction", "flash_attn_varlen_func"]
