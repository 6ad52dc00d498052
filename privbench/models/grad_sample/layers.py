"""Per-record parameter gradients of one layer call, by layer type (as opacus' grad samplers): each function takes
the module, its input ``x`` and output gradient ``g`` (rows record-major: ``k`` rows per record) and the number of
records ``n``, and yields (parameter name, per-record gradient (n, *parameter shape)). The engine
(:mod:`.engine`) and the ghost clipping (:mod:`.ghost`) dispatch on :data:`GRAD_SAMPLERS` by module type; a
module of another type with parameters of its own makes the ``hooks``/``ghost`` backends refuse the model."""
from __future__ import annotations

import contextlib
from typing import Callable, Iterator

import torch
import torch.nn.functional as F
from torch import nn

#: module type -> its per-record gradient function (``register_grad_sampler``)
GRAD_SAMPLERS: dict[type, Callable[..., Iterator[tuple[str, torch.Tensor]]]] = {}


def register_grad_sampler(*types: type) -> Callable:
    def deco(fn):
        for t in types:
            GRAD_SAMPLERS[t] = fn
        return fn

    return deco


def sampler_for(mod: nn.Module):
    """The grad sampler of ``mod``'s type (its nearest registered base class), or None."""
    for t in type(mod).__mro__:
        if t in GRAD_SAMPLERS:
            return GRAD_SAMPLERS[t]
    return None


def layer_grads(mod: nn.Module, x: torch.Tensor, g: torch.Tensor, n: int):
    """(parameter name, per-record gradient (n, ...)) of one call of ``mod`` with input x and output grad g."""
    fn = sampler_for(mod)
    if fn is None:  # pragma: no cover - refused by PerSampleGrads._check_hookable
        raise TypeError(type(mod).__name__)
    k = rows_per_record(x.shape[0], n, mod)
    yield from fn(mod, as_fp32(x), as_fp32(g), n, k)


def rows_per_record(N: int, n: int, mod: nn.Module) -> int:
    if N % n != 0:
        raise ValueError(f"per-sample hooks: layer {type(mod).__name__} saw a batch of {N} rows for {n} records; "
                         f"rows must be record-major (k rows per record)")
    return N // n


def full_precision(device) -> contextlib.AbstractContextManager:
    """Autocast off: per-record norms and sums are formed in fp32 even when the forward ran in bf16."""
    return torch.autocast(torch.device(device).type, enabled=False)


def as_fp32(t: torch.Tensor) -> torch.Tensor:
    """Layer inputs/output gradients captured under bf16/fp16 autocast, in fp32 (the clipping norm and the sum
    then read the same values)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def conv_route(mod: nn.Conv2d, x: torch.Tensor) -> str:
    """How per-record conv weight gradients are formed: ``grouped`` (the convolution trick) or ``patches``
    (unfolded input patches × output gradients, one batched matmul per draw).

    A fixed rule (never timing-based, so the same config gives the same numbers) from CPU timings
    (docs/benchmarks.md, "Measurements behind the code"): grouped for narrow convs (Cin ≤ 64), patches for wide
    and 1×1 convs and off CPU."""
    if x.device.type != "cpu" or mod.kernel_size == (1, 1):
        return "patches"
    return "grouped" if x.shape[1] <= 64 else "patches"


def conv_weight_grads_grouped(mod: nn.Conv2d, x: torch.Tensor, g: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """Per-record conv weight gradients (n, Cout, Cin, kh, kw) by the convolution trick: the n records become
    the n groups of one grouped convolution, whose weight gradient (the library's own backward kernel, batched
    over the k rows of a record) is the per-record gradient; :func:`conv_route` says when it is used."""
    cin, cout = x.shape[1], g.shape[1]
    if k == 1:
        xg, gg = x.reshape(1, n * cin, *x.shape[2:]), g.reshape(1, n * cout, *g.shape[2:])
    else:  # rows record-major → batch of k rows, records along channels
        xg = x.reshape(n, k, cin, *x.shape[2:]).transpose(0, 1).reshape(k, n * cin, *x.shape[2:])
        gg = g.reshape(n, k, cout, *g.shape[2:]).transpose(0, 1).reshape(k, n * cout, *g.shape[2:])
    w = torch.nn.grad.conv2d_weight(xg, (n * cout, cin, *mod.kernel_size), gg, mod.stride, mod.padding,
                                    mod.dilation, groups=n)
    return w.view(n, cout, cin, *mod.kernel_size)


def conv_patches(mod: nn.Conv2d, x: torch.Tensor, n: int, k: int, ho: int, wo: int) -> torch.Tensor:
    """The input patches of every output position, (n, k, Cin·kh·kw, Ho·Wo)."""
    cin = x.shape[1]
    (kh, kw), (sh, sw), (ph, pw) = mod.kernel_size, mod.stride, mod.padding
    if mod.dilation == (1, 1):
        # patches from a strided view of the padded input (Tensor.unfold is a view), copied with the
        # spatial axes innermost so that the copy runs over contiguous rows (F.unfold's im2col is slow)
        xp = F.pad(x, (pw, pw, ph, ph)) if (ph or pw) else x
        u = xp.unfold(2, kh, sh).unfold(3, kw, sw)[:, :, :ho, :wo]  # N, Cin, Ho, Wo, kh, kw
        return u.permute(0, 1, 4, 5, 2, 3).reshape(n, k, cin * kh * kw, ho * wo)
    u = F.unfold(x, mod.kernel_size, dilation=mod.dilation, padding=mod.padding, stride=mod.stride)
    return u.view(n, k, u.shape[1], -1)


@register_grad_sampler(nn.Linear)
def _linear(mod: nn.Linear, x: torch.Tensor, g: torch.Tensor, n: int, k: int):
    del k  # the grad-sampler interface; a record's k rows are summed by the reshape to n record-major rows
    a = x.reshape(n, -1, x.shape[-1])
    gg = g.reshape(n, -1, g.shape[-1])
    yield "weight", torch.bmm(gg.transpose(1, 2), a)
    if mod.bias is not None:
        yield "bias", gg.sum(1)


@register_grad_sampler(nn.Conv2d)
def _conv2d(mod: nn.Conv2d, x: torch.Tensor, g: torch.Tensor, n: int, k: int):
    cout = g.shape[1]
    ho, wo = g.shape[2], g.shape[3]
    gg = g.reshape(n, k, cout, -1)
    if conv_route(mod, x) == "grouped":
        w = conv_weight_grads_grouped(mod, x, g, n, k)
    else:
        u = conv_patches(mod, x, n, k, ho, wo)
        w = torch.bmm(gg[:, 0], u[:, 0].transpose(1, 2))
        for j in range(1, k):  # the k rows of a record add up (no transposed copies)
            w.baddbmm_(gg[:, j], u[:, j].transpose(1, 2))
    yield "weight", w.view(n, *mod.weight.shape)
    if mod.bias is not None:
        yield "bias", gg.sum((1, 3))


@register_grad_sampler(nn.GroupNorm)
def _group_norm(mod: nn.GroupNorm, x: torch.Tensor, g: torch.Tensor, n: int, k: int):
    xhat = F.group_norm(x, mod.num_groups, eps=mod.eps)
    dims = tuple(range(2, x.dim()))
    c = x.shape[1]
    if mod.weight is not None:
        yield "weight", (g * xhat).sum(dims).view(n, k, c).sum(1)
    if mod.bias is not None:
        yield "bias", g.sum(dims).view(n, k, c).sum(1)


@register_grad_sampler(nn.LayerNorm)
def _layer_norm(mod: nn.LayerNorm, x: torch.Tensor, g: torch.Tensor, n: int, k: int):
    del k  # the grad-sampler interface; a record's k rows are summed by the reshape to n record-major rows
    xhat = F.layer_norm(x, mod.normalized_shape, eps=mod.eps)
    shp = mod.normalized_shape
    if mod.weight is not None:
        yield "weight", (g * xhat).reshape(n, -1, *shp).sum(1)
    if mod.bias is not None:
        yield "bias", g.reshape(n, -1, *shp).sum(1)


@register_grad_sampler(nn.Embedding)
def _embedding(mod: nn.Embedding, x: torch.Tensor, g: torch.Tensor, n: int, k: int):
    del k  # the grad-sampler interface; a record's k rows are summed by the reshape to n record-major rows
    idx = x.reshape(n, -1)
    gg = g.reshape(n, idx.shape[1], -1)
    out = torch.zeros((n, mod.num_embeddings, gg.shape[-1]), dtype=g.dtype, device=g.device)
    rec = torch.arange(n, device=g.device).unsqueeze(1).expand_as(idx)
    out.index_put_((rec.reshape(-1), idx.reshape(-1)), gg.reshape(-1, gg.shape[-1]), accumulate=True)
    if mod.padding_idx is not None:
        out[:, mod.padding_idx] = 0
    yield "weight", out
