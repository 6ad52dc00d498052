"""The ``ghost`` per-sample backend: DP-SGD's clipped gradient sum without the per-record gradients of the
whole model (mixed ghost clipping with book-keeping, Bu et al. 2022/2023; docs/scaling.md §6).

From the layer inputs a and output gradients g (one forward and one backward, as ``hooks``): (1) each record's
squared weight-gradient norm, layer by layer, from the instantiated Cout × D matrix Σ_t g_t a_tᵀ over its T rows
or as the *ghost norm* Σ_{s,t} (a_s·a_t)(g_s·g_t), whichever is cheaper (:func:`use_ghost`); (2) Σᵢ cᵢ ∇ℓᵢ by
contracting the kept per-record gradients with cᵢ, or as ONE batched weight gradient with record i's output
gradients scaled by cᵢ (no second backward).

Exact (tests/models/test_per_sample.py). A layer called more than once per forward (shared weights) is always
instantiated, since the norm of a sum is not the sum of norms. Under bf16/fp16 autocast a and g are cast to fp32,
and the clipping norm and the sum read the same values, so a clipped contribution has norm ≤ C up to fp32 rounding.
"""
from __future__ import annotations

import torch
from torch import nn

from ...core.mechanisms import clip_factors
from .layers import as_fp32, conv_patches, full_precision, layer_grads, rows_per_record

KEEP_BYTES = 1 << 30  # instantiated per-record gradients kept for the clipped sum, per pass (else recomputed)


# ------------------------------------------------------------------------------------------------ planning

def _shape(mod: nn.Module, x: torch.Tensor, g: torch.Tensor, n: int) -> tuple[int, int, int] | None:
    """(T rows per record, D input features, Cout output features) of a Linear/Conv/Embedding call."""
    if isinstance(mod, nn.Linear):
        d, cout = x.shape[-1], g.shape[-1]
        return x.numel() // (n * d), d, cout
    if isinstance(mod, nn.Conv2d):
        k = rows_per_record(x.shape[0], n, mod)
        kh, kw = mod.kernel_size
        return k * g.shape[2] * g.shape[3], x.shape[1] * kh * kw, g.shape[1]
    if isinstance(mod, nn.Embedding):
        return x.numel() // n, mod.num_embeddings, g.shape[-1]
    return None


def use_ghost(mod: nn.Module, x: torch.Tensor, g: torch.Tensor, n: int, keep: bool = True) -> bool:
    """Whether the ghost route costs fewer multiply-adds per record than instantiation.

    Ghost: T²·(D+Cout) for the norm, then T·D·Cout for the weighted batched gradient. Instantiation: T·D·Cout,
    then D·Cout to contract with c if kept (``keep``), else T·D·Cout again. So ghost pays where T²·(D+Cout) < D·Cout
    with ``keep`` (embeddings, Linear layers fed one row per draw; not a UNet's convolutions), else where
    T·(D+Cout) < D·Cout."""
    s = _shape(mod, x, g, n)
    if s is None:
        return False
    t, d, cout = s
    return t * t * (d + cout) < d * cout if keep else t * (d + cout) < d * cout


# ------------------------------------------------------------------------------------------------ norms

def _gram_sq_norm(a: torch.Tensor, g: torch.Tensor) -> torch.Tensor:
    """‖Σ_t g_t a_tᵀ‖²_F per record from (n, T, D) inputs and (n, T, Cout) output gradients."""
    if a.shape[1] == 1:
        return a.pow(2).sum((1, 2)) * g.pow(2).sum((1, 2))
    return (torch.bmm(a, a.transpose(1, 2)) * torch.bmm(g, g.transpose(1, 2))).sum((1, 2))


def ghost_sq_norm(mod: nn.Module, x: torch.Tensor, g: torch.Tensor, n: int) -> torch.Tensor:
    """Σ over the trainable parameters of ``mod`` of each record's squared gradient norm, (n,), without the
    per-record gradients."""
    x, g = as_fp32(x), as_fp32(g)
    out = torch.zeros(n, dtype=torch.float32, device=g.device)
    if isinstance(mod, nn.Linear):
        a = x.reshape(n, -1, x.shape[-1])
        gg = g.reshape(n, -1, g.shape[-1])
        if mod.weight.requires_grad:
            out += _gram_sq_norm(a, gg)
        if mod.bias is not None and mod.bias.requires_grad:
            out += gg.sum(1).pow(2).sum(1)
    elif isinstance(mod, nn.Conv2d):
        k = rows_per_record(x.shape[0], n, mod)
        cout, ho, wo = g.shape[1], g.shape[2], g.shape[3]
        gg = g.reshape(n, k, cout, ho * wo)
        if mod.weight.requires_grad:
            u = conv_patches(mod, x, n, k, ho, wo)  # n, k, D, HoWo
            a = u.transpose(2, 3).reshape(n, k * ho * wo, -1)
            out += _gram_sq_norm(a, gg.transpose(2, 3).reshape(n, k * ho * wo, cout))
        if mod.bias is not None and mod.bias.requires_grad:
            out += gg.sum((1, 3)).pow(2).sum(1)
    elif isinstance(mod, nn.Embedding):
        idx = x.reshape(n, -1)
        gg = g.reshape(n, idx.shape[1], -1)
        same = idx.unsqueeze(2) == idx.unsqueeze(1)  # rows that add into the same embedding row
        if mod.padding_idx is not None:
            live = idx != mod.padding_idx
            same = same & live.unsqueeze(2) & live.unsqueeze(1)
        if mod.weight.requires_grad:
            out += (same * torch.bmm(gg, gg.transpose(1, 2))).sum((1, 2))
    else:  # pragma: no cover - use_ghost is False for the other layers
        raise TypeError(type(mod).__name__)
    return out


# ------------------------------------------------------------------------------------------------ book-keeping

def weighted_grads(mod: nn.Module, x: torch.Tensor, g: torch.Tensor, c: torch.Tensor, n: int):
    """(parameter name, Σᵢ cᵢ ∇ℓᵢ) for one call of ``mod``: one batched weight gradient with the output
    gradients of record i scaled by cᵢ."""
    x, g = as_fp32(x), as_fp32(g)
    k = rows_per_record(x.shape[0], n, mod)
    cr = c.repeat_interleave(k) if k > 1 else c  # one factor per row, rows record-major
    gw = g * cr.view(-1, *[1] * (g.dim() - 1))
    if isinstance(mod, nn.Linear):
        g2, a2 = gw.reshape(-1, gw.shape[-1]), x.reshape(-1, x.shape[-1])
        if mod.weight.requires_grad:
            yield "weight", g2.t() @ a2
        if mod.bias is not None and mod.bias.requires_grad:
            yield "bias", g2.sum(0)
    elif isinstance(mod, nn.Conv2d):
        if mod.weight.requires_grad:
            yield "weight", torch.nn.grad.conv2d_weight(x, mod.weight.shape, gw, mod.stride, mod.padding,
                                                        mod.dilation, groups=1)
        if mod.bias is not None and mod.bias.requires_grad:
            yield "bias", gw.sum((0, 2, 3))
    elif isinstance(mod, nn.Embedding):
        if mod.weight.requires_grad:
            out = torch.zeros(mod.weight.shape, dtype=gw.dtype, device=gw.device)
            out.index_add_(0, x.reshape(-1), gw.reshape(-1, gw.shape[-1]))
            if mod.padding_idx is not None:
                out[mod.padding_idx] = 0
            yield "weight", out
    else:  # GroupNorm/LayerNorm are always instantiated and kept
        for pname, gs in layer_grads(mod, x, g, n):
            if getattr(mod, pname).requires_grad:
                yield pname, torch.tensordot(c, gs, dims=([0], [0]))


# ------------------------------------------------------------------------------------------------ the pass

def ghost_clipped_sum(ps, loss_fn, records, max_norm: float, keep_bytes: int | None = None):
    """(Σᵢ clip_C(∇ℓᵢ) per parameter of ``ps.params``, the per-record norms (n,), the losses (n,))."""
    n = records[0].shape[0]
    losses, calls = ps.capture(loss_fn, records, n)
    budget = KEEP_BYTES if keep_bytes is None else keep_bytes
    by_mod: dict[int, list] = {}
    for mod, x, g in calls:
        by_mod.setdefault(id(mod), [mod]).append((x, g))
    del calls  # each layer's input and output gradient is dropped once its share is formed (memory reuse)
    sq = torch.zeros(n, dtype=torch.float32, device=losses.device)
    kept: dict[int, torch.Tensor] = {}
    redo: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []
    used = 0
    with full_precision(losses.device):
        while by_mod:
            mod, *xg = by_mod.pop(next(iter(by_mod)))
            if len(xg) == 1 and use_ghost(mod, xg[0][0], xg[0][1], n, keep=used < budget):
                sq += ghost_sq_norm(mod, xg[0][0], xg[0][1], n)
                redo.append((mod, *xg[0]))
                continue
            per: dict[str, torch.Tensor] = {}
            for x, g in xg:  # a module called several times: its per-record gradient is the sum over calls
                for pname, gs in layer_grads(mod, x, g, n):
                    if getattr(mod, pname).requires_grad:
                        per[pname] = gs if pname not in per else per[pname] + gs
            for gs in per.values():  # vector_norm: no n×p temporary (pow(2) would write one)
                sq += torch.linalg.vector_norm(gs.reshape(n, -1), dim=1).square()
            size = sum(gs.numel() * gs.element_size() for gs in per.values())
            if used + size <= budget or isinstance(mod, (nn.GroupNorm, nn.LayerNorm)):
                used += size
                for pname, gs in per.items():
                    kept[id(getattr(mod, pname))] = gs
            else:  # over the memory budget: drop them, recompute the weighted sum from a and g
                redo.extend((mod, x, g) for x, g in xg)
        norms = sq.sqrt()
        c = clip_factors(norms, max_norm)
        summed: dict[int, torch.Tensor] = {}
        while kept:
            key, gs = kept.popitem()
            summed[key] = torch.tensordot(c, gs, dims=([0], [0]))
        for mod, x, g in redo:
            for pname, s in weighted_grads(mod, x, g, c, n):
                key = id(getattr(mod, pname))
                summed[key] = s if key not in summed else summed[key] + s
    out = []
    for p in ps.params:
        s = summed.get(id(p))
        out.append(s.view(p.shape).to(p.dtype) if s is not None else torch.zeros_like(p))
    return out, norms, losses
