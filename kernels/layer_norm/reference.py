"""float64 LayerNorm reference: the tests' oracle."""

import torch


def layer_norm_ref(x, weight, bias, eps, dy):
    """(y, dx, dw, db, mean, rstd) in float64, from ``torch.nn.functional.layer_norm``."""
    n = x.shape[-1]
    x64 = x.detach().double().requires_grad_()
    w64 = weight.detach().double().requires_grad_() if weight is not None else None
    b64 = bias.detach().double().requires_grad_() if bias is not None else None
    y = torch.nn.functional.layer_norm(x64, (n,), w64, b64, eps)
    y.backward(dy.double())
    mean = x64.detach().mean(-1)
    rstd = torch.rsqrt(x64.detach().var(-1, unbiased=False) + eps)
    grad = lambda t: t.grad if t is not None else None
    return y.detach(), x64.grad, grad(w64), grad(b64), mean, rstd
