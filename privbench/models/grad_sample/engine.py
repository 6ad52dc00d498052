"""Per-record gradients, flat clipping and the Gaussian noise of DP-SGD: the engine (hooks, ghost and vmap backends).

Contract of a loss: ``loss_fn(model, *records) -> (n,)``, one loss per record, records on the leading dimension of
every tensor. The model may be called on several rows per record (K noise draws) if they are record-major (row j
belongs to record j // k) and no layer mixes rows (GroupNorm/LayerNorm are per row; no BatchNorm). Other modules (a
frozen teacher, a discriminator) may appear in the loss: only ``model``'s parameters get per-record gradients.

Backends (docs/scaling.md §6): ``ghost`` (default; :mod:`.ghost`), ``hooks`` (:meth:`PerSampleGrads.capture`, then
each layer's per-record gradient from the formulas :mod:`.layers` registers by module type, the K rows of a record
folded into the contraction) and ``vmap`` (``torch.func``: any architecture it supports). Layer tensors are
reshaped, never ``view``-ed, for the non-contiguous input a diffusers attention block feeds a conv (where opacus
fails, :mod:`privbench.models.grad_sample`). All are checked against per-record ``backward`` passes in
tests/models/test_per_sample.py.
"""
from __future__ import annotations

import contextlib
from typing import Callable

import torch
from torch import nn
from torch.func import functional_call, grad, vmap

from ...core.mechanisms import clipped_sum
from .ghost import ghost_clipped_sum
from .layers import full_precision, layer_grads, sampler_for

BACKENDS = ("ghost", "hooks", "vmap")



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
            if sampler_for(mod) is None:
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
            return self._grads_vmap(loss_fn, records)
        return self._grads_hooks(loss_fn, records, n)  # ghost: the same per-layer formulas, all instantiated

    def clipped_sum(self, loss_fn: Callable, *records: torch.Tensor,
                    max_norm: float) -> tuple[list[torch.Tensor], torch.Tensor, torch.Tensor]:
        """(Σᵢ clip_C(∇ℓᵢ) per parameter, the unclipped per-record norms (n,), the per-record losses)."""
        if self.backend == "ghost":
            return ghost_clipped_sum(self, loss_fn, records, max_norm)
        per_sample, losses = self.grads(loss_fn, *records)
        summed, norms = clipped_sum(per_sample, max_norm)
        return summed, norms, losses

    # ---------------------------------------------------------------------------------------- vmap
    def _grads_vmap(self, loss_fn, records):
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
                for pname, gs in layer_grads(mod, x, g, n):
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


@contextlib.contextmanager
def requires_grad(*modules: nn.Module, value: bool):
    """Temporarily set requires_grad=``value`` on every parameter of ``modules`` (restored on exit)."""
    saved = [(p, p.requires_grad) for m in modules for p in m.parameters()]
    try:
        for p, _ in saved:
            p.requires_grad_(value)
        yield
    finally:
        for p, f in saved:
            p.requires_grad_(f)


def frozen(*modules: nn.Module):
    """Temporarily set requires_grad=False on every parameter of ``modules`` (restored on exit)."""
    return requires_grad(*modules, value=False)
