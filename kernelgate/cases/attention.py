"""GQA varlen attention cases: sequence lengths, heads, head dims, dtypes,
tolerances and FLOP models (append only); the backward's workloads and metrics,
and the suite the harness drives them by (``SUITE``).

Lengths are drawn from a seeded generator, so a case names the same batch on
every machine; the tensor values are fresh on every run. TileLang has no
interpreter: without a GPU every benchmark is skipped.
"""

import contextlib
import dataclasses
import math
import statistics
from collections.abc import Callable

import torch

from kernelgate.asv_case import Case
from kernelgate.cases.common import DTYPES
from kernelgate.measure import timing
from kernelgate.measure.workloads import warmed
from kernelgate.suite import Grid, Metric, Suite

# The backward's dQ/dK/dV accumulation modes: kernelgate.kernels.attention.ACCUM_MODES, whose package imports
# TileLang, which the harness does not need to read the cases.
ACCUM_MODES = ("elem", "region", "tma")

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
# The implementations our accumulation modes are measured against (attention_backward_workload names them).
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


# --- workloads and metrics: what the benchmarks time and track ------------------------------------------


def attention_shape(case):
    """The compiled-kernel shape of an attention case (what kernelgate.kernels.attention.ops caches kernels by)."""
    from kernelgate.kernels.attention.ops import AttentionShape

    return AttentionShape(case.heads, case.heads_kv, case.dim_qk, case.dim_v, case.dtype, case.causal)


def attention_backward_workload(case, impl: str) -> Callable[[], object]:
    """The backward of one attention case, on saved forward outputs.

    Ours (``elem``/``region``/``tma``): preprocess + main + postprocess, varlen
    natively (no pad/unpad). ``fa2_varlen``: torch's varlen_attn backward (FA2),
    d_qk == d_v only. ``cudnn_sdpa``: cuDNN SDPA backward on the batch padded to
    the longest sequence (padding is outside the timed call, and its extra
    FLOPs are inside it). Unsupported combinations raise NotImplementedError.
    """
    from kernelgate.kernels.attention.ops import attention_backward, attention_forward

    inp = case.make_inputs("cuda")
    q, k, v, do = inp["q"], inp["k"], inp["v"], inp["do"]
    cu_q, cu_k, max_q, max_k = inp["cu_seqlens_q"], inp["cu_seqlens_k"], inp["max_seqlen_q"], inp["max_seqlen_k"]
    if impl in ACCUM_MODES:
        o, lse = attention_forward(q, k, v, cu_q, cu_k, max_q, case.causal)
        return lambda: attention_backward(do, q, k, v, o, lse, cu_q, cu_k, max_q, max_k, case.causal, accum=impl)
    if impl == "fa2_varlen":
        if case.dim_qk != case.dim_v:
            raise NotImplementedError("torch's varlen_attn (FA2) needs d_qk == d_v")
        from torch.nn.attention.varlen import varlen_attn

        q, k, v = (t.requires_grad_() for t in (q, k, v))
        window = (-1, 0) if case.causal else (-1, -1)
        out = varlen_attn(q, k, v, cu_q, cu_k, max_q, max_k, window_size=window)
        return lambda: torch.autograd.grad(out, (q, k, v), do, retain_graph=True)
    if impl == "cudnn_sdpa":
        from torch.nn.attention import SDPBackend, sdpa_kernel

        def padded(t, cu, heads, max_len):  # (total, H, d) -> (batch, H, max_len, d)
            batch = cu.numel() - 1
            out = t.new_zeros(batch, max_len, heads, t.shape[-1])
            for i, (a, b) in enumerate(zip(cu[:-1].tolist(), cu[1:].tolist(), strict=True)):
                out[i, : b - a] = t[a:b]
            return out.transpose(1, 2).contiguous().requires_grad_()

        qp, dop = padded(q, cu_q, case.heads, max_q), padded(do, cu_q, case.heads, max_q).detach()
        kp, vp = padded(k, cu_k, case.heads_kv, max_k), padded(v, cu_k, case.heads_kv, max_k)
        try:
            with sdpa_kernel(SDPBackend.CUDNN_ATTENTION):
                out = torch.nn.functional.scaled_dot_product_attention(
                    qp, kp, vp, is_causal=case.causal, enable_gqa=case.heads != case.heads_kv
                )
                torch.autograd.grad(out, (qp, kp, vp), dop, retain_graph=True)
        except RuntimeError as err:
            raise NotImplementedError(f"cuDNN SDPA does not run this case: {err}") from err
        return lambda: torch.autograd.grad(out, (qp, kp, vp), dop, retain_graph=True)
    raise ValueError(f"unknown attention backward implementation {impl!r}")


# The references each mode's speed is read against, where they run (FA2, cuDNN): the metric each one gives.
SPEEDUPS = dict(zip(ATTENTION_REFERENCES, ("speedup_vs_fa2", "speedup_vs_cudnn"), strict=True))


def attention_metrics(case: AttentionCase, modes: list[str]) -> dict[str, dict[str, float]]:
    """Per accumulation mode: TFLOP/s, % of the bf16 matmul peak and the speedups over torch's varlen
    FA2 backward, where it runs (d_qk == d_v), and over cuDNN SDPA's on the padded batch."""
    fns = {mode: warmed(attention_backward_workload(case, mode)) for mode in modes}
    for reference in SPEEDUPS:
        with contextlib.suppress(NotImplementedError):
            fns[reference] = warmed(attention_backward_workload(case, reference))
    fns["matmul"], matmul_flops = timing.matmul()
    t = timing.interleaved_ms(fns)
    flops = case.flops_backward()
    metrics = {}
    for mode in modes:
        m = {
            "tflops": timing.tflops(flops, statistics.median(t[mode])),
            "pct_matmul_peak": timing.pct_of_reference(flops, matmul_flops, t["matmul"], t[mode]),
        }
        for reference, name in SPEEDUPS.items():
            if reference in t:
                m[name] = timing.median_ratio(t[reference], t[mode])
        metrics[mode] = m
    return metrics


# --- the suite: what the harness drives (kernelgate.suite) ---------------------------------------------


def timed(config: str, impl: str) -> Callable[[], None]:
    """What ``AttentionBackward.time_backward`` samples: the backward alone, back to back (timing.sample_clock;
    the long configs take fewer calls a sample, timing.sample_calls). Each backward reads and writes ~100 MB or
    more: far past L2, no rotation needed."""
    case = BENCH_CONFIGS[config]
    return timing.back_to_back(
        warmed(attention_backward_workload(case, impl)), tflop_per_call=case.flops_backward() / 1e12
    )


def measure(
    config: str, variants: list[str], metrics: set[str] | None = None, stored: dict[str, float] | None = None
) -> dict[str, dict[str, float]]:
    """Every mode and every metric, whichever are asked for: each is read beside the others, the references
    (FA2, cuDNN, the matmul) timed every time, never ``stored``."""
    return attention_metrics(BENCH_CONFIGS[config], list(ACCUM_MODES))


def workload(config: str, impl: str) -> Callable[[], object]:
    return attention_backward_workload(BENCH_CONFIGS[config], impl)


# An attention backward takes about 3 s plus 0.18 s per TFLOP of work in one of its samples
# (timing.sample_calls) to measure: 60 s a mode at 8k + 16k tokens in samples of 50 calls.
TIME_CASE_S, TIME_CASE_S_PER_SAMPLE_TFLOP = 3.0, 0.18


def seconds(case: Case) -> float | None:
    """A time case's seconds to measure; None for a metrics unit, and for a config this code does not know (the
    measured commit's suite may declare others): the averages."""
    config = BENCH_CONFIGS.get(case.values[0]) if case.kind == "time" and case.params else None
    if config is None:
        return None
    tflop = config.flops_backward() / 1e12
    return TIME_CASE_S + TIME_CASE_S_PER_SAMPLE_TFLOP * tflop * timing.sample_calls(tflop)


METRICS = (
    Metric("speedup_vs_fa2", "x", "vs FA2", baseline=True),
    # Over cuDNN SDPA's backward on the batch padded to its longest sequence, timed in the same rounds.
    Metric("speedup_vs_cudnn", "x", "vs cuDNN"),
    Metric("tflops", "TFLOP/s", "TFLOP/s"),
    # Achieved TFLOP/s over a bf16 8192^3 matmul's, measured interleaved.
    Metric("pct_matmul_peak", "%", "% peak"),
)

NOTES = """\
- vs FA2, vs cuDNN: speedup over torch's varlen_attn (FA2) and cuDNN SDPA on the batch padded to its longest
  sequence = the ratio of their times, measured interleaved in one process.
- TFLOP/s and % peak: FLOP rate of the backward, and its % of a bf16 8192^3 matmul's, measured interleaved
  with it."""

# The three accumulation modes against torch's varlen_attn (FA2) and cuDNN SDPA: the backward alone, on
# saved forward outputs (Delta, the main kernel and the casts); ours on the packed varlen batch (no
# pad/unpad), cuDNN on the batch padded to its longest sequence.
BACKWARD = Grid(
    name="AttentionBackward",
    time_method="time_backward",
    params={"config": list(BENCH_CONFIGS)},
    variants=list(ACCUM_MODES),
    references=ATTENTION_REFERENCES,
    variant_name="accum",
    timed=timed,
    measure=measure,
    metrics=METRICS,
    label="attention_bwd",
    repeat=(10, 20, 2.0),
)

SUITE = Suite(
    name="attention",
    title="Attention",
    grids=(BACKWARD,),
    workload=workload,
    seconds=seconds,
    notes=NOTES,
)
