"""float64 RMSNorm reference: the tests' oracle."""

import torch


def rms_norm_ref(x, weight, eps: float, dy):
    """(y, dx, dw, rstd) in float64, from ``torch.nn.functional.rms_norm`` (dw None without a weight)."""
    n = x.shape[-1]
    x64 = x.detach().double().requires_grad_()
    w64 = weight.detach().double().requires_grad_() if weight is not None else None
    y = torch.nn.functional.rms_norm(x64, (n,), w64, eps)
    y.backward(dy.double())
    rstd = torch.rsqrt(x64.detach().square().mean(-1) + eps)
    return y.detach(), x64.grad, w64.grad if w64 is not None else None, rstd
