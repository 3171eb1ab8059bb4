"""RMSNorm kernels against a float64 reference, forward and backward.

Runs twice under ``nox -s tests``: compiled on a GPU (full shapes) and in Triton's interpreter
(same N, at most INTERPRETER_MAX_ROWS rows). Tests that take ``cuda_device`` run on a GPU only.
"""

import dataclasses

import pytest
import torch

from kernelgate import kernels
from kernelgate.accuracy import errors
from kernelgate.cases.rms_norm import CORRECTNESS_CASES, MODEL_WIDTHS, RMSNormCase, interpreted
from kernelgate.kernels.device import interpreter_mode
from kernelgate.kernels.layer_norm.ops import _sms, column_sum_launch
from kernelgate.kernels.rms_norm.config import (
    BWD_REGISTER_LANES,
    FWD_REGISTER_LANES,
    MAX_ROW_SLICES,
    ROW_SLICES_MIN_N,
    heuristic_config,
)
from kernelgate.kernels.rms_norm.ops import backward_launch, default_eps, groups_of, rms_norm_bwd, rms_norm_fwd
from kernelgate.kernels.rms_norm.reference import rms_norm_ref

pytestmark = pytest.mark.kernel


def _sized(case: RMSNormCase) -> RMSNormCase:
    return interpreted(case) if interpreter_mode() else case


def _poisoned(*like):
    return tuple(None if t is None else torch.full_like(t, float("nan")) for t in like)


def _run(case: RMSNormCase, device, cfgs: dict | None = None, weight: bool = True) -> dict:
    """{quantity: (kernel result, float64 reference)} on fresh random inputs, every output poisoned
    with NaN before its kernel runs; ``cfgs`` ({"fwd": ..., "bwd": ...}) overrides the heuristic."""
    cfgs = cfgs or {}
    x, w = case.make_inputs(device)
    w = w if weight else None
    dy = torch.randn_like(x)
    rstd_out = torch.full((case.m,), float("nan"), device=device)
    y, rstd = rms_norm_fwd(x, w, case.resolved_eps, out=(*_poisoned(x), rstd_out), cfg=cfgs.get("fwd"))
    dx, dw = rms_norm_bwd(dy, x, w, rstd, out=_poisoned(x, w), cfg=cfgs.get("bwd"))
    y_ref, dx_ref, dw_ref, rstd_ref = rms_norm_ref(x, w, case.resolved_eps, dy)
    results = {"y": (y, y_ref), "rstd": (rstd, rstd_ref), "dx": (dx, dx_ref)}
    return {**results, "dw": (dw, dw_ref)} if weight else results


def _assert_matches_reference(case: RMSNormCase, results: dict) -> None:
    for quantity, (got, ref) in results.items():
        atol, rtol = case.tolerance(quantity)
        abs_err, _ = errors(got, ref)
        print(f"{quantity}: max abs error {abs_err:.3e} (atol {atol:.1e}, rtol {rtol:.1e})")
        torch.testing.assert_close(got.double(), ref, atol=atol, rtol=rtol, msg=lambda m, q=quantity: f"{q}: {m}")


@pytest.mark.parametrize("case", CORRECTNESS_CASES, ids=lambda case: case.name)
def test_kernels_match_float64_reference(case, kernel_device):
    case = _sized(case)
    cfgs = {d: heuristic_config(d, case.torch_dtype, case.n) for d in ("fwd", "bwd")}
    print(f"forward {cfgs['fwd']}, backward {cfgs['bwd']}")
    _assert_matches_reference(case, _run(case, kernel_device))


def test_the_kernel_follows_the_row_width():
    """One pass with the row in registers up to FWD_REGISTER_LANES (forward) and BWD_REGISTER_LANES
    (backward) lanes, looped past them, but for backward rows from ROW_SLICES_MIN_N columns to
    MAX_ROW_SLICES slices of BWD_REGISTER_LANES: the correctness cases cover both sides of each bound."""
    widest_sliced = MAX_ROW_SLICES * BWD_REGISTER_LANES
    for dtype in (torch.float32, torch.bfloat16):
        for direction, lanes in (("fwd", FWD_REGISTER_LANES), ("bwd", BWD_REGISTER_LANES)):
            assert not heuristic_config(direction, dtype, lanes).looped(lanes)
            assert heuristic_config(direction, dtype, lanes + 1).looped(lanes + 1)
        for n, slices in ((ROW_SLICES_MIN_N - 1, 1), (ROW_SLICES_MIN_N, 2), (widest_sliced, 4), (widest_sliced + 1, 1)):
            cfg = heuristic_config("bwd", dtype, n)
            assert (cfg.row_slices, cfg.looped(n)) == (slices, slices == 1), f"{n}: {cfg}"
    widths = {case.n for case in CORRECTNESS_CASES}
    bounds = {FWD_REGISTER_LANES, FWD_REGISTER_LANES + 1, BWD_REGISTER_LANES - 1, BWD_REGISTER_LANES + 1}
    assert bounds | {ROW_SLICES_MIN_N - 1, ROW_SLICES_MIN_N, widest_sliced, widest_sliced + 1} <= widths


def _looped(direction: str, dtype: torch.dtype, n: int, chunk: int, block_m: int, num_stages: int = 1):
    base = heuristic_config(direction, dtype, n)
    return dataclasses.replace(base, block_m=block_m, block_n=chunk, num_stages=num_stages)


@pytest.mark.parametrize("weight", [True, False], ids=["weight", "no-weight"])
@pytest.mark.parametrize(("n", "chunk"), [(1000, 256), (5000, 1024), (4097, 4096), (300, 64)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_looped_kernels_on_narrow_chunks(dtype, n, chunk, weight, kernel_device):
    """The looped kernels, which the heuristic keeps for rows past 8192 (backward) and 32768 (forward),
    on rows of a few chunks that the interpreter runs quickly: the last chunk partly masked (1000 in
    256s), one column past a chunk (4097), several rows a step, an odd M, pipelined chunk loops."""
    case = _sized(RMSNormCase(37, n, dtype, offset=3.0))
    for block_m, stages in ((1, 1), (2, 3)):  # two fp32 rows of 4096 on three stages: 192 KiB of shared memory
        cfgs = {d: _looped(d, case.torch_dtype, n, chunk, block_m, stages) for d in ("fwd", "bwd")}
        assert all(cfg.looped(n) for cfg in cfgs.values())
        _assert_matches_reference(case, _run(case, kernel_device, cfgs, weight))


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_one_pass_kernels_without_a_weight(dtype, kernel_device):
    case = _sized(RMSNormCase(37, 1000, dtype))
    _assert_matches_reference(case, _run(case, kernel_device, weight=False))


@pytest.mark.parametrize("looped", [False, True], ids=["one-pass", "looped"])
def test_backward_writes_every_partial_sum_before_reading_it(looped, kernel_device):
    """The partial-sum buffer is not zeroed: NaN left in it must not reach dw. Each persistent program
    takes several row blocks, so the first writes its partial row and the later ones add to it."""
    case = RMSNormCase(3 * _sms(torch.empty(0, device=kernel_device)) + 1, 300, "float32", offset=1.0)
    x, w = case.make_inputs(kernel_device)
    dy = torch.randn_like(x)
    _, rstd = rms_norm_fwd(x, w, case.resolved_eps)
    cfg = dataclasses.replace(heuristic_config("bwd", x.dtype, case.n), block_m=1, programs_per_sm=1)
    if looped:
        cfg = dataclasses.replace(cfg, block_n=128)
    dx = torch.full_like(x, float("nan"))
    launch, partial = backward_launch(dy, x, w, rstd, dx, cfg)
    assert launch.grid[0] < case.m, "several row blocks a program"
    partial.fill_(float("nan"))
    launch()
    dw = torch.full_like(w, float("nan"))
    column_sum_launch(partial, groups_of(launch), [dw])()
    _, dx_ref, dw_ref, _ = rms_norm_ref(x, w, case.resolved_eps, dy)
    _assert_matches_reference(case, {"dx": (dx, dx_ref), "dw": (dw, dw_ref)})


@pytest.mark.parametrize(("n", "slices"), [(12288, 2), (20000, 3), (32768, 4)])
@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
@pytest.mark.parametrize("m", [1001, 3])
def test_backward_in_row_slices(m, dtype, n, slices, cuda_device):
    """Rows in slices of one program each, which exchange their row sums: 20000 pads the exchange to four
    words. Large means, an odd M (3: one row a group), outputs poisoned with NaN; two runs give the same
    bits, and so do the slices without the prefetch or the late finish, which change no arithmetic."""
    case = RMSNormCase(m, n, dtype, offset=1e3)
    x, w = case.make_inputs(cuda_device)
    dy = torch.randn_like(x)
    _, rstd = rms_norm_fwd(x, w, case.resolved_eps)
    cfg = heuristic_config("bwd", case.torch_dtype, n)
    launch, _ = backward_launch(dy, x, w, rstd, torch.empty_like(x), cfg)
    assert launch.constexprs["SLICES"] == slices and launch.cooperative
    assert launch.constexprs["FINISH_LATE"] == (dtype == "bfloat16")
    aligned = n * x.element_size() % 16 == 0  # a bulk prefetch takes whole 16-byte units
    assert launch.arguments["prefetch_rows"] == (2 * groups_of(launch) if aligned else 0)

    def backward(cfg):
        return rms_norm_bwd(dy, x, w, rstd, out=_poisoned(x, w), cfg=cfg)

    plain = dataclasses.replace(cfg, prefetch_steps=0, finish_late=False)
    grads, again, other = backward(cfg), backward(cfg), backward(plain)
    for name, got, repeated, otherwise in zip(("dx", "dw"), grads, again, other, strict=True):
        assert torch.equal(got, repeated), f"{name} differs between two runs"
        assert torch.equal(got, otherwise), f"{name} differs with {plain}"
    _, dx_ref, dw_ref, _ = rms_norm_ref(x, w, case.resolved_eps, dy)
    _assert_matches_reference(case, {"dx": (grads[0], dx_ref), "dw": (grads[1], dw_ref)})


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_row_slices_without_a_weight(dtype, cuda_device):
    """Without a weight the buffer holds the slices' words alone, and no column sum follows."""
    case = RMSNormCase(37, 16384, dtype)
    assert heuristic_config("bwd", case.torch_dtype, case.n).row_slices == 2
    _assert_matches_reference(case, _run(case, cuda_device, weight=False))


def test_row_slices_pass_nan_on_like_torch(cuda_device):
    """A NaN in one slice of a row makes that row's dx NaN in every slice, as torch's does; no slice waits
    for a sum that NaN kept from being published."""
    x = torch.randn(5, 20000, device=cuda_device, requires_grad=True)
    w = torch.randn(20000, device=cuda_device, requires_grad=True)
    with torch.no_grad():
        x[2, 15000] = float("nan")
    dy = torch.randn_like(x)
    kernels.rms_norm(x, 20000, w).backward(dy)
    ours = x.grad.clone()
    x.grad = None
    torch.nn.functional.rms_norm(x, (20000,), w).backward(dy)
    assert torch.equal(ours.isnan(), x.grad.isnan())


def test_row_slices_run_whole_in_the_interpreter(kernel_device):
    """On a GPU a row of 16384 is split over two programs; Triton's interpreter runs programs one after
    another, so there the row is one program's (slices would wait for each other forever)."""
    x = torch.empty(3, 16384, device=kernel_device)
    launch, _ = backward_launch(x, x, None, torch.empty(3, device=kernel_device), x)
    assert launch.constexprs.get("SLICES", 1) == (1 if interpreter_mode() else 2)
    assert launch.constexprs["BLOCK_N"] == (16384 if interpreter_mode() else 8192)


@pytest.mark.parametrize(
    "change",
    [dict(block_m=2), dict(programs_per_sm=2), dict(row_slices=5), dict(row_slices=3), dict(block_n=4096)],
    ids=["two rows a step", "two programs an SM", "five slices", "an empty slice", "a row past its slices"],
)
def test_row_slices_are_refused_where_they_cannot_run(change):
    x = torch.empty(3, 16384, device="meta")
    cfg = dataclasses.replace(heuristic_config("bwd", torch.float32, 16384), **change)
    with pytest.raises(ValueError, match="slices"):
        backward_launch(x, x, None, torch.empty(3, device="meta"), x, cfg)


def test_inference_forward_is_the_training_forward_without_rstd(kernel_device):
    """No gradient needed: rstd is neither allocated nor stored, and y is bit for bit the same."""
    case = RMSNormCase(7, 300, "bfloat16", offset=3.0)
    x, w = case.make_inputs(kernel_device)
    y_train, rstd = rms_norm_fwd(x, w, case.resolved_eps)
    y_inference, no_rstd = rms_norm_fwd(x, w, case.resolved_eps, out=(*_poisoned(x), None))
    assert no_rstd is None and rstd is not None
    assert torch.equal(y_inference, y_train)
    assert torch.equal(kernels.rms_norm(x, case.n, w), y_train)


def _check_autograd(x, normalized_shape, weight, eps, tol_case: RMSNormCase):
    """Our functional against torch's on float64 copies: y, and the gradients of x and the weight."""
    leaves = [t.detach().clone().requires_grad_() if t is not None else None for t in (x, weight)]
    y = kernels.rms_norm(leaves[0], normalized_shape, leaves[1], eps)
    dy = torch.randn_like(y)
    y.backward(dy)
    refs = [t.detach().double().requires_grad_() if t is not None else None for t in (x, weight)]
    eps = default_eps(x.dtype) if eps is None else eps  # float64's own would be 2**-52
    y_ref = torch.nn.functional.rms_norm(refs[0], normalized_shape, refs[1], eps)
    y_ref.backward(dy.double())
    assert y.shape == x.shape and y.dtype == x.dtype
    for name, got, ref in (("y", y, y_ref), ("dx", leaves[0].grad, refs[0].grad)):
        atol, rtol = tol_case.tolerance(name)
        torch.testing.assert_close(got.double(), ref.detach(), atol=atol, rtol=rtol, msg=lambda m, q=name: f"{q}: {m}")
    if weight is not None:
        atol, rtol = tol_case.tolerance("dw")
        torch.testing.assert_close(leaves[1].grad.double(), refs[1].grad, atol=atol, rtol=rtol)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16"])
def test_autograd_any_leading_shape_and_strided_rows(dtype, kernel_device):
    case = RMSNormCase(2 * 5, 300, dtype)
    x, w = case.make_inputs(kernel_device)
    base = torch.randn(2, 5, 2 * case.n, device=kernel_device).to(case.torch_dtype)
    strided_rows = base[..., : case.n]  # row stride 2N: read in place
    transposed = x.view(2, 5, case.n).transpose(0, 1)  # leading dims permuted: copied
    columns = torch.randn(case.n, 10, device=kernel_device).to(case.torch_dtype).t()  # column stride 10: copied
    for inp in (x.view(2, 5, case.n), strided_rows, transposed, columns, x[0]):
        _check_autograd(inp, (case.n,), w, None, case)


def test_autograd_over_several_trailing_dimensions(kernel_device):
    """normalized_shape of two dimensions: rows of 4 x 24, a weight of that shape and its gradient."""
    case = RMSNormCase(21, 96)
    x = torch.randn(3, 7, 4, 24, device=kernel_device)
    w = 1 + 0.5 * torch.randn(4, 24, device=kernel_device)
    _check_autograd(x, (4, 24), w, 1e-6, case)
    _check_autograd(x, [4, 24], None, None, case)


@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_eps_none_is_torchs_default(dtype, kernel_device):
    """eps=None is what torch's rms_norm takes on this device: for these dtypes fp32's machine epsilon,
    not the input dtype's. Rows of one small value (N = 1), where eps decides y = x / sqrt(x^2 + eps)."""
    dt = getattr(torch, dtype)
    assert default_eps(dt) == torch.finfo(torch.float32).eps
    x = torch.logspace(-5, -2, 7, device=kernel_device) * torch.tensor([1, -1] * 3 + [1], device=kernel_device)
    x = x.to(dt).view(7, 1)
    ours = kernels.rms_norm(x, (1,))
    theirs = torch.nn.functional.rms_norm(x, (1,))
    other = torch.nn.functional.rms_norm(x, (1,), eps=torch.finfo(dt).eps)
    atol, rtol = RMSNormCase(7, 1, dtype).tolerance("y")
    torch.testing.assert_close(ours.double(), theirs.double(), atol=atol, rtol=rtol)
    if dt != torch.float32:  # the input dtype's epsilon would give other outputs
        assert not torch.allclose(ours.double(), other.double(), atol=atol, rtol=rtol)


@pytest.mark.parametrize("eps", [None, 1e-6])
def test_module_is_a_drop_in_for_torch_rms_norm(eps, kernel_device):
    torch_rms = torch.nn.RMSNorm((4, 24), eps=eps, device=kernel_device)
    with torch.no_grad():
        torch_rms.weight.normal_()
    ours = kernels.RMSNorm((4, 24), eps=eps, device=kernel_device)
    assert ours.state_dict().keys() == torch_rms.state_dict().keys()
    assert ours.eps == torch_rms.eps and repr(ours) == repr(torch_rms)
    ours.load_state_dict(torch_rms.state_dict())
    x = torch.randn(3, 7, 4, 24, device=kernel_device)
    x_ours, x_torch = x.clone().requires_grad_(), x.clone().requires_grad_()
    dy = torch.randn_like(x)
    y_ours, y_torch = ours(x_ours), torch_rms(x_torch)
    y_ours.backward(dy)
    y_torch.backward(dy)
    torch.testing.assert_close(y_ours, y_torch, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(x_ours.grad, x_torch.grad, atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(ours.weight.grad, torch_rms.weight.grad, atol=1e-4, rtol=1e-5)

    plain = torch.nn.RMSNorm(24, elementwise_affine=False, device=kernel_device)
    mine = kernels.RMSNorm(24, elementwise_affine=False, device=kernel_device)
    assert [n for n, _ in mine.named_parameters()] == [n for n, _ in plain.named_parameters()] == []
    x = torch.randn(5, 24, device=kernel_device, requires_grad=True)
    mine(x).sum().backward()  # dy: an expanded scalar, strides (0, 0)
    grad_ours, x.grad = x.grad, None
    plain(x).sum().backward()
    torch.testing.assert_close(mine(x), plain(x), atol=1e-5, rtol=1e-5)
    torch.testing.assert_close(grad_ours, x.grad, atol=1e-5, rtol=1e-5)


def test_module_defaults_match_torch():
    ours, theirs = kernels.RMSNorm(8), torch.nn.RMSNorm(8)
    assert (ours.normalized_shape, ours.eps, ours.elementwise_affine) == (
        theirs.normalized_shape,
        theirs.eps,
        theirs.elementwise_affine,
    )
    assert torch.equal(ours.weight, theirs.weight)
    assert isinstance(ours, torch.nn.RMSNorm)


def test_strided_and_expanded_weight(kernel_device):
    """torch's rms_norm takes any weight of the normalized shape: a strided view (every other element of a
    longer one) and an expanded scalar (stride 0) read as themselves, and their gradients reach the
    tensors they view."""
    case = RMSNormCase(7, 40, offset=3.0)
    x = case.make_inputs(kernel_device, requires_grad=True)[0]
    dy = torch.randn_like(x)
    every_other = torch.randn(2 * case.n, device=kernel_device).requires_grad_()
    scalar = torch.randn(1, device=kernel_device).requires_grad_()
    for w, dw_of in ((every_other[::2], lambda: every_other.grad[::2]), (scalar.expand(case.n), lambda: scalar.grad)):
        x.grad = None
        y = kernels.rms_norm(x, case.n, w)
        y.backward(dy)
        y_ref, dx_ref, dw_ref, _ = rms_norm_ref(x, w, case.resolved_eps, dy)
        dw_ref = dw_ref if w.stride(0) else dw_ref.sum().reshape(1)
        _assert_matches_reference(case, {"y": (y, y_ref), "dx": (x.grad, dx_ref), "dw": (dw_of(), dw_ref)})
    assert not every_other.grad[1::2].any(), "the elements between the weight's own get no gradient"


def test_zero_rows_give_empty_output(kernel_device):
    x = torch.randn(0, 64, device=kernel_device, requires_grad=True)
    w = torch.randn(64, device=kernel_device, requires_grad=True)
    y = kernels.rms_norm(x, 64, w)
    assert y.shape == (0, 64)
    y.sum().backward()
    assert x.grad.shape == (0, 64)
    assert torch.equal(w.grad, torch.zeros_like(w))
    assert kernels.rms_norm(torch.randn(2, 0, 3, device=kernel_device), 3).shape == (2, 0, 3)


def test_nan_and_inf_propagate_like_torch(kernel_device):
    x = torch.randn(4, 96, device=kernel_device)
    x[1, 7] = float("nan")
    x[2, 3] = float("inf")
    w = torch.randn(96, device=kernel_device)
    ours = kernels.rms_norm(x, 96, w)
    ref = torch.nn.functional.rms_norm(x, (96,), w)
    assert torch.equal(torch.isnan(ours), torch.isnan(ref))
    assert torch.isnan(ours[1]).all()
    torch.testing.assert_close(ours[[0, 3]], ref[[0, 3]], atol=1e-5, rtol=1e-5)


def test_a_second_order_gradient_is_refused(kernel_device):
    """The backward is not differentiable again: a gradient penalty through it raises instead of
    silently adding nothing."""
    x = torch.randn(3, 8, device=kernel_device, requires_grad=True)
    (dx,) = torch.autograd.grad(kernels.rms_norm(x, 8).pow(2).sum(), x, create_graph=True)
    with pytest.raises(RuntimeError, match="once_differentiable"):
        dx.pow(2).sum().backward()


CHAIN_DEPTH = 4


def _chain(x, w, dy):
    """CHAIN_DEPTH RMSNorms, each normalizing the previous one's output, and the backward through them:
    (each layer's input, its output, the gradient reaching its input)."""
    ins, outs, h = [], [], x
    for _ in range(CHAIN_DEPTH):
        ins.append(h)
        h = kernels.rms_norm(h, h.shape[-1], w)
        outs.append(h)
    return ins, outs, torch.autograd.grad(h, ins, dy)


def _assert_each_layer_matches_reference(case, w, dy, ins, outs, grads):
    # Layer by layer, from our own inputs: a layer that read its input before the previous kernel finished
    # writing it fails here. The same w scales the same columns in every layer, so values grow along the
    # chain: the tolerance scales with the layer's largest value; a race is off by the data's own size.
    for i, (h, y, dh) in enumerate(zip(ins, outs, grads, strict=True)):
        upstream = grads[i + 1] if i + 1 < len(grads) else dy
        y_ref, dx_ref, _, _ = rms_norm_ref(h, w, case.resolved_eps, upstream)
        for name, got, ref in (("y", y, y_ref), ("dx", dh, dx_ref)):
            atol, rtol = case.tolerance(name)
            scale = max(1.0, ref.abs().max().item())
            what = f"layer {i} {name}"
            torch.testing.assert_close(
                got.double(), ref, atol=atol * scale, rtol=rtol, msg=lambda m, q=what: f"{q}: {m}"
            )


def test_dependent_calls_back_to_back(kernel_device):
    """Each call reads what the one before wrote. On sm_90+ the one-pass forward and the column sum launch
    with programmatic dependent launch: they start while their predecessor drains and must wait
    (griddepcontrol.wait) before touching memory."""
    case = _sized(RMSNormCase(4096, 1024))  # many programs in several waves
    x, w = case.make_inputs(kernel_device, requires_grad=True)
    dy = torch.randn_like(x)
    _assert_each_layer_matches_reference(case, w, dy, *_chain(x, w, dy))


# --- bad input: a clear error naming the problem, before any launch ---------


@pytest.mark.parametrize(
    ("make", "error", "match"),
    [
        (lambda d: (torch.ones(4, 8, dtype=torch.int32, device=d), None), TypeError, "x has dtype torch.int32"),
        (lambda d: (torch.randn(4, 8, dtype=torch.float64, device=d), None), TypeError, "float64; supported"),
        (lambda d: ([[1.0] * 8] * 4, None), TypeError, "x must be a torch.Tensor, got list"),
        (lambda d: (torch.randn(4, 8, device=d), torch.randn(9, device=d)), ValueError, r"weight has shape \(9,\)"),
        (lambda d: (torch.randn(4, 8, device=d), torch.randn(8).tolist()), TypeError, "weight must be a torch.Tensor"),
        (
            lambda d: (torch.randn(4, 8, device=d), torch.randn(8, device=d, dtype=torch.float16)),
            TypeError,
            "weight has dtype torch.float16 but x has torch.float32",
        ),
        (lambda d: (torch.randn(4, 8, device=d), torch.randn(8, device="meta")), ValueError, "weight is on meta"),
        (lambda d: (torch.randn(4, 0, device=d), None), ValueError, r"N = 0"),
    ],
    ids=["int-dtype", "float64", "list", "weight-shape", "weight-list", "weight-dtype", "weight-device", "n-zero"],
)
def test_bad_input_is_refused(make, error, match, kernel_device):
    x, w = make(kernel_device)
    with pytest.raises(error, match=match):
        kernels.rms_norm(x, len(x[0]) if isinstance(x, list) else x.shape[-1], w)


@pytest.mark.parametrize(
    ("eps", "error", "match"),
    [("1e-5", TypeError, "got str"), (True, TypeError, "got bool"), (-1e-5, ValueError, "got -1e-05"),
     (float("nan"), ValueError, "got nan"), (float("inf"), ValueError, "got inf")],
    ids=["str", "bool", "negative", "nan", "inf"],
)  # fmt: skip
def test_eps_must_be_none_or_a_finite_non_negative_number(eps, error, match, kernel_device):
    with pytest.raises(error, match=match):
        kernels.rms_norm(torch.randn(4, 8, device=kernel_device), 8, eps=eps)


@pytest.mark.parametrize(
    ("normalized_shape", "error", "match"),
    [((), ValueError, "normalized_shape is empty"), (8.0, TypeError, "got 8.0"), ((4, "2"), TypeError, "ints"),
     ((16,), ValueError, r"x of shape \(4, 8\) does not end in normalized_shape \(16,\)"),
     ((2, 4, 8), ValueError, "does not end in normalized_shape")],
    ids=["empty", "float", "str-entry", "mismatch", "longer-than-x"],
)  # fmt: skip
def test_normalized_shape_must_be_the_trailing_dims(normalized_shape, error, match, kernel_device):
    with pytest.raises(error, match=match):
        kernels.rms_norm(torch.randn(4, 8, device=kernel_device), normalized_shape)


@pytest.mark.skipif(interpreter_mode(), reason="compiled-mode check; runs in the other pytest process")
def test_cpu_tensor_is_refused_outside_the_interpreter():
    with pytest.raises(ValueError, match="x is on cpu; the Triton kernels need a CUDA tensor"):
        kernels.rms_norm(torch.randn(4, 8), 8)


# --- GPU only: full-size rows, determinism, CUDA graphs ----------------------


@pytest.mark.parametrize("n", MODEL_WIDTHS)
@pytest.mark.parametrize("dtype", ["float32", "bfloat16", "float16"])
def test_model_widths_match_float64_reference(dtype, n, cuda_device):
    """The benchmark's widths, on 1024 rows (the float64 reference of 8192 would dominate the run)."""
    case = RMSNormCase(1024, n, dtype)
    _assert_matches_reference(case, _run(case, cuda_device))


@pytest.mark.parametrize("n", [4096, 5000, 16384])
def test_weight_gradient_is_deterministic(n, cuda_device):
    """dw is summed per program, then over programs in a fixed order, without atomics: the same inputs give
    the same bits, run after run (one pass at 4096 and 5000, looped at 16384)."""
    case = RMSNormCase(3001, n, "bfloat16")
    x, w = case.make_inputs(cuda_device)
    dy = torch.randn_like(x)
    _, rstd = rms_norm_fwd(x, w, case.resolved_eps)
    first = rms_norm_bwd(dy, x, w, rstd)
    for _ in range(3):
        again = rms_norm_bwd(dy, x, w, rstd, out=_poisoned(x, w))
        assert torch.equal(again[0], first[0]) and torch.equal(again[1], first[1])


def test_dependent_calls_in_a_cuda_graph(cuda_device):
    """The chain captured in a CUDA graph, where kernels follow each other with the least gap (the
    benchmarks time calls so), replayed on fresh inputs with its outputs poisoned."""
    case = RMSNormCase(4096, 1024)
    x, w = case.make_inputs(cuda_device, requires_grad=True)
    dy = torch.randn_like(x)
    side = torch.cuda.Stream()  # torch's recipe: warm up on a side stream, then capture
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        _chain(x, w, dy)
    torch.cuda.current_stream().wait_stream(side)
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        captured = _chain(x, w, dy)
    captured = [[t.detach() for t in tensors] for tensors in captured]
    for fresh in (case.make_inputs(cuda_device) for _ in range(2)):
        with torch.no_grad():
            for static, new in zip((x, w), fresh, strict=True):
                static.copy_(new)
            dy.normal_()
            for t in (*captured[1], *captured[2]):
                t.fill_(float("nan"))  # an element the replay does not write fails
        graph.replay()
        _assert_each_layer_matches_reference(case, w, dy, *captured)
