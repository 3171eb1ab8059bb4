"""Float32 PyTorch reference for GQA attention over packed variable-length sequences.

The test oracle and the benchmark baseline. One sequence at a time, key/value
heads repeated to the query heads (``repeat_interleave``), gradients by
autograd, so it shares no derivation with the kernels' backward.

Causal masking is bottom-right aligned as in flash-attn's varlen kernels: query
``i`` sees key ``j`` when ``j <= i + seqlen_k - seqlen_q``. A query row that sees
no key has output 0 and LSE = +inf, which is what the kernels produce.
"""

import itertools
import math

import torch


def _sequence_attention(q, k, v, causal: bool, scale: float):
    """(o, lse) of one sequence; q (Lq, H, dqk), k (Lk, H, dqk), v (Lk, H, dv), all float32."""
    len_q, len_k = q.shape[0], k.shape[0]
    scores = torch.einsum("qhd,khd->hqk", q, k) * scale
    visible = torch.ones(len_q, len_k, dtype=torch.bool, device=q.device)
    if causal:
        visible = visible.tril(diagonal=len_k - len_q)
    scores = scores.masked_fill(~visible, float("-inf"))
    has_key = visible.any(dim=1)  # (Lq,)
    # logsumexp of a fully masked row is -inf and its gradient NaN: take it over zeros instead.
    safe_lse = torch.logsumexp(torch.where(has_key[:, None], scores, 0.0), dim=-1)  # (H, Lq)
    probs = torch.exp(scores - safe_lse[..., None])  # masked entries: exp(-inf) = 0
    o = torch.einsum("hqk,khd->qhd", probs, v)
    lse = torch.where(has_key, safe_lse, float("inf"))
    return o, lse


def attention_varlen_ref(
    q: torch.Tensor,
    k: torch.Tensor,
    v: torch.Tensor,
    cu_seqlens_q: torch.Tensor,
    cu_seqlens_k: torch.Tensor,
    causal: bool,
    softmax_scale: float | None = None,
    do: torch.Tensor | None = None,
) -> dict[str, torch.Tensor]:
    """Float32 ``{"o", "lse"}`` and, when ``do`` is given, ``{"dq", "dk", "dv"}``.

    Shapes as in ``flash_attn_varlen_func``: o (total_q, H, dv), lse (H, total_q),
    grads shaped like q, k, v.
    """
    groups = q.shape[1] // k.shape[1]
    scale = softmax_scale if softmax_scale is not None else 1.0 / math.sqrt(q.shape[-1])
    leaves = [t.detach().float().requires_grad_(do is not None) for t in (q, k, v)]
    fq, fk, fv = leaves
    bounds_q, bounds_k = cu_seqlens_q.tolist(), cu_seqlens_k.tolist()
    outs, lses = [], []
    for (q0, q1), (k0, k1) in zip(itertools.pairwise(bounds_q), itertools.pairwise(bounds_k), strict=True):
        o, lse = _sequence_attention(
            fq[q0:q1],
            fk[k0:k1].repeat_interleave(groups, dim=1),
            fv[k0:k1].repeat_interleave(groups, dim=1),
            causal,
            scale,
        )
        outs.append(o)
        lses.append(lse)
    o = torch.cat(outs)
    result = {"o": o.detach(), "lse": torch.cat(lses, dim=1).detach()}
    if do is not None:
        o.backward(do.float())
        result.update(dq=fq.grad, dk=fk.grad, dv=fv.grad)
    return result
