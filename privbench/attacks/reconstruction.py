"""Reconstruction of records from noised uploads (PFDM threat model; docs/attacks.md §5).

The attacker holds uploads x̃ = √ᾱ_{t0}·CLIP(x, C) + √(1−ᾱ_{t0})·z (real ones, or simulated from the members) and
their labels, and reconstructs x with ``naive`` rescaling, one ``tweedie`` step or the target's reverse ``chain``
(optionally with a ``public`` denoiser it trains itself). Figures per attacker: PSNR and SSIM against the source
and the re-identification rate among a candidate pool with its chance levels.

On PFDM's shared model (trained on the uploads themselves) the denoisers are still queried at t0 − 1 (PFDM's
"Global-model" attack; flagged in the notes); clip-aware re-timing is not implemented.
"""
from __future__ import annotations

import math

import numpy as np
import torch

from ..core.config import config_hash, setting
from ..core.errors import BadInput
from ..core.mechanisms import clip_l2 as clip_with_mask
from ..core.mechanisms import ldp_upload
from ..core.registry import ATTACKS
from ..core.schedule import t0_to_model_t
from ..core.seeding import seeded_generator
from ..metrics.image import psnr, ssim
from ..models.target import Target
from ..models.training import TrainData, train_denoiser
from .base import RECONSTRUCTION, Attack, AttackEnv, AttackOutput, Records, cond, tvec

_UPLOAD_STREAM = 0x0B10AD
_SUBSET_STREAM = 0x5B5E7


def simulate_uploads(x: torch.Tensor, t0: int, clip: float, alphas_cumprod: torch.Tensor, seed: int) -> torch.Tensor:
    """x̃ = √ᾱ_{t0}·CLIP(x, C) + √(1−ᾱ_{t0})·z with one seeded z per record (x on the device it should run)."""
    a = alphas_cumprod.to(x.device)[t0_to_model_t(t0, alphas_cumprod.shape[0])]
    g = seeded_generator(x.device, _UPLOAD_STREAM, seed, t0)
    z = torch.randn(x.shape, generator=g, device=x.device)
    return ldp_upload(x, clip, a, z)[0]


@torch.no_grad()
def nearest(queries: torch.Tensor, pool: torch.Tensor, mask: torch.Tensor | None = None, batch: int = 1024):
    """Row of the ℓ2-nearest pool record for every query (optionally restricted by a boolean mask Q×P)."""
    p = pool.flatten(1).float()
    out = []
    for lo in range(0, queries.shape[0], batch):
        d = torch.cdist(queries[lo:lo + batch].flatten(1).float(), p)
        if mask is not None:
            d = d.masked_fill(~mask[lo:lo + batch], float("inf"))
        out.append(d.argmin(dim=1))
    return torch.cat(out)


@ATTACKS.register_class
class Reconstruction(Attack):
    name = "reconstruction"
    description = "reconstruct records from noised uploads (naive, Tweedie, reverse chain): PSNR, SSIM, re-id rate"
    kind = RECONSTRUCTION
    text_conditioning = False  # it inverts PFDM's pixel-space uploads
    report_order = 60
    extra_config_keys = ("pfdm.t0", "pfdm.clip", "sample.ddim_steps")
    threat_model = {"queries": "the noised uploads, then eps-prediction along a reverse chain", "reference_models": 0,
                    "reference_training": "none (optional public denoiser: attack.recon_public_steps)",
                    "auxiliary_data": "a pool of candidate records for re-identification",
                    "queries_per_record": "sample.ddim_steps (ddim) or t0 (ddpm)", "source": "privbench"}

    recon_t0: int = setting(0, lo=0, help="reconstruction upload level (1-indexed); 0 = pfdm.t0")
    recon_clip: float = setting(0.0, lo=0.0, help="reconstruction clip; 0 = pfdm.clip")
    recon_n: int = setting(1000, lo=0, help="uploads attacked by reconstruction (seeded subset; 0 = all)")
    recon_sampler: str = setting("ddim", choices=["ddim", "ddpm"],
                                 help="reverse chain of the reconstruction attack (ddim: sample.ddim_steps NFEs; "
                                      "ddpm: t0)")
    recon_public_steps: int = setting(0, lo=0, help="reconstruction: train a 'public' denoiser on records outside "
                                                    "the split for this many steps (0 = off)")

    # ------------------------------------------------------------------ settings
    def upload_setting(self, cfg=None, target=None) -> tuple[int, float, str]:
        """(t0, C, source) — 'real' uploads of the target, or 'simulated'."""
        pf = getattr(cfg, "pfdm", None)  # PFDM's own section: pfdm.t0 and pfdm.clip
        t0 = int(self.recon_t0) or (int(pf.t0) if pf is not None else 690)
        clip = float(self.recon_clip) or (float(pf.clip) if pf is not None else 10.0)
        up = getattr(target, "uploads", None)
        if up is not None:
            explicit_t0 = int(self.recon_t0) and int(self.recon_t0) != int(up.t0)
            explicit_c = float(self.recon_clip) and not math.isclose(float(self.recon_clip), float(up.clip))
            if not (explicit_t0 or explicit_c):
                return int(up.t0), float(up.clip), "real"
        return t0, clip, "simulated"

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        t0, clip, _ = self.upload_setting(cfg)
        t0_to_model_t(t0, num_timesteps)
        if not clip > 0:
            raise BadInput(f"attack.recon_clip={clip}: must be > 0")

    # ------------------------------------------------------------------ data
    def _uploads(self, target, records: Records, env: AttackEnv):
        """(x̃, y, source images, source dataset index, pool images, pool labels, pool index, t0, C, kind)."""
        t0, clip, kind = self.upload_setting(env.cfg, target)
        device = target.device
        members = records.subset(records.labels == 1)
        nonmembers = records.subset(records.labels == 0)
        if kind == "real":
            up = target.uploads
            u_x, u_y, u_idx = up.x, up.y.long(), up.index.long()
            src = self._lookup(u_idx, records, env)
        else:
            if len(members) == 0:
                raise BadInput("reconstruction: no member records to simulate uploads of")
            u_idx, u_y, src = members.index, members.y, members.x
            u_x = simulate_uploads(src.to(device), t0, clip, target.alphas_cumprod, env.seed).cpu()
        # candidate pool: every upload's source (unique) + the non-members as distractors
        uniq, first = np.unique(u_idx.numpy(), return_index=True)
        pool_x = torch.cat([src[torch.as_tensor(first)], nonmembers.x])
        pool_y = torch.cat([u_y[torch.as_tensor(first)], nonmembers.y])
        pool_idx = torch.cat([torch.as_tensor(uniq), nonmembers.index])
        # attacked subset (seeded)
        n = u_x.shape[0]
        if self.recon_n and self.recon_n < n:
            g = seeded_generator("cpu", _SUBSET_STREAM, env.seed)
            sel = torch.randperm(n, generator=g)[: int(self.recon_n)].sort().values
            u_x, u_y, u_idx, src = u_x[sel], u_y[sel], u_idx[sel], src[sel]
        return u_x, u_y, src, u_idx, pool_x, pool_y, pool_idx, t0, clip, kind, len(nonmembers)

    @staticmethod
    def _lookup(idx: torch.Tensor, records: Records, env: AttackEnv) -> torch.Tensor:
        if env.method is not None:
            return env.method.ctx.dataset[0][idx]
        pos = {int(i): k for k, i in enumerate(records.index.tolist())}
        try:
            return records.x[torch.as_tensor([pos[int(i)] for i in idx])]
        except KeyError:
            raise BadInput("reconstruction: an upload's source record is not among the records given") from None

    def public_denoiser(self, env: AttackEnv):
        """(Target, note): a denoiser the attacker trains on public records — dataset records that are neither
        members nor non-members, nor in the dataset's extractor split — with the target's architecture and
        ``train`` settings for ``attack.recon_public_steps`` steps (cached next to the attack results). (None, note)
        when off."""
        steps = int(self.recon_public_steps)
        method = env.method
        if not steps:
            return None, ("attacker 'public' (a clean-data denoiser trained on public records) is off; "
                          "enable it with attack.recon_public_steps=N")
        if method is None:
            return None, "attacker 'public' needs the run's method (dataset and split); skipped"
        ctx = method.ctx
        x, y = ctx.dataset
        used = set(ctx.split.members) | set(ctx.split.nonmembers) | set(ctx.split.reserved)
        pub = [i for i in range(len(y)) if i not in used]
        if len(pub) < 2:
            return None, "attacker 'public' skipped: every dataset record is a member or a non-member"
        tcfg = ctx.cfg.train
        key = config_hash({"steps": steps, "seed": ctx.cfg.seed, "train": vars(tcfg), "n_public": len(pub)})
        ckpt = ctx.run_dir / "attacks" / f"public-denoiser-{key}" / "checkpoints"
        idx = torch.as_tensor(pub)
        data = TrainData(x[idx].to(ctx.device), y[idx].long().to(ctx.device) if ctx.num_classes else None)
        with torch.enable_grad():  # run() is under no_grad
            model = train_denoiser(ctx.new_denoiser(), data, ctx.schedule.alphas_cumprod(), tcfg, ckpt,
                                   name="public", seed=ctx.cfg.seed + 7919, device=ctx.device, steps=steps,
                                   desc="public denoiser")
        tgt = Target("public", "public", model, ctx.schedule, ctx.device, ctx.num_classes,
                     meta={"shape": ctx.image_shape})
        return tgt, (f"attacker 'public': a denoiser trained for {steps} steps on the {len(pub)} dataset records "
                     "that are neither members nor non-members")

    def _reconstructions(self, target, env: AttackEnv, u_x, u_y, mt: int, a) -> tuple[dict, dict, str | None]:
        """Every attacker's reconstruction of the uploads (naive rescaling; Tweedie and the reverse chain with
        the target, and with the public denoiser when there is one), its network calls per record, and the public
        denoiser's note."""
        device = target.device
        n = u_x.shape[0]
        bs = int(self.batch_size)
        recons: dict[str, torch.Tensor] = {"naive": u_x.to(device) / a.sqrt()}
        nfe: dict[str, int] = {"naive": 0}
        ddim_steps = int(getattr(getattr(env.cfg, "sample", None), "ddim_steps", 100))
        denoisers = [("", target)]
        public, public_note = self.public_denoiser(env)
        if public is not None:
            denoisers.append(("-public", public))
        for suffix, den in denoisers:
            chunks = []
            for lo in range(0, n, bs):
                xb = u_x[lo:lo + bs].to(device)
                yb = u_y[lo:lo + bs].to(device)
                eps = den.predict_noise(xb, tvec(mt, xb.shape[0], device), cond(den, yb))
                chunks.append((xb - (1 - a).sqrt() * eps) / a.sqrt())
            recons["tweedie" + suffix] = torch.cat(chunks)
            nfe["tweedie" + suffix] = 1
            chain_name = f"chain-{self.recon_sampler}{suffix}"
            x_chain, _ = den.sample_chain(n, u_y if den.num_classes else None, seed=env.seed,
                                          sampler=self.recon_sampler, ddim_steps=ddim_steps, batch_size=bs,
                                          x_start=u_x, t_start=mt, t_stop=0, desc="reconstruct")
            recons[chain_name] = x_chain.to(device)
            nfe[chain_name] = min(ddim_steps, mt + 1) if self.recon_sampler == "ddim" else mt + 1
        return recons, nfe, public_note

    @staticmethod
    def _rates(recons: dict, nfe: dict, src, u_y, u_idx, pool_x, pool_y, pool_idx, clip, device):
        """Per attacker: PSNR/SSIM to the sources and the re-identification rates: nearest neighbour among the
        clipped pool (the attacker knows C; for a naive reconstruction this is the maximum-likelihood guess), the
        raw pool and the same-label candidates. Also the same-label mask."""
        pool_dev = pool_x.to(device)
        pool_clipped = clip_with_mask(pool_dev, clip)[0]
        same_label = (u_y.view(-1, 1) == pool_y.view(1, -1)).to(device)
        truth = torch.as_tensor(u_idx).to(device)
        pool_idx_dev = pool_idx.to(device)
        per: dict[str, dict] = {}
        src_dev = src.to(device)
        for name, xr in recons.items():
            xr = xr.float()
            hit = pool_idx_dev[nearest(xr, pool_clipped)] == truth
            hit_raw = pool_idx_dev[nearest(xr, pool_dev)] == truth
            hit_lab = pool_idx_dev[nearest(xr, pool_clipped, same_label)] == truth
            xc = xr.clamp(-1, 1)
            per[name] = {
                "psnr": float(psnr(xc, src_dev).mean()), "ssim": float(ssim(xc, src_dev).mean()),
                "reid_rate": float(hit.double().mean()), "reid_rate_raw": float(hit_raw.double().mean()),
                "reid_rate_label": float(hit_lab.double().mean()), "nfe": nfe[name],
            }
        return per, same_label

    # ------------------------------------------------------------------ attack
    @torch.no_grad()
    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        u_x, u_y, src, u_idx, pool_x, pool_y, pool_idx, t0, clip, kind, n_distract = self._uploads(target, records, env)
        device = target.device
        mt = t0_to_model_t(t0, target.num_timesteps)
        a = target.alphas_cumprod.to(device)[mt]
        n = u_x.shape[0]
        recons, nfe, public_note = self._reconstructions(target, env, u_x, u_y, mt, a)
        per, same_label = self._rates(recons, nfe, src, u_y, u_idx, pool_x, pool_y, pool_idx, clip, device)
        pool_n = int(pool_x.shape[0])
        chance_label = float((1.0 / same_label.sum(1).double()).mean())
        n_src = pool_n - n_distract  # the first pool rows are the upload sources (members)
        same_label_src = same_label[:, :n_src].sum(1).double().clamp_min(1)
        chance_label_members = float((1.0 / same_label_src).mean())
        best = max(per, key=lambda k: (per[k]["reid_rate"], per[k]["psnr"]))
        res = AttackOutput(nfe_per_record=sum(nfe.values()))
        res.metrics = {"psnr": per[best]["psnr"], "ssim": per[best]["ssim"], "reid_rate": per[best]["reid_rate"],
                       "reid_chance": 1.0 / pool_n, "reid_rate_label": per[best]["reid_rate_label"],
                       "reid_chance_label": chance_label, "best_attacker": best}
        ab = float(a)
        res.figures = {
            "uploads": kind, "t0": t0, "model_t": mt, "alpha_bar": ab, "sigma": math.sqrt((1 - ab) / ab), "clip": clip,
            "n_uploads_attacked": n, "pool_size": pool_n, "pool": f"{pool_n - n_distract} upload sources (members) + "
                                                                f"{n_distract} non-member distractors",
            "reid_chance": 1.0 / pool_n, "reid_chance_label": chance_label,
            "reid_chance_label_members": chance_label_members,
            "fraction_clipped": float((src.flatten(1).norm(dim=1) > clip).double().mean()),
            "attackers": per, "best_attacker": best,
            "best_attacker_selection": "highest reid_rate among the attackers (an oracle choice on ground truth; "
                                       "every attacker's figures are listed)",
        }
        res.notes.append(f"{'real' if kind == 'real' else 'simulated'} uploads at t0={t0} (1-indexed; model t={mt}), "
                         f"C={clip}; re-identification by L2 nearest neighbour among CLIP(pool, C)")
        if target.capabilities.uploads:  # a target trained on the uploads (PFDM's shared model)
            res.notes.append(f"target '{target.name}': its training data are the uploads themselves, so its eps-prediction "
                             "at level t0-1 on an upload is outside its training distribution (PFDM's 'Global' "
                             "attacker); compare with 'naive' and with a clean-data denoiser (attacker 'public': "
                             "attack.recon_public_steps=N)")
        if public_note:
            res.notes.append(public_note)
        res.arrays = {"index": u_idx.numpy()}
        k = min(8, n)
        shown = {name: xr[:k].detach().cpu() for name, xr in recons.items()}  # one host copy each
        show = []
        labels = []
        for i in range(k):
            show += [src[i]] + [shown[name][i] for name in shown]
            labels += ["orig"] + [name.replace("chain-", "").replace("-public", "/pub") for name in shown]
        res.images["reconstruction"] = (torch.stack(show).float().clamp(-1, 1), labels, 1 + len(shown))
        return res
