"""Per-record gradients, flat clipping and the Gaussian noise of DP-SGD.

Contract of a loss for this module: ``loss_fn(model, *records) -> (n,)`` returns one loss per record.
Every tensor in ``records`` has the records on its leading dimension; inside, the model may be called on
several rows per record (e.g. K noise draws) as long as the rows of one record are contiguous
(record-major: row j belongs to record j // k), and no layer mixes rows (GroupNorm/LayerNorm are per row;
BatchNorm is not allowed). Other modules (a frozen teacher, a discriminator) may appear in the loss: only
the parameters of ``model`` get per-record gradients.

Backends (all give the gradient of each record's loss w.r.t. every trainable parameter of ``model``):

- ``ghost`` (default): DP-SGD's clipped sum Σᵢ clip_C(∇ℓᵢ) from the same captured layer inputs and output
  gradients as ``hooks``, without the per-record gradients of the whole model: per-record norms layer by
  layer (ghost norms where cheaper), then book-keeping sums (privbench.models.ghost). Its ``grads`` (all
  per-record gradients, for tests and tools) is the ``hooks`` computation.
- ``hooks``: forward hooks record each layer's input and output; one ``autograd.grad`` with
  respect to the layer outputs (parameters frozen, so autograd computes no parameter gradients at all)
  gives the output gradients, and each layer's per-record parameter gradient is formed directly:
  Linear as a batched matrix product of inputs and output gradients, Conv2d on CPU by the convolution trick
  (records as the groups of one grouped convolution, whose weight gradient is the per-record gradient) and
  elsewhere as a batched matrix product of unfolded inputs and output gradients, GroupNorm/LayerNorm
  from the re-normalized input, Embedding by scatter-add. The K rows of a record are folded into the
  contraction, so noise multiplicity costs no per-draw gradient memory. Conv patches come from a strided
  view of the padded input copied by ``reshape``, and every layer tensor is reshaped (never ``view``-ed), so
  non-contiguous inputs are handled (opacus' conv grad sampler returns wrong — often all-zero — gradients
  for convs fed by a diffusers attention block's transposed output; this one is tested there).
- ``vmap``: ``torch.func`` — ``vmap(grad(loss of one record))`` with ``functional_call``; any architecture
  that torch.func supports. On the tiny UNet (CPU, 1 thread) it is slower than ``hooks`` at K = 1 and about
  as fast at K = 4 (benchmarks/dpsgd_step_cost.py).

All are checked against a loop of per-record ``backward`` passes in tests/models/test_per_sample.py, on
the architectures DPDM and DP-SAD train (with and without a diffusers attention block).
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch
import torch.nn.functional as F
from torch import nn

from ..core.mechanisms import clipped_sum

BACKENDS = ("ghost", "hooks", "vmap")

_SUPPORTED = (nn.Linear, nn.Conv2d, nn.GroupNorm, nn.LayerNorm, nn.Embedding)


class PerSampleGrads:
    """Per-record gradients of ``model``'s trainable parameters.

    ``grads(loss_fn, *records)`` → (per-record gradients, one (n, *p.shape) tensor per parameter, in the
    order of ``self.params``; the per-record losses, detached).
    """

    def __init__(self, model: nn.Module, backend: str = "hooks"):
        if backend not in BACKENDS:
            raise ValueError(f"per-sample backend {backend!r}: choose one of {', '.join(BACKENDS)}")
        self.model = model
        self.backend = backend
        self.names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.params = [p for p in model.parameters() if p.requires_grad]
        if backend in ("hooks", "ghost"):
            self._check_hookable()

    # ---------------------------------------------------------------------------------------- checks
    def _check_hookable(self) -> None:
        owned = {}
        for mod_name, mod in self.model.named_modules():
            direct = [(n, p) for n, p in mod.named_parameters(recurse=False) if p.requires_grad]
            if not direct:
                continue
            if not isinstance(mod, _SUPPORTED):
                raise ValueError(f"per-sample backend {self.backend!r}: module {mod_name} ({type(mod).__name__}) has "
                                 f"trainable parameters and is not supported; use backend 'vmap'")
            if isinstance(mod, nn.Conv2d) and (mod.groups != 1 or mod.padding_mode != "zeros"
                                               or isinstance(mod.padding, str)):
                raise ValueError(f"per-sample backend {self.backend!r}: conv {mod_name} (groups/padding mode) is not "
                                 f"supported; use backend 'vmap'")
            if isinstance(mod, nn.Embedding) and (mod.max_norm is not None or mod.sparse):
                raise ValueError(f"per-sample backend {self.backend!r}: embedding {mod_name} with max_norm/sparse")
            for n, p in direct:
                owned[id(p)] = (mod, n)
        missing = [n for n, p in zip(self.names, self.params) if id(p) not in owned]
        if missing:
            raise ValueError(f"per-sample backend {self.backend!r}: parameters not owned by a supported layer: "
                             f"{missing}")
        self._owner = owned

    # ---------------------------------------------------------------------------------------- public
    def grads(self, loss_fn: Callable, *records: torch.Tensor) -> tuple[list[torch.Tensor], torch.Tensor]:
        n = records[0].shape[0]
        if self.backend == "vmap":
            return self._grads_vmap(loss_fn, records, n)
        return self._grads_hooks(loss_fn, records, n)  # ghost: the same per-layer formulas, all instantiated

    def clipped_sum(self, loss_fn: Callable, *records: torch.Tensor,
                    max_norm: float) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """(Σᵢ clip_C(∇ℓᵢ) per parameter, the unclipped per-record norms (n,), the per-record losses).

        ``ghost`` forms it from layer inputs and output gradients without the per-record gradients of the
        whole model (privbench.models.ghost); the other backends clip their per-record gradients.
        """
        if self.backend == "ghost":
            from .ghost import ghost_clipped_sum

            return ghost_clipped_sum(self, loss_fn, records, max_norm)
        per_sample, losses = self.grads(loss_fn, *records)
        summed, norms = clipped_sum(per_sample, max_norm)
        return summed, norms, losses

    # ---------------------------------------------------------------------------------------- vmap
    def _grads_vmap(self, loss_fn, records, n):
        from torch.func import functional_call, grad, vmap

        model = self.model
        names = self.names
        frozen = {k: v.detach() for k, v in model.named_parameters() if not v.requires_grad}
        buffers = dict(model.named_buffers())
        params = {k: p.detach() for k, p in zip(names, self.params)}

        class _Functional(nn.Module):  # the model called with given parameters (keeps loss_fn's call style)
            def __init__(self, p):
                super().__init__()
                self._p = p

            def forward(self, *a, **kw):
                return functional_call(model, ({**self._p, **frozen}, buffers), a, kw)

        def one(p, *rec):
            loss = loss_fn(_Functional(p), *[r.unsqueeze(0) for r in rec]).sum()
            return loss, loss

        gfn = vmap(grad(one, has_aux=True), in_dims=(None,) + (0,) * len(records), randomness="different")
        g, losses = gfn(params, *records)
        return [g[k] for k in names], losses.detach()

    # ---------------------------------------------------------------------------------------- hooks
    def capture(self, loss_fn, records, n) -> tuple[torch.Tensor, list[tuple[nn.Module, torch.Tensor, torch.Tensor]]]:
        """One forward and one backward to the layer outputs: (per-record losses, detached; and for every call
        of a layer with trainable parameters, (layer, its input, the gradient of Σ losses w.r.t. its output)).

        Parameters are frozen meanwhile, so autograd forms no parameter gradient at all."""
        calls: list[tuple[nn.Module, torch.Tensor, torch.Tensor]] = []

        def fwd_hook(mod, inputs, out):
            if not out.requires_grad:  # first layers: their inputs need no gradient; make the output a leaf
                out = out.detach().requires_grad_(True)
            calls.append((mod, inputs[0].detach(), out))
            return out

        mods = {id(m): m for m, _ in self._owner.values()}
        handles = [m.register_forward_hook(fwd_hook) for m in mods.values()]
        flags = [p.requires_grad for p in self.params]
        try:
            for p in self.params:
                p.requires_grad_(False)
            losses = loss_fn(self.model, *records)
            if losses.shape != (n,):
                raise ValueError(f"loss_fn must return one loss per record, shape ({n},); got {tuple(losses.shape)}")
            outs = [o for _, _, o in calls]
            out_grads = torch.autograd.grad(losses.sum(), outs, allow_unused=True)
        finally:
            for h in handles:
                h.remove()
            for p, f in zip(self.params, flags):
                p.requires_grad_(f)
        return losses.detach(), [(mod, x, g) for (mod, x, _), g in zip(calls, out_grads) if g is not None]

    def _grads_hooks(self, loss_fn, records, n):
        losses, calls = self.capture(loss_fn, records, n)
        acc: dict[int, torch.Tensor] = {}
        with full_precision(losses.device):
            for mod, x, g in calls:
                for pname, gs in _layer_grads(mod, x, g, n):
                    p = getattr(mod, pname)
                    if not p.requires_grad:
                        continue
                    key = id(p)
                    acc[key] = gs if key not in acc else acc[key] + gs
        result = []
        for p in self.params:
            gs = acc.get(id(p))
            result.append(gs.view(n, *p.shape) if gs is not None else torch.zeros((n, *p.shape), dtype=p.dtype,
                                                                                    device=p.device))
        return result, losses


def _rows_per_record(N: int, n: int, mod: nn.Module) -> int:
    if N % n != 0:
        raise ValueError(f"per-sample hooks: layer {type(mod).__name__} saw a batch of {N} rows for {n} records; "
                         f"rows must be record-major (k rows per record)")
    return N // n


def full_precision(device) -> contextlib.AbstractContextManager:
    """Autocast off: per-record norms and sums are formed in fp32 even when the forward ran in bf16."""
    return torch.autocast(torch.device(device).type, enabled=False)


def as_fp32(t: torch.Tensor) -> torch.Tensor:
    """Layer inputs/output gradients captured under bf16/fp16 autocast, in fp32 (the norm that clips a record
    and the sum it enters are then computed from the same values in the same precision)."""
    return t.float() if t.dtype in (torch.float16, torch.bfloat16) else t


def conv_route(mod: nn.Conv2d, x: torch.Tensor, g: torch.Tensor, n: int) -> str:
    """How per-record conv weight gradients are formed: ``grouped`` (the convolution trick) or ``patches``
    (unfolded input patches × output gradients, one batched matmul per draw).

    A fixed rule (never timing-based, so the same config gives the same numbers), from per-layer timings on
    CPU with one thread (the models of benchmarks/dpsgd_step_cost.py; with freed memory retained, see
    privbench.core.threads.retain_freed_memory — without it page faults dominate and mislead): for narrow convs
    (Cin ≤ 64: the tiny UNet, 64 records) the grouped kernel costs 1.4× the batched weight gradient and
    patches 2.2× (K = 1) to 3× (K = 4); for wide ones (Cin ≥ 128: the paper UNet) patches are faster than
    the grouped kernel by 1.1–2× (K = 1 and 4), as for 1×1 convs. Off CPU: patches."""
    if x.device.type != "cpu" or mod.kernel_size == (1, 1):
        return "patches"
    return "grouped" if x.shape[1] <= 64 else "patches"


def conv_weight_grads_grouped(mod: nn.Conv2d, x: torch.Tensor, g: torch.Tensor, n: int, k: int) -> torch.Tensor:
    """Per-record conv weight gradients (n, Cout, Cin, kh, kw) by the convolution trick: the n records become
    the n groups of one grouped convolution, whose weight gradient (the library's own backward kernel, batched
    over the k rows of a record) is the per-record gradient. On CPU this is 1.5–2× faster than patches + bmm
    for 3×3 convs (benchmarks/dpsgd_step_cost.py)."""
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


def _layer_grads(mod: nn.Module, x: torch.Tensor, g: torch.Tensor, n: int):
    """(parameter name, per-record gradient (n, ...)) of one call of ``mod`` with input x and output grad g."""
    k = _rows_per_record(x.shape[0], n, mod)
    x, g = as_fp32(x), as_fp32(g)
    if isinstance(mod, nn.Linear):
        a = x.reshape(n, -1, x.shape[-1])
        gg = g.reshape(n, -1, g.shape[-1])
        yield "weight", torch.bmm(gg.transpose(1, 2), a)
        if mod.bias is not None:
            yield "bias", gg.sum(1)
    elif isinstance(mod, nn.Conv2d):
        cout = g.shape[1]
        ho, wo = g.shape[2], g.shape[3]
        gg = g.reshape(n, k, cout, -1)
        if conv_route(mod, x, g, n) == "grouped":
            w = conv_weight_grads_grouped(mod, x, g, n, k)
        else:
            u = conv_patches(mod, x, n, k, ho, wo)
            w = torch.bmm(gg[:, 0], u[:, 0].transpose(1, 2))
            for j in range(1, k):  # the k rows of a record add up (no transposed copies)
                w.baddbmm_(gg[:, j], u[:, j].transpose(1, 2))
        yield "weight", w.view(n, *mod.weight.shape)
        if mod.bias is not None:
            yield "bias", gg.sum((1, 3))
    elif isinstance(mod, nn.GroupNorm):
        xhat = F.group_norm(x, mod.num_groups, eps=mod.eps)
        dims = tuple(range(2, x.dim()))
        c = x.shape[1]
        if mod.weight is not None:
            yield "weight", (g * xhat).sum(dims).view(n, k, c).sum(1)
        if mod.bias is not None:
            yield "bias", g.sum(dims).view(n, k, c).sum(1)
    elif isinstance(mod, nn.LayerNorm):
        xhat = F.layer_norm(x, mod.normalized_shape, eps=mod.eps)
        shp = mod.normalized_shape
        if mod.weight is not None:
            yield "weight", (g * xhat).reshape(n, -1, *shp).sum(1)
        if mod.bias is not None:
            yield "bias", g.reshape(n, -1, *shp).sum(1)
    elif isinstance(mod, nn.Embedding):
        idx = x.reshape(n, -1)
        gg = g.reshape(n, idx.shape[1], -1)
        out = torch.zeros((n, mod.num_embeddings, gg.shape[-1]), dtype=g.dtype, device=g.device)
        rec = torch.arange(n, device=g.device).unsqueeze(1).expand_as(idx)
        out.index_put_((rec.reshape(-1), idx.reshape(-1)), gg.reshape(-1, gg.shape[-1]), accumulate=True)
        if mod.padding_idx is not None:
            out[:, mod.padding_idx] = 0
        yield "weight", out
    else:  # pragma: no cover - filtered by _check_hookable
        raise TypeError(type(mod).__name__)


@contextlib.contextmanager
def frozen(*modules: nn.Module):
    """Temporarily set requires_grad=False on every parameter of ``modules`` (restored on exit)."""
    saved = [(p, p.requires_grad) for m in modules for p in m.parameters()]
    try:
        for p, _ in saved:
            p.requires_grad_(False)
        yield
    finally:
        for p, f in saved:
            p.requires_grad_(f)
