"""GQA varlen attention cases: sequence lengths, heads, head dims, dtypes,
tolerances and FLOP models (append only).

Lengths are drawn from a seeded generator, so a case names the same batch on
every machine; the tensor values are fresh on every run.
"""

import dataclasses
import math

import torch

from kernelgate.cases.common import DTYPES

# Relative L2 error ||got - ref|| / ||ref|| against the float32 reference, for o, dq, dk, dv.
# The inputs are exact in float32; the kernels round P and dS to the input dtype before the
# P V, dS^T Q and dS K products, and round the outputs once. fp16 rounds to 2**-11 relative
# per value; averaged over a row this measured ~3e-4 on an H200 for the public TileLang
# kernels, so 2e-3 leaves ~6x. bf16 keeps 8 mantissa bits (2**-8, 8x coarser): 1e-2.
REL_L2_TOLERANCES = {"float16": 2e-3, "bfloat16": 1e-2}
# LSE is float32 math on exact products (MMA accumulates in fp32) plus ex2/lg2.approx
# (2**-22 relative): 1e-4 whatever the input dtype.
LSE_REL_L2_TOLERANCE = 1e-4


def rel_l2(got: torch.Tensor, ref: torch.Tensor) -> float:
    """||got - ref|| / ||ref|| in float64; inf if got has a NaN (an unwritten, poisoned element)."""
    got, ref = got.double(), ref.double()
    if torch.isnan(got).any():
        return math.inf
    return ((got - ref).norm() / ref.norm().clamp_min(1e-30)).item()


@dataclasses.dataclass(frozen=True)
class AttentionCase:
    heads: int
    heads_kv: int
    dim_qk: int
    dim_v: int
    causal: bool
    dtype: str = "float16"
    batch: int = 8  # sequences drawn when lengths_q is empty
    max_len: int = 1024
    min_len: int = 1
    seed: int = 0  # seeds the drawn lengths, not the tensor values
    lengths_q: tuple[int, ...] = ()  # explicit query lengths (replace batch, min_len, max_len, seed)
    lengths_k: tuple[int, ...] = ()  # explicit key lengths; empty: equal to the query lengths

    @property
    def name(self) -> str:
        if self.lengths_q:
            lens = "lens" + "-".join(map(str, self.lengths_q))
            if self.lengths_k:
                lens += "_kv" + "-".join(map(str, self.lengths_k))
        else:
            lens = f"b{self.batch}x{self.min_len}to{self.max_len}s{self.seed}"
        return f"{lens}-{self.kernel_shape}"

    @property
    def kernel_shape(self) -> str:
        """What its compiled kernels depend on (the lengths are symbolic): cases that share it share kernels."""
        mask = "causal" if self.causal else "full"
        return f"h{self.heads}kv{self.heads_kv}-d{self.dim_qk}x{self.dim_v}-{mask}-{self.dtype}"

    @property
    def torch_dtype(self) -> torch.dtype:
        return DTYPES[self.dtype]

    def seqlens_q(self) -> list[int]:
        if self.lengths_q:
            return list(self.lengths_q)
        gen = torch.Generator().manual_seed(self.seed)
        return torch.randint(self.min_len, self.max_len + 1, (self.batch,), generator=gen).tolist()

    def seqlens_k(self) -> list[int]:
        return list(self.lengths_k) if self.lengths_k else self.seqlens_q()

    def _pairs(self) -> int:
        """Sum over sequences of len_q * len_k: the score entries before any mask."""
        return sum(lq * lk for lq, lk in zip(self.seqlens_q(), self.seqlens_k(), strict=True))

    def flops_forward(self) -> float:
        """2 * sum(len_q * len_k) * H * (d_qk + d_v), halved if causal (Q K^T and P V)."""
        return 2 * self._pairs() * self.heads * (self.dim_qk + self.dim_v) * (0.5 if self.causal else 1.0)

    def flops_backward(self) -> float:
        """2 * sum(len_q * len_k) * H * (3 * d_qk + 2 * d_v), halved if causal.

        Q K^T, dS K and dS^T Q take d_qk each; dO V^T and P^T dO take d_v each (the
        recomputed forward Q K^T included, as FlashAttention counts it).
        """
        return 2 * self._pairs() * self.heads * (3 * self.dim_qk + 2 * self.dim_v) * (0.5 if self.causal else 1.0)

    def tolerance(self, quantity: str) -> float:
        """Largest relative L2 error allowed for o, lse, dq, dk or dv."""
        return LSE_REL_L2_TOLERANCE if quantity == "lse" else REL_L2_TOLERANCES[self.dtype]

    def make_inputs(self, device, generator: torch.Generator | None = None) -> dict:
        """Fresh random q, k, v, do (never zeros) with cu_seqlens and max_seqlen."""
        lq, lk = self.seqlens_q(), self.seqlens_k()
        kw = dict(device=device, dtype=torch.float32, generator=generator)

        def rand(*shape):
            return torch.randn(*shape, **kw).to(self.torch_dtype)

        def cu(lengths):
            return torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32, device=device)

        return {
            "q": rand(sum(lq), self.heads, self.dim_qk),
            "k": rand(sum(lk), self.heads_kv, self.dim_qk),
            "v": rand(sum(lk), self.heads_kv, self.dim_v),
            "do": rand(sum(lq), self.heads, self.dim_v),
            "cu_seqlens_q": cu(lq),
            "cu_seqlens_k": cu(lk),
            "max_seqlen_q": max(lq),
            "max_seqlen_k": max(lk),
        }


# Correctness cases (tests). Few kernel shapes (each new one compiles 8 kernels); lengths vary freely:
# 1, 0 (an empty sequence), multiples of the tiles and lengths just past them.
EDGE_LENGTHS = (1, 0, 37, 128, 129, 300, 64, 2)
CORRECTNESS_CASES = [
    # The benchmark's kernel shape: 16 query heads per key/value head, d_qk != d_v.
    AttentionCase(32, 2, 192, 128, causal=True, dtype="float16", lengths_q=EDGE_LENGTHS),
    AttentionCase(8, 2, 192, 128, causal=False, dtype="bfloat16", lengths_q=EDGE_LENGTHS),
    AttentionCase(4, 4, 128, 128, causal=True, dtype="bfloat16", lengths_q=EDGE_LENGTHS),  # MHA
    AttentionCase(6, 2, 128, 128, causal=True, dtype="float16", lengths_q=EDGE_LENGTHS),  # 3 groups
    AttentionCase(16, 1, 64, 64, causal=False, dtype="float16", lengths_q=EDGE_LENGTHS),  # MQA
    # The cases below reuse kernel shapes above (no new compiles).
    AttentionCase(32, 2, 192, 128, causal=True, dtype="float16", batch=6, max_len=700, seed=1),  # random lengths
    # len_q != len_k: bottom-right causal alignment, queries that see no key, empty key or query sides.
    AttentionCase(
        6, 2, 128, 128, causal=True, dtype="float16", lengths_q=(5, 100, 3, 0, 130), lengths_k=(9, 70, 0, 12, 200)
    ),
]

# Benchmark cases (asv, pytest-benchmark, the gate), by the name results are filed under.
# The implementations our accumulation modes are measured against (kernelgate.measure.workloads names them).
ATTENTION_BASELINE = "fa2_varlen"  # torch.nn.attention.varlen.varlen_attn: FA2, d_qk == d_v only
ATTENTION_REFERENCES = [ATTENTION_BASELINE, "cudnn_sdpa"]

BENCH_CONFIGS = {
    # The public TileLang example's configuration. Lengths in [max - 20, max], as the public TileLang example
    # draws them ("random" padding mode), so that FACTS.md's anchors compare.
    "seed-gqa-192-128-causal": AttentionCase(
        32, 2, 192, 128, causal=True, dtype="float16", batch=8, max_len=1024, min_len=1004
    ),
    "gqa8-128-causal": AttentionCase(
        32, 8, 128, 128, causal=True, dtype="float16", batch=8, max_len=2048, min_len=1536
    ),
    "gqa8-128-full": AttentionCase(32, 8, 128, 128, causal=False, dtype="float16", batch=8, max_len=2048, min_len=1536),
    # Head dim 64, many short sequences: where FA2 has led.
    "gqa8-64-full": AttentionCase(32, 8, 64, 64, causal=False, dtype="float16", batch=32, max_len=1024, min_len=300),
    "gqa8-64-causal-bf16": AttentionCase(
        32, 8, 64, 64, causal=True, dtype="bfloat16", batch=32, max_len=1024, min_len=300
    ),
    # Long-context training: one 8k and one 16k sequence.
    "long-128-causal-bf16": AttentionCase(32, 8, 128, 128, causal=True, dtype="bfloat16", lengths_q=(8192, 16384)),
    # A packed batch of very uneven documents: cuDNN pays for padding to the longest, varlen does not.
    "wide-varlen-128-causal": AttentionCase(
        32, 8, 128, 128, causal=True, dtype="float16", batch=16, max_len=4062, min_len=254, seed=39
    ),
}

# Codegen cases (tests without a GPU): compile for sm_90a and read the CUDA source and SASS.
CODEGEN_CASES = [
    BENCH_CONFIGS["seed-gqa-192-128-causal"],
    AttentionCase(8, 8, 128, 128, causal=False, dtype="bfloat16"),
    BENCH_CONFIGS["gqa8-64-causal-bf16"],  # head dim 64
]
