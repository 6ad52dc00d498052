"""A Target is what an attacker queries: an ε-predictor, its ᾱ schedule, a sampler, and what else the
threat model hands the attacker (for PFDM, the uploads)."""
from __future__ import annotations

import contextlib
from dataclasses import dataclass
from typing import Callable

import torch

from ..core.errors import BadInput
from ..core.schedule import Schedule
from .flops import warn_if_bf16_emulated
from .sampling import ddim_chain, ddpm_chain


@dataclass(frozen=True)
class TargetCapabilities:
    """What an attack may do with a target (:attr:`Target.capabilities`): the typed answer to "can this attack run
    here?", read by the attacks and the runners instead of the target's class or its optional attributes."""
    #: ``predict_noise`` is one network, so gradients can be taken through :meth:`Target.network_eps` (gsa)
    white_box: bool
    #: the network denoises VAE latents; records are pixels the target encodes (:meth:`Target.query_inputs`)
    latent: bool
    #: the network is conditioned on caption rows: records carry captions (clid; attacks with
    #: ``text_conditioning = False`` refuse it)
    text_conditioned: bool
    #: the target holds PFDM's noised uploads (reconstruction attacks the real ones)
    uploads: bool
    #: networks one generation chains (PFDM's pipeline: 2, the shared model then the client's; else 1)
    stages: int
    #: a record's shape, C×H×W in pixel space (what ``--members`` files must hold)
    record_shape: tuple[int, ...]


@dataclass
class Uploads:
    """Noised uploads a server (or anyone holding them) sees: x̃ = √ᾱ_{t0}·CLIP(x, C) + √(1−ᾱ_{t0})·z."""
    x: torch.Tensor          # N×C×H×W
    y: torch.Tensor          # labels (sent in the clear)
    index: torch.Tensor      # dataset index of each source record (ground truth, never given to the server)
    client: torch.Tensor     # client id of each upload
    t0: int                  # 1-indexed upload level
    clip: float


@dataclass(frozen=True)
class Calls:
    """How a target's queries reach its network when not as one call ``model(x_t, t, y)``: ``extra``, the extra
    condition every call carries (PFDM's clip flag); ``eps_fn(x_t, t, y)``, ε computed otherwise (several networks,
    an outside model's call convention); ``net_eps`` (:attr:`Target._net_eps`); ``sampler``, a generation of its
    own (PFDM's pipeline: ``sampler(n, y, seed=, sampler=, ddim_steps=, batch_size=)``)."""
    extra: int | None = None
    eps_fn: Callable | None = None
    net_eps: Callable | None = None
    sampler: Callable | None = None


class Target:
    """``predict_noise(x_t, t, y=None)`` batched, on the target's device, EMA weights, no grad."""

    def __init__(self, name: str, method: str, model: torch.nn.Module, schedule: Schedule, device,
                 num_classes: int | None, *, clip_sample: bool = True, note: str = "", uploads: Uploads | None = None,
                 meta: dict | None = None, calls: Calls | None = None):
        calls = calls or Calls()
        self.name = name
        self.method = method
        self.model = model.eval() if model is not None else None
        self.schedule = schedule
        self.device = torch.device(device)
        self.num_classes = num_classes
        self.extra = calls.extra
        self.clip_sample = clip_sample
        self.note = note
        self._sampler = calls.sampler
        self._eps_fn = calls.eps_fn
        #: ``net_eps(net, x_t, t, y, extra)``: ε from one call of ``net`` — the target's model or a functional
        #: stand-in with other parameters — when ``eps_fn`` is that one network plus a differentiable conversion
        #: (an outside model's call convention and prediction type), so gradients can be taken through it
        self._net_eps = calls.net_eps
        self.uploads = uploads
        self.meta = meta or {}
        #: the targets a generation chains, in order (PFDM's pipeline: shared, client); empty: this one alone
        self.stages: tuple[Target, ...] = ()
        self.alphas_cumprod = schedule.alphas_cumprod(self.device)
        self.num_timesteps = schedule.num_timesteps
        self._autocast: torch.dtype | None = None  # set by query_precision

    def query_inputs(self, x: torch.Tensor, y: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
        """What the network is queried with for records ``x`` (pixels) of class ``y``: themselves here; a latent
        text-to-image target of a native run encodes them and maps each label to its caption's row."""
        return x, y

    @contextlib.contextmanager
    def query_precision(self, precision: str = "fp32"):
        """Within the block, ``predict_noise`` runs the network under autocast (``bf16``: matmuls and convolutions
        in bfloat16, weights unchanged) and returns float32, so what an attack computes from ε̂ stays fp32."""
        if precision not in ("fp32", "bf16"):
            raise BadInput(f"attack.precision={precision!r}: choose fp32 or bf16")
        if precision == "bf16":
            warn_if_bf16_emulated(self.device, "attack.precision")
        old, self._autocast = self._autocast, (torch.bfloat16 if precision == "bf16" else None)
        try:
            yield self
        finally:
            self._autocast = old

    @property
    def capabilities(self) -> TargetCapabilities:
        return TargetCapabilities(white_box=self.white_box, latent=False, text_conditioned=False,
                                  uploads=self.uploads is not None, stages=max(1, len(self.stages)),
                                  record_shape=tuple(int(s) for s in self.meta.get("shape") or ()))

    @property
    def white_box(self) -> bool:
        """True when ``predict_noise`` is one network, ``model``, so gradients can be taken (:meth:`network_eps`);
        False for a target that composes several (PFDM's pipeline)."""
        return self.model is not None and (self._eps_fn is None or self._net_eps is not None)

    def network_eps(self, net, x_t: torch.Tensor, t: torch.Tensor, y, extra) -> torch.Tensor:
        """ε of one call of ``net`` in this target's convention, with gradients (white-box targets only): privbench's
        own ``net(x_t, t, y, extra)``, or an outside model's call and prediction-type conversion."""
        if self._net_eps is not None:
            return self._net_eps(net, x_t, t, y, extra)
        return net(x_t, t, y, extra)

    # ------------------------------------------------------------------ queries
    def _check(self, x_t, y):
        if x_t.dim() != 4:
            raise BadInput(f"predict_noise: x_t must be N×C×H×W, got shape {tuple(x_t.shape)}")
        if self.num_classes and y is None:
            raise BadInput("predict_noise: this target is class-conditional; pass y (labels are public)")

    @torch.no_grad()
    def predict_noise(self, x_t: torch.Tensor, t, y: torch.Tensor | None = None) -> torch.Tensor:
        self._check(x_t, y)
        x_t = x_t.to(self.device)
        if not torch.is_tensor(t):
            t = torch.full((x_t.shape[0],), int(t), dtype=torch.long)
        t = t.to(self.device).long().expand(x_t.shape[0]) if t.dim() == 0 else t.to(self.device).long()
        y = y.to(self.device).long() if (y is not None and self.num_classes) else None
        if self._autocast is not None:
            with torch.autocast(self.device.type, dtype=self._autocast):
                return self._predict(x_t, t, y).float()
        return self._predict(x_t, t, y)

    def _predict(self, x_t, t, y):
        if self._eps_fn is not None:
            return self._eps_fn(x_t, t, y)
        extra = None
        if self.extra is not None:
            extra = torch.full((x_t.shape[0],), self.extra, dtype=torch.long, device=self.device)
        return self.model(x_t, t, y, extra)

    # ------------------------------------------------------------------ sampling
    @torch.no_grad()
    def sample(self, n: int, y: torch.Tensor | None = None, *, seed: int = 0, sampler: str = "ddpm",
               ddim_steps: int = 100, batch_size: int = 500) -> tuple[torch.Tensor, torch.Tensor | None]:
        """Draw ``n`` samples (labels ``y`` or uniform classes); returns (images, labels) on CPU."""
        if self.num_classes and y is None:
            g = torch.Generator().manual_seed(seed)
            y = torch.randint(0, self.num_classes, (n,), generator=g)
        if self._sampler is not None:
            return self._sampler(n, y, seed=seed, sampler=sampler, ddim_steps=ddim_steps, batch_size=batch_size)
        return self.sample_chain(n, y, seed=seed, sampler=sampler, ddim_steps=ddim_steps, batch_size=batch_size)

    def sample_chain(self, n, y, *, seed, sampler, ddim_steps, batch_size, x_start=None, t_start=None, t_stop=0,
                     desc=None):
        """Run this target's own chain from ``x_start`` at ``t_start`` (default pure noise at T−1)."""
        outs = []
        T = self.num_timesteps
        t_start = T - 1 if t_start is None else t_start
        shape = self.meta.get("shape")
        sched = self.schedule.scheduler(clip_sample=self.clip_sample)
        for b, lo in enumerate(range(0, n, batch_size)):
            hi = min(n, lo + batch_size)
            g = torch.Generator(device=self.device).manual_seed(seed * 10007 + b)
            if x_start is None:
                x = torch.randn((hi - lo, *shape), generator=g, device=self.device)
            else:
                x = x_start[lo:hi].to(self.device)
            yb = y[lo:hi].to(self.device) if y is not None else None

            def eps_fn(xt, tt, yb=yb):
                return self.predict_noise(xt, tt, yb)

            if sampler == "ddim":
                x = ddim_chain(eps_fn, x, t_start, t_stop, self.alphas_cumprod, ddim_steps, clip_x0=self.clip_sample,
                               desc=desc)
            else:
                x = ddpm_chain(eps_fn, x, t_start, t_stop, sched, generator=g, desc=desc)
            outs.append(x)
        return torch.cat(outs).cpu(), (y.cpu() if y is not None else None)
