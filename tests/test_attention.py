"""TileLang GQA varlen attention against the float32 reference.

The kernels have no CPU interpreter: the ``gpu`` tests need a CUDA device
(``cuda_device`` skips loudly without one, fails under --require-gpu). Outputs
are poisoned with NaN before the kernels write, so a row a kernel skips fails.
The bad-input tests run anywhere: every check happens on the host before any
device work, so CPU tensors reach the same errors.
"""

import itertools
import math
import re

import pytest
import torch

from kernelgate.cases.attention import CORRECTNESS_CASES, AttentionCase, rel_l2
from kernelgate.kernels.attention import ACCUM_MODES, flash_attn_varlen_func
from kernelgate.kernels.attention.ops import (
    TMA_MIN_CAPABILITY,
    attention_backward,
    attention_forward,
    check_capability,
    check_inputs,
)
from kernelgate.kernels.attention.reference import attention_varlen_ref

# Tests that build the same kernels share a ``compiles`` marker: tests/conftest.py runs them together.
EMPTY_BATCH = AttentionCase(6, 2, 128, 128, causal=True, lengths_q=(0, 0))
SINGLE_TOKENS = AttentionCase(6, 2, 128, 128, causal=True, lengths_q=(1, 1, 1))


def compiling(case: AttentionCase, kernels: str):
    return pytest.mark.compiles(case.kernel_shape, kernels)


def cases(chosen: list[AttentionCase], kernels: str) -> list:
    return [pytest.param(c, id=c.name, marks=compiling(c, kernels)) for c in chosen]


def cases_by_mode(chosen: list[AttentionCase]) -> list:
    """(case, accum) pairs, each marked with the backward kernel it builds."""
    return [pytest.param(c, a, id=f"{c.name}-{a}", marks=compiling(c, a)) for c in chosen for a in ACCUM_MODES]


def check_close(name: str, got: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    assert got.shape == ref.shape, f"{name}: shape {tuple(got.shape)} != {tuple(ref.shape)}"
    err = rel_l2(got, ref)
    print(f"{name}: rel L2 error {err:.2e} (tolerance {tol:.0e})")
    assert err <= tol, f"{name}: rel L2 error {err:.3e} > {tol:.0e}"


def check_lse(got: torch.Tensor, ref: torch.Tensor, tol: float) -> None:
    """+inf (a query that sees no key) must match exactly; finite values within ``tol``."""
    no_key = torch.isinf(ref)
    assert torch.equal(torch.isposinf(got), no_key), "lse: +inf (no visible key) at the wrong rows"
    check_close("lse", got[~no_key], ref[~no_key], tol)


def poisoned(*like: torch.Tensor) -> tuple[torch.Tensor, ...]:
    return tuple(torch.full_like(t, float("nan")) for t in like)


def fastest_accum(device: torch.device) -> str:
    return "tma" if torch.cuda.get_device_capability(device) >= TMA_MIN_CAPABILITY else "region"


def skip_unless_supported(accum: str, device: torch.device) -> None:
    if accum == "tma" and torch.cuda.get_device_capability(device) < TMA_MIN_CAPABILITY:
        pytest.skip("accum='tma' needs an sm_90 or newer GPU")


def run_forward(case: AttentionCase, x: dict):
    check_inputs(
        x["q"], x["k"], x["v"], x["cu_seqlens_q"], x["cu_seqlens_k"], x["max_seqlen_q"], x["max_seqlen_k"],
        case.causal, None, "region",
    )  # fmt: skip
    total_q = x["q"].shape[0]
    out = poisoned(x["do"], torch.empty(case.heads, total_q, dtype=torch.float32, device=x["q"].device))
    return attention_forward(
        x["q"], x["k"], x["v"], x["cu_seqlens_q"], x["cu_seqlens_k"], x["max_seqlen_q"], case.causal, out=out
    )


def run_backward(case: AttentionCase, x: dict, o, lse, accum: str):
    return attention_backward(
        x["do"], x["q"], x["k"], x["v"], o, lse, x["cu_seqlens_q"], x["cu_seqlens_k"], x["max_seqlen_q"],
        x["max_seqlen_k"], case.causal, accum=accum, out=poisoned(x["q"], x["k"], x["v"]),
    )  # fmt: skip


def reference(case: AttentionCase, x: dict) -> dict:
    return attention_varlen_ref(x["q"], x["k"], x["v"], x["cu_seqlens_q"], x["cu_seqlens_k"], case.causal, do=x["do"])


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases(CORRECTNESS_CASES, "forward"))
def test_forward_matches_float32_reference(case, cuda_device):
    x = case.make_inputs(cuda_device)
    o, lse = run_forward(case, x)
    ref = reference(case, x)
    check_close("o", o, ref["o"], case.tolerance("o"))
    check_lse(lse, ref["lse"], case.tolerance("lse"))


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "accum"), cases_by_mode(CORRECTNESS_CASES))
def test_backward_matches_float32_reference(case, accum, cuda_device):
    skip_unless_supported(accum, cuda_device)
    x = case.make_inputs(cuda_device)
    o, lse = run_forward(case, x)
    grads = run_backward(case, x, o, lse, accum)
    ref = reference(case, x)
    for name, got in zip(("dq", "dk", "dv"), grads, strict=True):
        check_close(name, got, ref[name], case.tolerance(name))


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases(CORRECTNESS_CASES[:2] + CORRECTNESS_CASES[-1:], "every mode"))
def test_accumulation_modes_agree_within_atomic_rounding(case, cuda_device):
    """Same inputs, three ways of summing float32 tiles: only the order of the adds differs
    (float32 rounding, ~1e-6 of the partial sums), so after the cast to the output dtype
    each element is equal or one ulp apart."""
    modes = ["elem", "region"] + (["tma"] if fastest_accum(cuda_device) == "tma" else [])
    x = case.make_inputs(cuda_device)
    o, lse = run_forward(case, x)
    results = {accum: run_backward(case, x, o, lse, accum) for accum in modes}
    ulp = torch.finfo(case.torch_dtype).eps
    first = results[modes[0]]
    for accum in modes[1:]:
        for name, a, b in zip(("dq", "dk", "dv"), first, results[accum], strict=True):
            scale = a.float().abs().max().item()
            torch.testing.assert_close(
                b.float(), a.float(), rtol=ulp, atol=1e-5 * scale, msg=lambda m, n=name, c=accum: f"{n} {c}: {m}"
            )


@pytest.mark.gpu
@pytest.mark.parametrize("case", cases([CORRECTNESS_CASES[0], CORRECTNESS_CASES[4]], "autograd"))
def test_autograd_matches_sdpa_per_sequence(case, cuda_device):
    """The public function through autograd against torch's SDPA run in float32, one sequence
    at a time: an oracle independent of this repo's reference. q, k, v are non-contiguous
    views of one packed tensor, as a fused QKV projection gives them."""
    x = case.make_inputs(cuda_device)
    q, k, v = x["q"], x["k"], x["v"]
    packed = torch.cat([q.flatten(1), k.flatten(1), v.flatten(1)], dim=1)
    widths = [q[0].numel(), k[0].numel(), v[0].numel()]
    views = [p.view(-1, *t.shape[1:]) for p, t in zip(packed.split(widths, dim=1), (q, k, v), strict=True)]
    leaves = [t.detach().requires_grad_() for t in views]
    assert not leaves[0].is_contiguous()
    o, lse = flash_attn_varlen_func(
        *leaves, x["cu_seqlens_q"], x["cu_seqlens_k"], x["max_seqlen_q"], x["max_seqlen_k"],
        causal=case.causal, accum=fastest_accum(cuda_device), return_lse=True,
    )  # fmt: skip
    o.backward(x["do"])

    ref_leaves = [t.detach().float().requires_grad_() for t in (q, k, v)]
    ref_o = torch.zeros(o.shape, dtype=torch.float32, device=cuda_device)
    for start, end in itertools.pairwise(x["cu_seqlens_q"].tolist()):
        if end == start:
            continue  # an empty sequence: nothing for SDPA to do
        rq, rk, rv = (t[start:end].transpose(0, 1)[None] for t in ref_leaves)  # (1, heads, len, dim)
        out = torch.nn.functional.scaled_dot_product_attention(rq, rk, rv, is_causal=case.causal, enable_gqa=True)
        out = out[0].transpose(0, 1)
        out.backward(x["do"][start:end].float())
        ref_o[start:end] = out.detach()
    assert lse.shape == (case.heads, q.shape[0]) and lse.dtype == torch.float32
    check_close("o", o, ref_o, case.tolerance("o"))
    for name, leaf, ref_leaf in zip(("dq", "dk", "dv"), leaves, ref_leaves, strict=True):
        check_close(name, leaf.grad, ref_leaf.grad, case.tolerance(name))


def run_autograd(case: AttentionCase, x: dict, accum: str):
    leaves = [x[n].detach().requires_grad_() for n in ("q", "k", "v")]
    o = flash_attn_varlen_func(
        *leaves, x["cu_seqlens_q"], x["cu_seqlens_k"], x["max_seqlen_q"], x["max_seqlen_k"], case.causal, accum=accum
    )
    o.backward(x["do"])
    return o, [leaf.grad for leaf in leaves]


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "accum"), cases_by_mode([EMPTY_BATCH]))
def test_a_batch_of_empty_sequences(case, accum, cuda_device):
    skip_unless_supported(accum, cuda_device)
    x = case.make_inputs(cuda_device)
    o, grads = run_autograd(case, x, accum)
    assert o.shape == (0, 6, 128)
    assert [g.shape for g in grads] == [x["q"].shape, x["k"].shape, x["v"].shape]


@pytest.mark.gpu
@pytest.mark.parametrize(("case", "accum"), cases_by_mode([SINGLE_TOKENS]))
def test_single_token_sequences(case, accum, cuda_device):
    """A lone token attends only to itself: o = v of its key/value head, dv sums do over the
    group, and no gradient reaches q or k (softmax over one key is constant)."""
    skip_unless_supported(accum, cuda_device)
    x = case.make_inputs(cuda_device)
    o, (dq, dk, dv) = run_autograd(case, x, accum)
    groups = case.heads // case.heads_kv
    check_close("o", o, x["v"].repeat_interleave(groups, dim=1), case.tolerance("o"))
    check_close("dv", dv, x["do"].float().view(3, case.heads_kv, groups, -1).sum(2), case.tolerance("dv"))
    # Exactly 0 in exact arithmetic; dP - Delta leaves float32 rounding (~1e-6) behind.
    assert dq.abs().max() < 1e-3 and dk.abs().max() < 1e-3


# ----------------------------------------------------------------------------- bad inputs (no GPU needed)


def cpu_inputs(lengths=(3, 0, 5), heads=4, heads_kv=2, dim_qk=128, dim_v=128, dtype=torch.float16) -> dict:
    """Valid CPU arguments that a test then breaks one way."""
    total = sum(lengths)
    cu = torch.tensor([0, *torch.tensor(lengths).cumsum(0).tolist()], dtype=torch.int32)
    return {
        "q": torch.randn(total, heads, dim_qk).to(dtype),
        "k": torch.randn(total, heads_kv, dim_qk).to(dtype),
        "v": torch.randn(total, heads_kv, dim_v).to(dtype),
        "cu_seqlens_q": cu,
        "cu_seqlens_k": cu.clone(),
        "max_seqlen_q": max(lengths),
        "max_seqlen_k": max(lengths),
    }


def call(**args):
    return flash_attn_varlen_func(**args)


def test_valid_cpu_inputs_with_an_empty_sequence_reach_the_device_check():
    """A zero-length sequence is fine: the only complaint about these CPU tensors is the device."""
    with pytest.raises(ValueError, match="q is on cpu; the TileLang kernels need a CUDA tensor"):
        call(**cpu_inputs(lengths=(3, 0, 5)))


@pytest.mark.parametrize(("heads", "heads_kv"), [(6, 4), (0, 2), (4, 0)])
def test_heads_not_a_multiple_of_kv_heads(heads, heads_kv):
    with pytest.raises(ValueError, match=rf"heads of q \({heads}\) must be a multiple of heads of k/v \({heads_kv}\)"):
        call(**cpu_inputs(heads=heads, heads_kv=heads_kv))


@pytest.mark.parametrize("dtype", [torch.int64, torch.float32])
def test_cu_seqlens_not_int32(dtype):
    args = cpu_inputs()
    args["cu_seqlens_k"] = args["cu_seqlens_k"].to(dtype)
    with pytest.raises(TypeError, match="cu_seqlens_k must be int32"):
        call(**args)


def test_cu_seqlens_not_monotone():
    args = cpu_inputs(lengths=(3, 2, 3))
    args["cu_seqlens_q"] = torch.tensor([0, 3, 2, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seqlens_q must be non-decreasing, but cu_seqlens_q\[2\] = 2"):
        call(**args)


def test_cu_seqlens_not_starting_at_zero():
    args = cpu_inputs(lengths=(3, 5))
    args["cu_seqlens_k"] = torch.tensor([1, 3, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_k must start at 0"):
        call(**args)


def test_cu_seqlens_last_value_is_not_the_token_count():
    args = cpu_inputs(lengths=(3, 5))
    args["cu_seqlens_q"] = torch.tensor([0, 3, 7], dtype=torch.int32)
    with pytest.raises(ValueError, match=r"cu_seqlens_q\[-1\] = 7 must equal the number of tokens \(8\)"):
        call(**args)


def test_cu_seqlens_of_different_batch_sizes():
    args = cpu_inputs(lengths=(3, 5))
    args["cu_seqlens_k"] = torch.tensor([0, 8], dtype=torch.int32)
    with pytest.raises(ValueError, match="cu_seqlens_q has 3 entries but cu_seqlens_k has 2"):
        call(**args)


@pytest.mark.parametrize("which", ["max_seqlen_q", "max_seqlen_k"])
def test_max_seqlen_smaller_than_a_sequence(which):
    args = cpu_inputs(lengths=(3, 0, 5))
    args[which] = 4
    with pytest.raises(ValueError, match=rf"{which} = 4 is smaller than the longest sequence \(5\)"):
        call(**args)


@pytest.mark.parametrize(("dim_qk", "dim_v"), [(96, 96), (256, 256), (128, 64), (192, 192)])
def test_unsupported_head_dims(dim_qk, dim_v):
    with pytest.raises(ValueError, match=rf"head dims \(dim_qk={dim_qk}, dim_v={dim_v}\) are not supported"):
        call(**cpu_inputs(dim_qk=dim_qk, dim_v=dim_v))


@pytest.mark.parametrize("dtype", [torch.float32, torch.float64, torch.float8_e4m3fn])
def test_unsupported_dtype(dtype):
    with pytest.raises(TypeError, match=re.escape(f"q has dtype {dtype}; supported: float16, bfloat16")):
        call(**cpu_inputs(dtype=dtype))


def test_mixed_dtypes():
    args = cpu_inputs()
    args["v"] = args["v"].to(torch.bfloat16)
    with pytest.raises(TypeError, match=r"v has dtype torch\.bfloat16 but q has torch\.float16"):
        call(**args)


def test_unknown_accumulation_mode():
    with pytest.raises(ValueError, match=r"accum must be one of \('elem', 'region', 'tma'\), got 'atomic'"):
        call(**cpu_inputs(), accum="atomic")


@pytest.mark.parametrize("scale", [0.0, -1.0, math.inf, math.nan, "0.1", True])
def test_bad_softmax_scale(scale):
    with pytest.raises(ValueError, match="softmax_scale must be a finite positive number"):
        call(**cpu_inputs(), softmax_scale=scale)


def test_tma_needs_sm90():
    with pytest.raises(ValueError, match=r"accum='tma' needs TMA reductions \(sm_90 or newer\), got sm_80"):
        check_capability("tma", (8, 0))
    with pytest.raises(ValueError, match="needs an sm_80 or newer GPU, got sm_75"):
        check_capability("region", (7, 5))
    for accum in ACCUM_MODES:
        check_capability(accum, (9, 0))  # H100 / H200: all modes
    check_capability("region", (8, 6))
    check_capability("elem", (8, 0))


def test_the_cases_name_the_kernels_accumulation_modes():
    """The cases module declares them without importing the kernels (TileLang): the same, in the same order."""
    from kernelgate.cases import attention

    assert attention.ACCUM_MODES == ACCUM_MODES
