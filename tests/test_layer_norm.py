"""LayerNorm kernels against a float64 reference, forward and backward.

Runs twice under ``nox -s tests``: compiled on a GPU (full shapes) and in
Triton's interpreter (same N, at most INTERPRETER_MAX_ROWS rows).
"""

import dataclasses
import math

import pytest
import torch

from kernelgate import kernels
from kernelgate.accuracy import errors, run_layer_norm
from kernelgate.cases.layer_norm import CORRECTNESS_CASES, LAYER_NORM_VARIANTS, LayerNormCase, interpreted
from kernelgate.kernels.device import interpreter_mode
from kernelgate.kernels.launch import bound
from kernelgate.kernels.layer_norm.config import (
    FUSED_MAX_N,
    cdiv,
    fused_tail_n,
    heuristic_config,
    next_power_of_2,
    persistent_programs,
    prev_power_of_2,
)
from kernelgate.kernels.layer_norm.ops import (
    _rows,
    _sms,
    backward_key,
    backward_launch,
    column_sum_launch,
    forward_key,
    forward_launch,
    gpu_of,
    layer_norm_bwd,
    layer_norm_fwd,
    pdl_of,
    row_words,
    select_variant,
)
from kernelgate.kernels.layer_norm.reference import layer_norm_ref

pytestmark = pytest.mark.kernel


def _kernel_cases():
    for case in CORRECTNESS_CASES:
        for variant in LAYER_NORM_VARIANTS:
            if variant == "fused" and case.n > FUSED_MAX_N:
                continue  # refused by design: test_fused_refuses_rows_past_its_limit
            yield pytest.param(case, variant, id=f"{variant}-{case.name}")


def _sized(case: LayerNormCase) -> LayerNormCase:
    return interpreted(case) if interpreter_mode() else case


def _assert_matches_reference(case: LayerNormCase, results: dict) -> None:
    for quantity, (got, ref) in results.items():
        atol, rtol = case.tolerance(quantity)
        abs_err, _ = errors(got, ref)
        print(f"{quantity}: max abs error {abs_err:.3e} (atol {atol:.1e}, rtol {rtol:.1e})")
        torch.testing.assert_close(got.double(), ref, atol=atol, rtol=rtol, msg=lambda m, q=quantity: f"{q}: {m}")


@pytest.mark.parametrize(("case", "variant"), list(_kernel_cases()))
def test_kernel_matches_float64_reference(case, variant, kernel_device):
    case = _sized(case)
    _assert_matches_reference(case, run_layer_norm(case, variant, kernel_device))


@pytest.mark.parametrize("tile", ["whole row", "two pieces"])
@pytest.mark.parametrize("n", [5000, 3000, 2049, 4097])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_tile_whole_or_in_two_pieces(tile, n, dtype, kernel_device):
    """Both tiles the fused kernels can take for a non-power-of-two row, whichever the
    launcher would pick: N rounded up to a power of two, or a power-of-two first piece
    and a tail piece (fused_tail_n; 4097 = 4096 + 1, a tail of one column)."""
    case = _sized(LayerNormCase(37, n, dtype, offset=1e3))
    block_n = next_power_of_2(n) if tile == "whole row" else prev_power_of_2(n)
    assert (fused_tail_n(n, block_n) > 0) == (tile == "two pieces")
    cfgs = {
        d: dataclasses.replace(heuristic_config("fused", d, case.torch_dtype, n), block_n=block_n)
        for d in ("fwd", "bwd")
    }
    _assert_matches_reference(case, run_layer_norm(case, "fused", kernel_device, cfgs))


def _forward_options():
    for dtype in ("float32", "bfloat16", "float16"):
        for preload_affine in (False, True):
            for single_reduction in (False, True) if dtype != "float32" else (False,):
                name = f"{dtype}-preload{int(preload_affine)}-single{int(single_reduction)}"
                yield pytest.param(dtype, preload_affine, single_reduction, id=name)


@pytest.mark.parametrize("n", [4096, 5000])
@pytest.mark.parametrize(("dtype", "preload_affine", "single_reduction"), list(_forward_options()))
def test_fused_forward_options(dtype, preload_affine, single_reduction, n, kernel_device):
    """The fused forward's tunable options on large-mean rows, where a variance from the sum of
    squares cancels the most; 5000 also takes the tail piece (4096 + 1024)."""
    case = _sized(LayerNormCase(37, n, dtype, offset=1e3))
    cfg = dataclasses.replace(
        heuristic_config("fused", "fwd", case.torch_dtype, n),
        preload_affine=preload_affine,
        single_reduction=single_reduction,
    )
    _assert_matches_reference(case, run_layer_norm(case, "fused", kernel_device, {"fwd": cfg}))


@pytest.mark.parametrize("prefetch_per_sm", [1e-6, 0.25, 1, 5, 50])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_forward_prefetch_is_only_a_hint(dtype, prefetch_per_sm, cuda_device):
    """Pulling later programs' rows into L2 changes no output bit: rows of 5000 (head and tail
    piece), an odd M, distances that stay within the grid (a quarter of a wave: that many rows,
    rounded down; a sliver of one: the next row), leave it for its last programs, or reach past
    every row. Rows that are not 16-byte aligned are not prefetched."""
    case = LayerNormCase(1001, 5000, dtype, offset=1e3)
    x, w, b = case.make_inputs(cuda_device)
    plain = heuristic_config("fused", "fwd", case.torch_dtype, case.n)
    cfg = dataclasses.replace(plain, prefetch_per_sm=prefetch_per_sm)
    poisoned = torch.full_like(x, float("nan"))
    rows_ahead = max(1, math.floor(prefetch_per_sm * _sms(x) * cfg.block_m))
    assert forward_launch(x, w, b, case.eps, "fused", poisoned, None, None, cfg).arguments["prefetch_rows"] == (
        rows_ahead
    ), "the launch does not prefetch"
    y_plain, _, _ = layer_norm_fwd(x, w, b, case.eps, "fused", cfg=plain, stats=False)
    y, _, _ = layer_norm_fwd(x, w, b, case.eps, "fused", out=(poisoned, None, None), cfg=cfg)
    assert torch.equal(y, y_plain)
    y_ref = layer_norm_ref(x, w, b, case.eps, torch.randn_like(x))[0]
    atol, rtol = case.tolerance("y")
    torch.testing.assert_close(y.double(), y_ref, atol=atol, rtol=rtol)

    shifted = torch.empty(case.m * case.n + 1, dtype=x.dtype, device=cuda_device)[1:].view_as(x).copy_(x)
    assert forward_launch(shifted, w, b, case.eps, "fused", poisoned, None, None, cfg).arguments["prefetch_rows"] == 0
    y_shifted, _, _ = layer_norm_fwd(
        shifted, w, b, case.eps, "fused", out=(torch.full_like(x, float("nan")), None, None), cfg=cfg
    )
    torch.testing.assert_close(y_shifted.double(), y_ref, atol=atol, rtol=rtol)


@pytest.mark.parametrize("prefetch_per_sm", [1, 5, 50])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_fused_backward_prefetch_is_only_a_hint(dtype, prefetch_per_sm, cuda_device):
    """The persistent backward's L2 prefetch of later row blocks' x and dy changes no bit of dx, dw
    or db: rows of 5000, an odd M, distances within the rows and past them. Rows that are not
    16-byte aligned are not prefetched."""
    case = LayerNormCase(1001, 5000, dtype, offset=1e3)
    x, w, b = case.make_inputs(cuda_device)
    dy = torch.randn_like(x)
    _, mean, rstd = layer_norm_fwd(x, w, b, case.eps, "fused")
    plain = heuristic_config("fused", "bwd", case.torch_dtype, case.n)
    cfg = dataclasses.replace(plain, prefetch_per_sm=prefetch_per_sm)

    def backward(x, dy, cfg):
        poisoned = tuple(torch.full_like(t, float("nan")) for t in (x, w, b))
        return layer_norm_bwd(dy, x, w, b, mean, rstd, "fused", out=poisoned, cfg=cfg)

    def prefetch_rows(x, dy):
        return backward_launch(dy, x, w, b, mean, rstd, "fused", torch.empty_like(x), cfg)[0].arguments["prefetch_rows"]

    assert prefetch_rows(x, dy) == prefetch_per_sm * _sms(x) * cfg.block_m, "the launch does not prefetch"
    grads = backward(x, dy, cfg)
    for name, got, expected in zip(("dx", "dw", "db"), grads, backward(x, dy, plain), strict=True):
        assert torch.equal(got, expected), name
    refs = layer_norm_ref(x, w, b, case.eps, dy)[1:4]

    def assert_matches_reference(grads):
        _assert_matches_reference(case, dict(zip(("dx", "dw", "db"), zip(grads, refs, strict=True), strict=True)))

    assert_matches_reference(grads)
    shifted_x, shifted_dy = (
        torch.empty(case.m * case.n + 1, dtype=t.dtype, device=cuda_device)[1:].view_as(t).copy_(t) for t in (x, dy)
    )
    assert prefetch_rows(shifted_x, shifted_dy) == 0
    assert_matches_reference(backward(shifted_x, shifted_dy, cfg))


@pytest.mark.parametrize("tile", ["whole row", "two pieces"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_fused_backward_single_reduction(dtype, tile, kernel_device):
    """c1's and c2's row sums in one reduction, on large-mean rows of 5000: whole (8192 lanes,
    39% masked, which must add nothing) or in two pieces (4096 + 1024)."""
    n = 5000
    case = _sized(LayerNormCase(37, n, dtype, offset=1e3))
    cfg = dataclasses.replace(
        heuristic_config("fused", "bwd", case.torch_dtype, n),
        block_n=next_power_of_2(n) if tile == "whole row" else prev_power_of_2(n),
        single_reduction=True,
    )
    _assert_matches_reference(case, run_layer_norm(case, "fused", kernel_device, {"bwd": cfg}))


@pytest.mark.parametrize(
    ("blocks", "resident", "full", "balanced"),
    [(2048, 132, 132, 128), (1024, 264, 264, 256), (101, 33, 33, 26), (264, 264, 264, 264), (5, 132, 5, 5)],
)
def test_balanced_grid_is_the_fewest_programs_for_as_many_steps(blocks, resident, full, balanced):
    assert persistent_programs(blocks, resident, balanced=False) == full
    assert persistent_programs(blocks, resident, balanced=True) == balanced
    assert cdiv(blocks, balanced) == cdiv(blocks, full)


@pytest.mark.parametrize("balanced", [False, True])
@pytest.mark.parametrize("variant", ["fused", "two_pass"])
def test_backward_on_a_balanced_grid(variant, balanced, kernel_device):
    """The persistent backward on fewer programs than it may have resident (balanced_grid), and on
    all of them: each program's partial sums of dw and db cover its row blocks, no more, no less."""
    case = _sized(LayerNormCase(265, 1000, "float32", offset=1e3))
    x = torch.empty(0, device=kernel_device)
    cfg = dataclasses.replace(heuristic_config(variant, "bwd", case.torch_dtype, case.n), block_m=1)
    # A grid size where balancing takes fewer programs, on this device's SM count.
    per_sm = next(p for p in range(1, 9) if persistent_programs(case.m, _sms(x) * p, True) < min(case.m, _sms(x) * p))
    cfg = dataclasses.replace(cfg, programs_per_sm=per_sm, balanced_grid=balanced)
    _assert_matches_reference(case, run_layer_norm(case, variant, kernel_device, {"bwd": cfg}))


@pytest.mark.parametrize("variant", ["fused", "two_pass"])
def test_backward_writes_every_partial_sum_before_reading_it(variant, kernel_device):
    """The partial-sum buffer is not zeroed: NaN left in it must not reach dw or db. Each of the
    persistent programs takes several row blocks (one row each), so the first writes its rows
    and the later ones add to them."""
    x = torch.empty(0, device=kernel_device)
    case = LayerNormCase(3 * _sms(x) + 1, 300, "float32")
    x, w, b = case.make_inputs(kernel_device)
    dy = torch.randn_like(x)
    _, mean, rstd = layer_norm_fwd(x, w, b, case.eps, "two_pass")
    cfg = dataclasses.replace(heuristic_config(variant, "bwd", x.dtype, case.n), block_m=1, programs_per_sm=1)
    dx = torch.full_like(x, float("nan"))
    launch, partial = backward_launch(dy, x, w, b, mean, rstd, variant, dx, cfg)
    assert launch.grid[0] < case.m  # several row blocks a program
    partial.fill_(float("nan"))
    launch()
    dw, db = torch.full_like(w, float("nan")), torch.full_like(b, float("nan"))
    column_sum_launch(partial, launch.grid[0], [dw, db])()
    _, dx_ref, dw_ref, db_ref, _, _ = layer_norm_ref(x, w, b, case.eps, dy)
    _assert_matches_reference(case, {"dx": (dx, dx_ref), "dw": (dw, dw_ref), "db": (db, db_ref)})


@pytest.mark.parametrize("affine", ["weight and bias", "weight", "bias", "neither"])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_two_pass_backward_with_column_grads(affine, dtype, kernel_device):
    """The row kernel writes dx alone and the column kernel sums dw and db from x and dy: rows and
    columns no multiple of its 64 x 64 tile, a large mean, and either parameter absent."""
    case = _sized(LayerNormCase(67, 1000, dtype, offset=1e3))
    x, w, b = case.make_inputs(kernel_device)
    w, b = (w if "weight" in affine else None), (b if "bias" in affine else None)
    dy = torch.randn_like(x)
    _, mean, rstd = layer_norm_fwd(x, w, b, case.eps, "two_pass")
    cfg = dataclasses.replace(heuristic_config("two_pass", "bwd", x.dtype, case.n), column_grads=True)
    out = [None if t is None else torch.full_like(t, float("nan")) for t in (x, w, b)]
    dx, dw, db = layer_norm_bwd(dy, x, w, b, mean, rstd, "two_pass", out, cfg)
    _, dx_ref, dw_ref, db_ref, _, _ = layer_norm_ref(x, w, b, case.eps, dy)
    results = {"dx": (dx, dx_ref), "dw": (dw, dw_ref), "db": (db, db_ref)}
    _assert_matches_reference(case, {q: pair for q, pair in results.items() if pair[1] is not None})
    assert (dw is None) == (w is None) and (db is None) == (b is None)


def test_column_grads_is_refused_for_the_fused_backward():
    x = torch.empty(4, 64)
    cfg = dataclasses.replace(heuristic_config("fused", "bwd", x.dtype, 64), column_grads=True)
    with pytest.raises(ValueError, match="column_grads, which only the two_pass backward has"):
        backward_launch(x, x, None, None, x[:, 0], x[:, 0], "fused", x, cfg)


def test_single_reduction_is_refused_for_float32():
    x = torch.randn(4, 64)
    cfg = dataclasses.replace(heuristic_config("fused", "fwd", x.dtype, 64), single_reduction=True)
    with pytest.raises(ValueError, match=r"single_reduction.*16-bit"):
        layer_norm_fwd(x, None, None, 1e-5, "fused", cfg=cfg)


def _ref_autograd(x, normalized_shape, weight, bias, eps, dy):
    leaves = [t.detach().double().requires_grad_() if t is not None else None for t in (x, weight, bias)]
    y = torch.nn.functional.layer_norm(leaves[0], normalized_shape, leaves[1], leaves[2], eps)
    y.backward(dy.double())
    return y, [t.grad if t is not None else None for t in leaves]


def _assert_close_at_scale(got, ref, tol_case, quantity, what, scaled=False):
    """``got`` against the float64 ``ref`` at the case's tolerance for ``quantity``; ``scaled``:
    the absolute tolerance grows with ref's largest value, for data far from unit scale (fp32's
    rounding is relative, and 1e-5 is under 3 ulp past |x| = 40)."""
    atol, rtol = tol_case.tolerance(quantity)
    scale = max(1.0, ref.abs().max().item()) if scaled else 1.0
    torch.testing.assert_close(got.double(), ref, atol=atol * scale, rtol=rtol, msg=lambda m: f"{what}: {m}")


def _check_autograd(x, normalized_shape, weight, bias, variant, tol_case, scaled=False):
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, weight, bias)]
    y = kernels.layer_norm(leaves[0], normalized_shape, leaves[1], leaves[2], 1e-5, variant)
    dy = torch.randn_like(y)
    y.backward(dy)
    y_ref, grads_ref = _ref_autograd(x, normalized_shape, weight, bias, 1e-5, dy)
    assert y.shape == x.shape and y.dtype == x.dtype
    _assert_close_at_scale(y, y_ref, tol_case, "y", "y", scaled)
    for name, leaf, ref in zip(("dx", "dw", "db"), leaves, grads_ref, strict=True):
        if leaf is not None:
            _assert_close_at_scale(leaf.grad, ref, tol_case, name, name, scaled)


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_autograd_any_leading_shape_and_strided_rows(variant, dtype, kernel_device):
    case = LayerNormCase(2 * 5, 300, dtype)
    x, w, b = case.make_inputs(kernel_device)
    base = torch.randn(2, 5, 2 * case.n, device=kernel_device).to(case.torch_dtype)
    strided_rows = base[..., : case.n]  # row stride 2N: read in place
    transposed = x.view(2, 5, case.n).transpose(0, 1)  # leading dims permuted: copied
    for inp in (x.view(2, 5, case.n), strided_rows, transposed):
        _check_autograd(inp, (case.n,), w, b, variant, case)


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
def test_module_is_a_drop_in_for_torch_layer_norm(variant, kernel_device):
    torch_ln = torch.nn.LayerNorm((4, 24), eps=1e-6, device=kernel_device)
    with torch.no_grad():
        torch_ln.weight.normal_()
        torch_ln.bias.normal_()
    ours = kernels.LayerNorm((4, 24), eps=1e-6, device=kernel_device, variant=variant)
    ours.load_state_dict(torch_ln.state_dict())
    assert ours.state_dict().keys() == torch_ln.state_dict().keys()
    x = torch.randn(3, 7, 4, 24, device=kernel_device)
    torch.testing.assert_close(ours(x), torch_ln(x), atol=1e-5, rtol=0)

    for kwargs in ({"elementwise_affine": False}, {"bias": False}):
        plain = torch.nn.LayerNorm(24, device=kernel_device, **kwargs)
        mine = kernels.LayerNorm(24, device=kernel_device, variant=variant, **kwargs)
        assert [n for n, _ in mine.named_parameters()] == [n for n, _ in plain.named_parameters()]
        x = torch.randn(5, 24, device=kernel_device, requires_grad=True)
        mine(x).sum().backward()
        torch.testing.assert_close(mine(x), plain(x), atol=1e-5, rtol=0)
        assert torch.isfinite(x.grad).all()


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
def test_zero_rows_give_empty_output(variant, kernel_device):
    x = torch.randn(0, 64, device=kernel_device, requires_grad=True)
    w = torch.randn(64, device=kernel_device, requires_grad=True)
    b = torch.randn(64, device=kernel_device, requires_grad=True)
    y = kernels.layer_norm(x, 64, w, b, variant=variant)
    assert y.shape == (0, 64)
    y.sum().backward()
    assert x.grad.shape == (0, 64)
    assert torch.equal(w.grad, torch.zeros_like(w)) and torch.equal(b.grad, torch.zeros_like(b))


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_inference_forward_is_the_training_forward_without_statistics(variant, dtype, kernel_device):
    """No grad needed: mean and rstd are neither allocated nor stored, y is bit for bit the same."""
    case = LayerNormCase(7, 300, dtype, offset=1e3)
    x, w, b = case.make_inputs(kernel_device)
    fwd = select_variant(variant, "fwd", x.dtype, case.n, gpu_of(x))
    y_train, mean, rstd = layer_norm_fwd(x, w, b, case.eps, fwd)
    y_inference, *no_stats = layer_norm_fwd(x, w, b, case.eps, fwd, out=(torch.full_like(x, float("nan")), None, None))
    assert no_stats == [None, None] and mean is not None and rstd is not None
    assert torch.equal(y_inference, y_train)
    assert torch.equal(kernels.layer_norm(x, case.n, w, b, case.eps, variant), y_train)


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
def test_nan_and_inf_propagate_like_torch(variant, kernel_device):
    x = torch.randn(4, 96, device=kernel_device)
    x[1, 7] = float("nan")
    x[2, 3] = float("inf")
    w = torch.randn(96, device=kernel_device)
    b = torch.randn(96, device=kernel_device)
    ours = kernels.layer_norm(x, 96, w, b, variant=variant)
    ref = torch.nn.functional.layer_norm(x, (96,), w, b)
    assert torch.equal(torch.isnan(ours), torch.isnan(ref))
    assert torch.isnan(ours[1]).all() and torch.isnan(ours[2]).all()
    torch.testing.assert_close(ours[[0, 3]], ref[[0, 3]], atol=1e-5, rtol=0)


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_constant_rows_near_the_largest_float(variant, dtype, kernel_device):
    """Rows of one value, 2**120 (a power of two, so float64's mean is exact too): var = 0, rstd =
    1/sqrt(eps), xhat = 0 and every gradient finite. N = 5000 leaves masked lanes in the fused
    backward's whole-row tile, where x loads as 0: their (0 - mean) * rstd overflows to -inf, and
    would turn a row sum into NaN if it were summed."""
    case = _sized(LayerNormCase(37, 5000, dtype))  # an odd number of rows either way
    x = torch.full((case.m, case.n), 2.0**120, device=kernel_device).to(case.torch_dtype)
    _, w, b = case.make_inputs(kernel_device)
    _check_autograd(x, (case.n,), w, b, variant, case, scaled=True)  # dx = rstd * (...): |dx| ~ 1e3


CHAIN_DEPTH = 4


def _chain(x, w, b, dy, variant):
    """CHAIN_DEPTH LayerNorms, each normalizing the previous one's output, and the backward
    through them: (each layer's input, its output, the gradient reaching its input)."""
    ins, outs = [], []
    h = x
    for _ in range(CHAIN_DEPTH):
        ins.append(h)
        h = kernels.layer_norm(h, h.shape[-1], w, b, variant=variant)
        outs.append(h)
    return ins, outs, torch.autograd.grad(h, ins, dy)


def _assert_each_layer_matches_reference(case, w, b, dy, ins, outs, grads):
    # Layer by layer, from our own inputs: a layer that read its input before the previous
    # kernel finished writing it fails here, however small the other layers' errors.
    # The same w scales the same columns in every layer, so values grow along the chain (|y|
    # near 50 by layer 3): the tolerance scales with the layer's largest value. A race is off by
    # the data's own size, far past it.
    for i, (h, y, dh) in enumerate(zip(ins, outs, grads, strict=True)):
        upstream = grads[i + 1] if i + 1 < len(grads) else dy
        y_ref, dx_ref, *_ = layer_norm_ref(h, w, b, case.eps, upstream)
        for name, got, ref in (("y", y, y_ref), ("dx", dh, dx_ref)):
            _assert_close_at_scale(got, ref, case, name, f"layer {i} {name}", scaled=True)


def _chain_case() -> LayerNormCase:
    # Many programs in several waves, so the next kernel could start before the last rows are written.
    return _sized(LayerNormCase(4096, 1024, "float32"))


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
def test_dependent_calls_back_to_back(variant, kernel_device):
    """Each call reads what the one before wrote. On sm_90+ the fused forward and the column sum
    are launched with programmatic dependent launch: they start while their predecessor drains
    and must wait (griddepcontrol.wait) before touching memory."""
    case = _chain_case()
    x, w, b = case.make_inputs(kernel_device, requires_grad=True)
    dy = torch.randn_like(x)
    print(f"programmatic dependent launch: {pdl_of(x)}")
    _assert_each_layer_matches_reference(case, w, b, dy, *_chain(x, w, b, dy, variant))


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
def test_dependent_calls_in_a_cuda_graph(variant, cuda_device):
    """The same chain captured in a CUDA graph, where kernels follow each other with the least
    gap (the benchmarks time calls so), replayed on fresh inputs."""
    case = _chain_case()
    x, w, b = case.make_inputs(cuda_device, requires_grad=True)
    dy = torch.randn_like(x)
    side = torch.cuda.Stream()  # torch's recipe: warm up on a side stream, then capture
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _chain(x, w, b, dy, variant)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _chain(x, w, b, dy, variant)
    # Detached views of the graph's outputs: poisoned and read below without autograd's view checks.
    captured = [[t.detach() for t in tensors] for tensors in captured]
    for fresh in (case.make_inputs(cuda_device) for _ in range(2)):
        with torch.no_grad():
            for static, new in zip((x, w, b), fresh, strict=True):
                static.copy_(new)
            dy.normal_()
            for t in (*captured[1], *captured[2]):
                t.fill_(float("nan"))  # poisoned: an element the replay does not write fails
        graph.replay()
        _assert_each_layer_matches_reference(case, w, b, dy, *captured)


def _differently_specialized_rows(case: LayerNormCase, device) -> dict[str, torch.Tensor]:
    """[M, N] inputs of one shape that Triton compiles differently: 16-byte aligned rows or not, a row
    stride 16 divides or not; and one row. Random values, a large mean."""
    m, n = case.m, case.n
    storage = (torch.randn(m * (n + 8) + 8, device=device) + case.offset).to(case.torch_dtype)
    return {
        "contiguous": storage[: m * n].view(m, n),
        "misaligned": storage[1 : 1 + m * n].view(m, n),
        "row stride N+3": storage[: m * (n + 3)].view(m, n + 3)[:, :n],
        "one row": storage[8 : 8 + n].view(1, n),
    }


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_bound_kernels_are_the_ones_triton_dispatches(variant, dtype, cuda_device):
    """Eager calls launch a compiled kernel bound per launch key (kernels/launch.py), not
    through Triton's dispatch. Calls alternating between inputs that Triton specializes apart must
    each run the kernel Triton would pick for them, and compute their LayerNorm; so must backwards of
    one forward whose dy is aligned and not (autograd's backward keys its launches on dy's layout)."""
    case = LayerNormCase(33, 1000, dtype, offset=1e2)
    _, w, b = case.make_inputs(cuda_device)
    inputs = _differently_specialized_rows(case, cuda_device)
    for _ in range(2):  # the first round binds, the second launches what was bound
        for name, x in inputs.items():
            x = x.detach().requires_grad_()
            misaligned = torch.randn(x.numel() + 1, device=cuda_device, dtype=x.dtype)[1:].view(x.shape)
            for dy_name, dy in (("dy", torch.randn_like(x)), ("misaligned dy", misaligned)):
                y = kernels.layer_norm(x, case.n, w, b, case.eps, variant)
                (dx,) = torch.autograd.grad(y, x, dy)
                ref_y, ref_dx, *_ = layer_norm_ref(x, w, b, case.eps, dy)
                sized = dataclasses.replace(case, m=x.shape[0])
                for quantity, got, ref in (("y", y, ref_y), ("dx", dx, ref_dx)):
                    atol, rtol = sized.tolerance(quantity)
                    torch.testing.assert_close(
                        got.double(),
                        ref,
                        atol=atol,
                        rtol=rtol,
                        msg=lambda m, q=f"{name}, {dy_name}: {quantity}": f"{q}: {m}",
                    )
    for name, x in inputs.items():
        x2, n = _rows(x, case.n), case.n
        fwd = select_variant(variant, "fwd", x.dtype, n, gpu_of(x))
        y, mean, rstd = (
            torch.empty_like(x2),
            torch.empty(x2.shape[0], device=cuda_device),
            torch.empty(x2.shape[0], device=cuda_device),
        )
        layer_norm_fwd(x2, w, b, case.eps, fwd, out=(y, mean, rstd))
        launch = forward_launch(x2, w, b, case.eps, fwd, y, mean, rstd)
        assert bound(forward_key(x2, w, b, fwd, y, mean, rstd)).compiled is launch(), f"{name}: forward"
        bwd, dx = select_variant(variant, "bwd", x.dtype, n, gpu_of(x)), torch.empty_like(x2)
        layer_norm_bwd(x2, x2, w, b, mean, rstd, bwd, out=(dx, None, None))
        launch, _ = backward_launch(x2, x2, w, b, mean, rstd, bwd, dx)
        assert bound(backward_key(x2, x2, w, b, mean, rstd, bwd, dx)).compiled is launch(), f"{name}: backward"


@pytest.mark.parametrize("variant", LAYER_NORM_VARIANTS)
def test_strided_and_expanded_parameters(variant, kernel_device):
    """torch.nn.functional.layer_norm takes any weight and bias of the normalized shape: a strided
    view (every other element of a longer one) and an expanded scalar (stride 0) read as themselves,
    and their gradients reach the tensors they view."""
    case = LayerNormCase(7, 40, offset=3.0)
    x = case.make_inputs(kernel_device, requires_grad=True)[0]
    every_other = torch.randn(2 * case.n, device=kernel_device).requires_grad_()
    scalar = torch.randn(1, device=kernel_device).requires_grad_()
    w, b = every_other[::2], scalar.expand(case.n)
    dy = torch.randn_like(x)
    y = kernels.layer_norm(x, case.n, w, b, case.eps, variant=variant)
    y.backward(dy)
    y_ref, dx_ref, dw_ref, db_ref, _, _ = layer_norm_ref(x, w, b, case.eps, dy)
    got = {"y": (y, y_ref), "dx": (x.grad, dx_ref), "dw": (every_other.grad[::2], dw_ref)}
    _assert_matches_reference(case, {**got, "db": (scalar.grad, db_ref.sum().reshape(1))})
    assert not every_other.grad[1::2].any(), "the elements between the weight's own get no gradient"


def test_a_second_order_gradient_is_refused(kernel_device):
    """The backward is not differentiable again: through it, a gradient penalty raises instead of
    silently adding nothing."""
    x = torch.randn(3, 8, device=kernel_device, requires_grad=True)
    (dx,) = torch.autograd.grad(kernels.layer_norm(x, 8).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dx.pow(2).sum().backward()


@pytest.mark.parametrize(("n", "slices"), [(8193, 2), (20000, 3), (32768, 4)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("m", [1001, 3])
def test_fused_backward_in_row_slices(m, dtype, n, slices, cuda_device):
    """Rows past 8192 lanes in slices of one program each, which exchange their row sums: the last
    slice of 8193 holds one column; 20000 pads the exchange to four words. Large means, an odd M
    (3: one row a group), outputs poisoned with NaN; two runs give the same bits. 16-bit slices of
    16-byte aligned rows prefetch their slice of a row two steps ahead, which changes no bit."""
    case = LayerNormCase(m, n, dtype, offset=1e3)
    x, w, b = case.make_inputs(cuda_device)
    dy = torch.randn_like(x)
    _, mean, rstd = layer_norm_fwd(x, w, b, case.eps, "fused")
    cfg = heuristic_config("fused", "bwd", case.torch_dtype, n)
    launch, _ = backward_launch(dy, x, w, b, mean, rstd, "fused", torch.empty_like(x), cfg)
    assert launch.constexprs["SLICES"] == slices
    groups = launch.grid[0] // slices
    aligned = n * x.element_size() % 16 == 0  # a bulk prefetch takes whole 16-byte units
    assert launch.arguments["prefetch_rows"] == (2 * groups if dtype == "bfloat16" and aligned else 0)

    def backward(cfg):
        poisoned = tuple(torch.full_like(t, float("nan")) for t in (x, w, b))
        return layer_norm_bwd(dy, x, w, b, mean, rstd, "fused", out=poisoned, cfg=cfg)

    grads, again, unprefetched = backward(cfg), backward(cfg), backward(dataclasses.replace(cfg, prefetch_per_sm=0))
    for name, got, repeated, plain in zip(("dx", "dw", "db"), grads, again, unprefetched, strict=True):
        assert torch.equal(got, repeated), f"{name} differs between two runs"
        assert torch.equal(got, plain), f"{name} differs without the prefetch"
    refs = layer_norm_ref(x, w, b, case.eps, dy)[1:4]
    _assert_matches_reference(case, dict(zip(("dx", "dw", "db"), zip(grads, refs, strict=True), strict=True)))


@pytest.mark.parametrize("words", [2, 4])
def test_fused_forward_zeroes_the_row_slice_words_after_rstd(words, kernel_device):
    """The training forward zeroes the backward's row-slice words, ``words`` 64-bit words a row after rstd's
    M floats rounded up to 16 bytes (poisoned with NaN before), and writes y, mean and rstd as without them."""
    case = LayerNormCase(5, 96, "float32", offset=1e3)
    x, w, b = case.make_inputs(kernel_device)
    y, mean = torch.full_like(x, float("nan")), torch.full((5,), float("nan"), device=kernel_device)
    rstd = torch.full((8 + 2 * words * 5,), float("nan"), device=kernel_device)
    forward_launch(x, w, b, case.eps, "fused", y, mean, rstd, exchange_words=words)()
    y_alone, mean_alone, rstd_alone = layer_norm_fwd(x, w, b, case.eps, "fused")
    assert torch.equal(y, y_alone) and torch.equal(mean, mean_alone) and torch.equal(rstd[:5], rstd_alone)
    assert rstd[5:8].isnan().all(), "the padding after rstd was written"
    assert torch.equal(rstd[8:].view(torch.int64), torch.zeros(words * 5, dtype=torch.int64, device=kernel_device))


@pytest.mark.parametrize(("n", "slices"), [(16384, 2), (20000, 3), (32768, 4)])
@pytest.mark.parametrize("m", [37, 1001])
@pytest.mark.parametrize("dtype", ["bfloat16", "float32"])  # slices that finish a row a step late, and in it
def test_eager_backward_in_row_slices_leaves_its_words_zeroed(dtype, m, n, slices, cuda_device):
    """An eager backward in row slices exchanges through words its forward zeroed, and its column sum zeroes
    them again: a second backward of the same forward (retain_graph), with another dy, matches the float64
    reference too. 37 rows: one a group; 1001: several."""
    case = LayerNormCase(m, n, dtype, offset=1e3)
    x, w, b = case.make_inputs(cuda_device, requires_grad=True)
    y = kernels.layer_norm(x, n, w, b, case.eps)
    assert y.grad_fn.exchange_words == row_words(slices)
    for _ in range(2):
        dy = torch.randn_like(y)
        grads = torch.autograd.grad(y, (x, w, b), dy, retain_graph=True)
        refs = layer_norm_ref(x.detach(), w.detach(), b.detach(), case.eps, dy)[1:4]
        _assert_matches_reference(case, dict(zip(("dx", "dw", "db"), zip(grads, refs, strict=True), strict=True)))


def test_row_slices_pass_nan_on_like_torch(cuda_device):
    """A NaN in one slice of a row makes that row's dx NaN in every slice, as torch's does; no slice
    waits for a sum that NaN kept from being published."""
    x = torch.randn(5, 20000, device=cuda_device, requires_grad=True)
    w = torch.randn(20000, device=cuda_device, requires_grad=True)
    with torch.no_grad():
        x[2, 15000] = float("nan")
    dy = torch.randn_like(x)
    kernels.layer_norm(x, 20000, w, variant="fused").backward(dy)
    ours = x.grad.clone()
    x.grad = None
    torch.nn.functional.layer_norm(x, (20000,), w).backward(dy)
    assert torch.equal(ours.isnan(), x.grad.isnan())


def test_row_slices_run_whole_in_the_interpreter(kernel_device):
    """On a GPU a row of 16384 is split over two programs; Triton's interpreter runs programs one after
    another, so there the row is one program's (slices would wait for each other forever)."""
    x = torch.empty(3, 16384, device=kernel_device)
    stats = torch.empty(3, device=kernel_device)
    launch, _ = backward_launch(x, x, None, None, stats, stats, "fused", x)
    assert launch.constexprs["SLICES"] == (1 if interpreter_mode() else 2)
    assert launch.constexprs["BLOCK_N"] == (16384 if interpreter_mode() else 8192)


@pytest.mark.parametrize(
    "change",
    [dict(block_m=2), dict(programs_per_sm=2), dict(row_slices=5), dict(row_slices=3)],
    ids=["two rows a step", "two programs an SM", "five slices", "an empty slice"],
)
def test_row_slices_are_refused_where_they_cannot_run(change):
    x = torch.empty(3, 16384, device="meta")
    stats = torch.empty(3, device="meta")
    cfg = dataclasses.replace(heuristic_config("fused", "bwd", torch.float32, 16384), **change)
    with pytest.raises(ValueError, match="slices"):
        backward_launch(x, x, None, None, stats, stats, "fused", x, cfg)


# --- bad input: a clear error naming the problem, before any launch ---------


def test_fused_refuses_rows_past_its_limit(kernel_device):
    x = torch.randn(2, FUSED_MAX_N + 1, device=kernel_device)
    with pytest.raises(ValueError, match=f"fused kernel .* N <= {FUSED_MAX_N}"):
        kernels.layer_norm(x, x.shape[-1], variant="fused")


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda d: (torch.ones(4, 8, dtype=torch.int32, device=d), None, None), TypeError, "x has dtype torch.int32"),
        (lambda d: (torch.randn(4, 8, dtype=torch.float64, device=d), None, None), TypeError, "float64"),
        (lambda d: (torch.randn(4, 8, device=d), torch.randn(9, device=d), None), ValueError, r"weight has shape"),
        (lambda d: (torch.randn(4, 8, device=d), None, torch.randn(2, 4, device=d)), ValueError, r"bias has shape"),
        (
            lambda d: (torch.randn(4, 8, device=d), torch.randn(8, device=d, dtype=torch.float16), None),
            TypeError,
            "weight has dtype torch.float16 but x has torch.float32",
        ),
        (lambda d: (torch.randn(4, 8, device=d), torch.randn(8, device="meta"), None), ValueError, "weight is on meta"),
        (lambda d: (torch.randn(4, 0, device=d), None, None), ValueError, r"N = 0"),
    ],
    ids=["int-dtype", "float64", "weight-shape", "bias-shape", "weight-dtype", "weight-device", "n-zero"],
)
def test_bad_input_is_refused(make, error, match, kernel_device):
    x, w, b = make(kernel_device)
    with pytest.raises(error, match=match):
        kernels.layer_norm(x, x.shape[-1], w, b)


def test_normalized_shape_must_match_trailing_dims(kernel_device):
    with pytest.raises(ValueError, match="does not end in normalized_shape"):
        kernels.layer_norm(torch.randn(4, 8, device=kernel_device), (16,))


@pytest.mark.parametrize(
    ("eps", "error", "match"),
    [("1e-5", TypeError, "got str"), (None, TypeError, "got NoneType"), (-1e-5, ValueError, "got -1e-05"),
     (float("nan"), ValueError, "got nan"), (float("inf"), ValueError, "got inf")],
    ids=["str", "none", "negative", "nan", "inf"],
)  # fmt: skip
def test_eps_must_be_a_finite_non_negative_number(eps, error, match, kernel_device):
    with pytest.raises(error, match=match):
        kernels.layer_norm(torch.randn(4, 8, device=kernel_device), 8, eps=eps)


@pytest.mark.parametrize(
    ("normalized_shape", "error", "match"),
    [((), ValueError, "normalized_shape is empty"), (8.0, TypeError, "got 8.0"), ((4, "2"), TypeError, "ints")],
    ids=["empty", "float", "str-entry"],
)
def test_normalized_shape_must_be_ints_and_not_empty(normalized_shape, error, match, kernel_device):
    with pytest.raises(error, match=match):
        kernels.layer_norm(torch.randn(4, 8, device=kernel_device), normalized_shape)


def test_unknown_variant_is_refused(kernel_device):
    with pytest.raises(ValueError, match="unknown variant 'fastest'"):
        kernels.layer_norm(torch.randn(4, 8, device=kernel_device), 8, variant="fastest")
    with pytest.raises(TypeError, match="variant must be a string, got list"):
        kernels.layer_norm(torch.randn(4, 8, device=kernel_device), 8, variant=["fused"])
