"""``pfdm``: Personalized Federated Diffusion Models with LDP uploads (docs/methods.md §4; one communication round).

Algorithm 1: every client trains a non-private t ≤ t0 denoiser with a clip flag on its raw records and uploads
each record once, clipped and noised to the upload level; the server (:func:`train_server`) trains the shared
model on the uploads alone. Algorithm 2: :func:`two_stage_sample`. Only ``shared`` carries a formal guarantee;
``client:K`` and ``pipeline:K`` expose a non-private local model (``privacy`` None).
"""
from __future__ import annotations

import json
import logging
from dataclasses import dataclass
from pathlib import Path

import torch
from safetensors import safe_open
from torch import nn

from ...core import distributed
from ...core.config import register_section, setting
from ...core.errors import BadInput
from ...core.io import atomic_write_json, load_weights, save_weights
from ...core.mechanisms import Source, clip_l2, gaussian, ldp_upload, noise_generator
from ...core.registry import METHODS
from ...core.schedule import t0_to_model_t
from ...core.seeding import sub_seed
from ..debug import debug_log
from ..federated import FederatedMethod, parse_client_target
from ..loop import ema_capped
from ..public_init import load_into, pretrained_denoiser
from ..target import Calls, Target, Uploads
from ..training import TrainData, is_trained, load_ema, train_denoiser
from ..unet import build_denoiser
from ..unit_pool import TrainUnit, train_units

LOG = logging.getLogger(__name__)


@dataclass
class PFDMConfig:
    """PFDM's own settings (the client split's keys share the ``pfdm`` section: privbench.data.splits)."""
    clip: float = setting(10.0, lo=0.0, lo_open=True, help="L2 clip C of the whole image before noising")
    t0: int = setting(690, lo=1, help="upload noise level, 1-indexed as in the paper: alphas_cumprod[t0-1]")
    clip_mix: float = setting(0.5, lo=0.0, hi=1.0, help="share of clipped copies in a local batch")
    local_steps: int = setting(600, lo=1, help="steps of each client's t<=t0 denoiser")
    server_steps: int = setting(1200, lo=1, help="steps of the shared T-step model on the uploads (tiny: 1200 = 300 "
                                                 "epochs of 256 uploads, the paper's global-model length)")
    calibrate: str = setting("t0", choices=["t0", "clip"], training=False,
                             help="how a suite's epsilons axis sets the per-upload epsilon (analytic Gaussian "
                                  "accountant): t0 = the smallest t0 at fixed pfdm.clip, clip = the largest C at "
                                  "fixed pfdm.t0")
    stage1_sampler: str = setting("ddpm", choices=["ddpm", "ddim"], training=False,
                                  help="sampler of the shared model's chain (T steps; ddim: sample.ddim_steps)")
    stage2_sampler: str = setting("ddpm", choices=["ddpm", "ddim"], training=False,
                                  help="sampler of the client model's refinement (t0 steps; ddim: sample.ddim_steps)")


register_section("pfdm", PFDMConfig, presets={
    "test": {"local_steps": 10, "server_steps": 10},
    "small": {"local_steps": 6000, "server_steps": 10000},
    "paper": {"local_steps": 100_000, "server_steps": 200_000}})

UNCLIPPED, CLIPPED = 0, 1  # values of the clip-flag extra condition


_TAG_LOCAL, _TAG_UPLOAD, _TAG_SERVER = 0x10CA1, 0x0B10AD, 0x5E17E


# ------------------------------------------------------------------ the LDP upload mechanism

def make_uploads(x: torch.Tensor, y: torch.Tensor, index: torch.Tensor, client: torch.Tensor, *, clip: float,
                 t0: int, alphas_cumprod: torch.Tensor, generator: Source) -> tuple[Uploads, int]:
    """One noised copy per record, x̃ = √ᾱ_{t0}·CLIP(x, C) + √(1−ᾱ_{t0})·z (docs/methods.md §4), z from
    ``generator`` (seeded or ``core.mechanisms.SECURE``). Returns (uploads, number of records clipped: debug only)."""
    T = alphas_cumprod.shape[0]
    a = float(alphas_cumprod[t0_to_model_t(t0, T)])
    z = gaussian(x.shape, generator, dtype=torch.float64)
    xt, was_clipped = ldp_upload(x.double(), clip, a, z)
    xt = xt.float()
    up = Uploads(xt, y.clone().long(), index.clone().long(), client.clone().long(), int(t0), float(clip))
    return up, int(was_clipped.sum())


def save_uploads(path: Path, up: Uploads, extra_meta: dict | None = None) -> None:
    meta = {"t0": up.t0, "clip": up.clip, **(extra_meta or {})}
    save_weights(path, {"x": up.x, "y": up.y, "index": up.index, "client": up.client}, meta)


def load_uploads(path: Path) -> Uploads:
    t = load_weights(path, "cpu")
    with safe_open(str(path), framework="pt") as f:
        meta = f.metadata() or {}
    return Uploads(t["x"], t["y"], t["index"], t["client"], int(meta["t0"]), float(meta["clip"]))


# ------------------------------------------------------------------ the server (sees uploads only)

def train_server(uploads: Uploads, *, model: nn.Module, alphas_cumprod: torch.Tensor, tcfg, ckpt_dir: Path,
                 seed: int, device, steps: int, name: str = "shared") -> nn.Module:
    """Train the shared denoiser z_w as an ordinary T-step DDPM whose clean data are the uploads.

    Reads only ``uploads.x`` and ``uploads.y`` (``index``/``client`` are ground truth for evaluation); no dataset,
    run context or client model is reachable from here."""
    device = torch.device(device)
    x = uploads.x.to(device)
    y = uploads.y.to(device) if getattr(model, "num_classes", None) else None
    return train_denoiser(model, TrainData(x, y), alphas_cumprod, tcfg, ckpt_dir, name=name, seed=seed,
                          device=device, steps=steps, desc="pfdm server (shared model on uploads)")


# ------------------------------------------------------------------ Algorithm 2

@torch.no_grad()
def two_stage_sample(shared: Target, client: Target, t0: int, n: int, y, *, seed: int, stage1: str, stage2: str,
                     ddim_steps: int, batch_size: int) -> tuple[torch.Tensor, torch.Tensor | None]:
    """Coarse-to-fine sampling of Algorithm 2 (docs/methods.md §4): the shared model's full chain to the upload
    level, then the client model (flag unclipped, fixed on ``client``) over model timesteps t0−1 … 0."""
    T = shared.num_timesteps
    x_mid, _ = shared.sample_chain(n, y, seed=seed, sampler=stage1, ddim_steps=ddim_steps, batch_size=batch_size,
                                   desc="pfdm stage 1 (shared)")
    return client.sample_chain(n, y, seed=sub_seed(seed, 2), sampler=stage2, ddim_steps=ddim_steps,
                               batch_size=batch_size, x_start=x_mid, t_start=t0_to_model_t(t0, T), t_stop=0,
                               desc="pfdm stage 2 (client)")


@METHODS.register_class
class PFDM(FederatedMethod):
    name = "pfdm"
    description = "personalized federated DDPM with LDP uploads (targets: shared, client:K, pipeline:K)"
    default_target = "shared"
    private = True
    report_order = 10
    coinciding_note = ("pipeline:K predicts noise with client K's model at every timestep below t0 (the shared model "
                       "only above), so an attack that queries only timesteps below t0 scores pipeline:K and "
                       "client:K identically")
    target_order = ("shared", "pipeline", "client")
    config_keys = ("pfdm", "clients", "dp.delta", "dp.noise_source")  # delta: the (ε, δ) each upload is reported with
    provenance_keys = ("clients.n_clients", "pfdm.clip", "pfdm.t0")

    @classmethod
    def upload_mechanism(cls, cfg: dict, target: str) -> dict | None:
        """The shared model's ε is that of one upload: its mechanism (for the report's mechanism audit)."""
        if target != cls.default_target or not cfg or "pfdm" not in cfg:
            return None
        p, d = cfg["pfdm"], cfg.get("diffusion", {})
        return {"clip": float(p["clip"]), "t0": int(p["t0"]), "num_timesteps": int(d.get("num_timesteps", 1000)),
                "beta_start": float(d.get("beta_start", 1e-4)), "beta_end": float(d.get("beta_end", 0.02)),
                "beta_schedule": str(d.get("beta_schedule", "linear"))}

    # ------------------------------------------------------------------ config
    @property
    def t0(self) -> int:
        return int(self.cfg.pfdm.t0)

    @property
    def t_model(self) -> int:
        """The upload level as a 0-indexed model timestep (t0 − 1)."""
        return t0_to_model_t(self.t0, self.cfg.diffusion.num_timesteps)

    @classmethod
    def epsilon_settings(cls, cfg, epsilon: float) -> list[tuple[str, object]]:
        """Per-upload ε = ``epsilon`` through the analytic LDP accountant's inverse (``pfdm.calibrate``): the
        smallest t0 at fixed C (ε ≤ target) or the largest C at fixed t0 (ε = target within 1e-9 relative)."""
        from ...privacy.ldp import max_clip, min_t0  # lazy: privacy.ldp imports scipy; only when ε is accounted

        d, p, delta = cfg.diffusion, cfg.pfdm, cfg.dp.delta
        sched = dict(num_timesteps=d.num_timesteps, beta_start=d.beta_start, beta_end=d.beta_end,
                     beta_schedule=d.beta_schedule)
        if p.calibrate == "t0":
            t0 = min_t0(p.clip, epsilon, delta, **sched)
            if t0 is None:
                raise BadInput(f"pfdm: epsilon {epsilon:g} per upload is out of reach at pfdm.clip={p.clip:g} "
                               f"(even t0 = T = {d.num_timesteps} gives more); lower pfdm.clip or raise epsilon")
            return [("pfdm.t0", int(t0))]
        return [("pfdm.clip", max_clip(p.t0, epsilon, delta, **sched))]

    def validate(self) -> None:
        t0_to_model_t(self.cfg.pfdm.t0, self.cfg.diffusion.num_timesteps)  # BadInput if t0 ∉ [1, T]
        super().validate()

    def target_names(self) -> list[str]:
        m = self.n_clients
        return ["shared"] + [f"client:{k}" for k in range(m)] + [f"pipeline:{k}" for k in range(m)]

    # ------------------------------------------------------------------ paths
    @property
    def uploads_path(self) -> Path:
        return self.ctx.run_dir / "uploads.safetensors"

    @property
    def summary_path(self) -> Path:
        return self.ctx.run_dir / "pfdm.json"

    # ------------------------------------------------------------------ training
    def train(self) -> None:
        """Algorithm 1: the uploads, then the clients' local models and the server's shared model — independent
        trainings once the uploads exist, run side by side where :mod:`privbench.models.unit_pool` allows."""
        self._ensure_uploads()
        train_units(self, self._units())
        self._write_summary()

    def _units(self) -> list[TrainUnit]:
        p, ckpts = self.cfg.pfdm, self.ctx.ckpt_dir
        units = [TrainUnit(f"client{m}", p.local_steps) for m in range(self.n_clients)] + \
            [TrainUnit("shared", p.server_steps)]
        return [u for u in units if not is_trained(ckpts, u.name, u.steps)]

    def train_unit(self, unit: TrainUnit) -> None:
        if unit.name == "shared":
            self.server_phase()
        else:
            self._train_client(int(unit.name.removeprefix("client")))

    def _ensure_uploads(self) -> None:
        # under torchrun rank 0 makes the uploads once; the other ranks wait for the file
        if not distributed.agree(self.uploads_path.exists()):
            if distributed.is_main():
                self._make_all_uploads()
            distributed.barrier()

    def _train_client(self, m: int) -> None:
        """Client m's local t ≤ t0 denoiser on its raw records (no DP; it never leaves the client)."""
        ctx, p = self.ctx, self.cfg.pfdm
        name = f"client{m}"
        if is_trained(ctx.ckpt_dir, name, p.local_steps):
            return
        x, y = ctx.records(ctx.clients.clients[m])
        xc, _ = clip_l2(x, p.clip)
        n = len(x)
        data = TrainData(
            x=torch.cat([x, xc]).to(ctx.device),
            y=torch.cat([y, y]).to(ctx.device) if ctx.num_classes else None,
            extra=torch.cat([torch.full((n,), UNCLIPPED), torch.full((n,), CLIPPED)]).long().to(ctx.device),
            weights=torch.cat([torch.full((n,), (1.0 - p.clip_mix) / n),
                               torch.full((n,), p.clip_mix / n)]).to(ctx.device),
        )
        ctx.log(f"[{name}] local denoiser on {n} raw records, model timesteps 0..{self.t_model} "
                f"(t <= t0={self.t0}), clip_mix {p.clip_mix}, {p.local_steps} steps (no DP)")
        train_denoiser(ctx.initial_denoiser(num_extra=2), data, ctx.schedule.alphas_cumprod(),
                       ema_capped(self.cfg.train, p.local_steps), ctx.ckpt_dir, name=name,
                       seed=sub_seed(self.cfg.seed, _TAG_LOCAL, m), device=ctx.device,
                       t_range=(0, self.t_model), steps=p.local_steps, desc=f"pfdm client {m} (local, t<=t0)")

    def _make_all_uploads(self) -> None:
        ctx, p = self.ctx, self.cfg.pfdm
        ac = ctx.schedule.alphas_cumprod().double()
        parts, per_client, clip_counts = [], [], []
        source = self.cfg.dp.noise_source
        for m, idx in enumerate(ctx.clients.clients):
            x, y = ctx.records(idx)
            g = noise_generator(source, torch.Generator().manual_seed(sub_seed(self.cfg.seed, _TAG_UPLOAD, m)))
            up, n_clipped = make_uploads(x, y, torch.as_tensor(idx), torch.full((len(idx),), m), clip=p.clip,
                                         t0=p.t0, alphas_cumprod=ac, generator=g)
            parts.append(up)
            per_client.append({"client": m, "n_records": len(idx)})
            clip_counts.append(n_clipped)
        up = Uploads(torch.cat([u.x for u in parts]), torch.cat([u.y for u in parts]),
                     torch.cat([u.index for u in parts]), torch.cat([u.client for u in parts]), p.t0, p.clip)
        # clip counts are un-noised functions of the records, outside the LDP guarantee: debug output only
        dbg = debug_log(ctx.run_dir, "pfdm-uploads",
                        f"pfdm: {sum(clip_counts)} of {len(up.x)} records were clipped to L2 norm C={p.clip:g} "
                        f"before upload (per client: {', '.join(str(c) for c in clip_counts)})")
        msg = (f"pfdm: {len(up.x)} records uploaded once each at t0={p.t0} (alphas_cumprod[{p.t0 - 1}] = "
               f"{float(ac[self.t_model]):.6f}), C={p.clip:g}, noise {source}; clip counts (debug output, outside "
               f"the guarantee): {dbg}")
        ctx.log(msg)
        LOG.info(msg)
        atomic_write_json(ctx.run_dir / "uploads.json", {"t0": p.t0, "clip": p.clip, "n_uploads": len(up.x),
                                                          "noise_source": source, "clients": per_client})
        save_uploads(self.uploads_path, up, {"noise_source": source})  # written last: marks the uploads done

    def server_phase(self) -> None:
        """The server: reads the uploads file (what the clients sent) and trains z_w on it alone."""
        ctx, p = self.ctx, self.cfg.pfdm
        if is_trained(ctx.ckpt_dir, "shared", p.server_steps):
            return
        uploads = load_uploads(self.uploads_path)
        ctx.log(f"[shared] server trains a {ctx.schedule.num_timesteps}-step DDPM on {len(uploads.x)} uploads, "
                f"{p.server_steps} steps")
        train_server(uploads, model=self._server_model(tuple(uploads.x.shape[1:])),
                     alphas_cumprod=ctx.schedule.alphas_cumprod(),
                     tcfg=ema_capped(self.cfg.train, p.server_steps), ckpt_dir=ctx.ckpt_dir,
                     seed=sub_seed(self.cfg.seed, _TAG_SERVER),
                     device=ctx.device, steps=p.server_steps)

    def _server_model(self, shape: tuple[int, int, int]) -> nn.Module:
        """A fresh shared denoiser built from the upload shape and the config alone (the same network as
        ``ctx.new_denoiser()``, without touching the dataset)."""
        torch.manual_seed(self.cfg.seed)
        model = build_denoiser(self.cfg.model, shape[0], shape[1], self.ctx.info.num_classes)
        if self.cfg.train.init == "public":  # the public pre-training: a function of public records only
            load_into(model, pretrained_denoiser(self.ctx))
        return model

    def _write_summary(self) -> None:
        info = json.loads((self.ctx.run_dir / "uploads.json").read_text())
        info["privacy_shared"] = self.privacy("shared")
        info["local_models"] = "trained on raw client data without DP (not covered by the LDP guarantee)"
        atomic_write_json(self.summary_path, info)

    # ------------------------------------------------------------------ targets
    def uploads(self) -> Uploads:
        if not self.uploads_path.exists():
            raise BadInput(f"{self.uploads_path}: no uploads; train the run first")
        return load_uploads(self.uploads_path)

    def n_clipped(self) -> int:
        """How many members exceed L2 norm C, recomputed from the records: for debugging and tests only (outside
        the guarantee)."""
        x, _ = self.training_data()
        return int(clip_l2(x, self.cfg.pfdm.clip)[1].sum())

    def _shared_target(self) -> Target:
        ctx = self.ctx
        model = load_ema(ctx.new_denoiser(), ctx.ckpt_dir, "shared", ctx.device)
        return self.make_target("shared", model, clip_sample=False, uploads=self.uploads(),
                                note=f"server model: a T-step DDPM trained only on LDP uploads (C={self.cfg.pfdm.clip:g}, "
                                     f"t0={self.t0}); its samples are noised images at the upload level")

    def _client_model(self, k: int) -> nn.Module:
        return load_ema(self.ctx.new_denoiser(num_extra=2), self.ctx.ckpt_dir, f"client{k}", self.ctx.device)

    def _client_target(self, k: int, name: str | None = None) -> Target:
        t_model = self.t_model
        tgt: Target | None = None

        def sampler(n, y, *, seed, sampler, ddim_steps, batch_size):
            # the local model knows only t <= t0: start from N(0, I) at the upload level (close to pure noise)
            g = torch.Generator().manual_seed(sub_seed(seed, 1))
            x = torch.randn((n, *tgt.meta["shape"]), generator=g)
            return tgt.sample_chain(n, y, seed=seed, sampler=sampler, ddim_steps=ddim_steps, batch_size=batch_size,
                                    x_start=x, t_start=t_model, t_stop=0, desc=f"pfdm client {k}")

        tgt = self.make_target(
            name or f"client:{k}", self._client_model(k), calls=Calls(extra=UNCLIPPED, sampler=sampler),
            note=f"NO DP: client {k}'s local model, trained on its raw records without DP (valid for model "
                 f"timesteps 0..{t_model}; sample() starts from N(0, I) at the upload level)")
        tgt.meta["t_max"] = t_model
        tgt.meta["client"] = k
        return tgt

    def _pipeline_target(self, k: int) -> Target:
        shared = self._shared_target()
        client = self._client_target(k)
        p, t_model = self.cfg.pfdm, self.t_model
        t0 = self.t0

        def eps_fn(x_t, t, y):
            # client model for t <= t0−1, shared model (whose data are the uploads) above: a heuristic for attacks
            # that query one network; sample() is the faithful Algorithm 2
            out = torch.empty_like(x_t)
            low = t <= t_model
            if low.any():
                out[low] = client.predict_noise(x_t[low], t[low], y[low] if y is not None else None)
            if (~low).any():
                out[~low] = shared.predict_noise(x_t[~low], t[~low], y[~low] if y is not None else None)
            return out

        def sampler(n, y, *, seed, sampler, ddim_steps, batch_size):
            s1 = "ddim" if sampler == "ddim" else p.stage1_sampler
            s2 = "ddim" if sampler == "ddim" else p.stage2_sampler
            return two_stage_sample(shared, client, t0, n, y, seed=seed, stage1=s1, stage2=s2,
                                    ddim_steps=ddim_steps, batch_size=batch_size)

        tgt = self.make_target(
            f"pipeline:{k}", nn.ModuleDict({"shared": shared.model, "client": client.model}),
            calls=Calls(eps_fn=eps_fn, sampler=sampler),
            note=f"NO DP for client {k}'s records: client {k}'s composed sampler (shared model T steps, then its "
                 f"non-private local model t0={t0} steps); predict_noise is the client model for t <= {t_model}, "
                 f"the shared model above")
        tgt.meta.update({"t_max_client": t_model, "client": k, "nfe_ddpm": shared.num_timesteps + t0})
        tgt.stages = (shared, client)
        return tgt

    def load_target(self, name=None):
        name = self.check_target(name)
        if name == "shared":
            return self._shared_target()
        k = parse_client_target(name, "client")
        if k is not None:
            return self._client_target(k)
        return self._pipeline_target(parse_client_target(name, "pipeline"))

    def privacy(self, target: str) -> dict | None:
        target = target or self.default_target
        if target != "shared":
            return None  # client:K / pipeline:K expose client K's local model, trained without DP
        from ...privacy.ldp import pfdm_privacy  # lazy: privacy.ldp imports scipy; only when ε is accounted

        d, p = self.cfg.diffusion, self.cfg.pfdm
        return pfdm_privacy(p.clip, p.t0, self.cfg.dp.delta, num_timesteps=d.num_timesteps,
                            beta_start=d.beta_start, beta_end=d.beta_end, beta_schedule=d.beta_schedule,
                            noise_source=self.cfg.dp.noise_source)
