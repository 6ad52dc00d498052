"""Memorization by the nearest-neighbour ratio (Yoon et al. 2023; Gu et al. 2023; docs/attacks.md §4): a sample
is memorized iff ‖x − NN₁(x)‖₂ / ‖x − NN₂(x)‖₂ < 1/3 against the target's unique training records.
"""
from __future__ import annotations

import numpy as np
import torch

from ..core.config import setting
from ..core.constants import MAX_SAMPLES
from ..core.errors import BadInput
from ..core.registry import ATTACKS
from .base import MEMORIZATION, Attack, AttackEnv, AttackOutput, Records

THRESHOLD = 1.0 / 3.0


@torch.no_grad()
def nn_ratio(samples: torch.Tensor, reference: torch.Tensor, batch_size: int = 1024) -> dict[str, torch.Tensor]:
    """For each sample: d1, d2 (ℓ2 to its nearest and second-nearest reference), their ratio, and nn1/nn2
    (row numbers in ``reference``). Runs on ``samples``' device, chunked; results on that device."""
    if reference.shape[0] < 2:
        raise BadInput("memorization: the nearest-neighbour ratio needs at least 2 distinct training records")
    ref = reference.to(samples.device).flatten(1).float()
    d1s, d2s, n1s, n2s = [], [], [], []
    for lo in range(0, samples.shape[0], batch_size):
        s = samples[lo:lo + batch_size].flatten(1).float()
        d = torch.cdist(s, ref)
        vals, idx = d.topk(2, dim=1, largest=False)
        d1s.append(vals[:, 0]), d2s.append(vals[:, 1]), n1s.append(idx[:, 0]), n2s.append(idx[:, 1])
    d1, d2 = torch.cat(d1s), torch.cat(d2s)
    ratio = torch.where(d2 > 0, d1 / d2.clamp_min(1e-30), torch.ones_like(d1))
    return {"d1": d1, "d2": d2, "ratio": ratio, "nn1": torch.cat(n1s), "nn2": torch.cat(n2s)}


def unique_records(x: torch.Tensor, index: torch.Tensor | None = None):
    """Collapse exact duplicates: (unique images, their first dataset index or row, inverse map)."""
    flat = x.flatten(1)
    uniq, inverse = torch.unique(flat, dim=0, return_inverse=True)
    first = torch.full((uniq.shape[0],), -1, dtype=torch.long)
    rows = torch.arange(x.shape[0])
    # first occurrence of every unique row
    first.scatter_reduce_(0, inverse.cpu(), rows, reduce="amin", include_self=False)
    src = index[first] if index is not None else first
    return uniq.view(-1, *x.shape[1:]), src, inverse


class SamplingAttack(Attack):
    """An attack that draws samples from the target (memorization, extract): how many, and with which sampler."""
    extra_config_keys = ("sample.sampler", "sample.ddim_steps", "sample.batch_size")
    settings_presets = {"test": {"n_samples": 32}, "paper": {"n_samples": 10_000}}

    sampler: str = setting("", choices=["", "ddpm", "ddim"], hashed_at_default=False,
                           help="memorization/extract sampler: ddpm (T network calls per sample) or ddim "
                                "(attack.steps calls); empty = the run's sample.sampler")
    steps: int = setting(0, lo=0, hi=100_000, hashed_at_default=False,
                         help="memorization/extract DDIM steps; 0 = the run's sample.ddim_steps")
    n_samples: int = setting(500, lo=1, hi=MAX_SAMPLES, help="samples drawn by memorization")

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        if self.steps and self.sampler != "ddim":
            raise BadInput(f"attack.steps={self.steps}: DDPM runs every one of the T steps; attack.steps needs "
                           f"attack.sampler=ddim")
        if self.steps > num_timesteps:
            raise BadInput(f"attack.steps={self.steps}: at most the schedule's T={num_timesteps} steps")


def sampling_kwargs(attack, cfg) -> dict:
    """target.sample's sampler, ddim_steps and batch_size: the attack's own settings over the run's sample.*."""
    s = getattr(cfg, "sample", None)
    kw = dict(sampler=s.sampler, ddim_steps=s.ddim_steps, batch_size=s.batch_size) if s is not None else {}
    if attack.sampler:
        kw["sampler"] = attack.sampler
    if attack.steps:
        kw["ddim_steps"] = int(attack.steps)
    return kw


def network_calls(kw: dict, num_timesteps: int) -> int:
    """Network evaluations per generated sample of these sampler settings (the cost)."""
    if kw.get("sampler") == "ddim":
        return min(int(kw.get("ddim_steps", num_timesteps)), num_timesteps)
    return num_timesteps


@ATTACKS.register_class
class NNRatioMemorization(SamplingAttack):
    name = "memorization"
    description = "memorized fraction of samples: L2(x, NN1)/L2(x, NN2) < 1/3 against the training records"
    kind = MEMORIZATION
    report_order = 50
    threat_model = {"queries": "sampling (attack.n_samples samples)", "reference_models": 0,
                    "reference_training": "none", "auxiliary_data": "the target's training records (to compare)",
                    "queries_per_record": "sampler steps per sample", "source": "Yoon et al. 2023; Gu et al. 2023"}

    def draw(self, target, env: AttackEnv):
        kw = sampling_kwargs(self, env.cfg)
        self.sampling = {**kw, "network_calls_per_sample": network_calls(kw, target.num_timesteps)}
        images, labels = target.sample(int(self.n_samples), None, seed=env.seed, **kw)
        return images.float().clamp(-1, 1), labels

    @torch.no_grad()
    def run(self, target, records: Records | None, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        train_x, _ = env.training_data(records)
        train_index = torch.as_tensor(env.train_index, dtype=torch.long) if env.train_index is not None else None
        if env.method is not None and env.train_data is None:
            train_index = torch.as_tensor(list(env.method.ctx.split.members), dtype=torch.long) \
                if len(env.method.ctx.split.members) == train_x.shape[0] else None
        samples, sample_y = self.draw(target, env)
        res = self.evaluate(samples.to(target.device), sample_y, train_x, train_index)
        res.figures["sampling"] = self.sampling
        return res

    def evaluate(self, samples, sample_y, train_x, train_index=None) -> AttackOutput:
        """The memorization figures for given samples against given training records."""
        ref, src, _ = unique_records(train_x.cpu(), train_index)
        r = nn_ratio(samples, ref.to(samples.device), self.batch_size)
        ratio = r["ratio"].cpu().double().numpy()
        nn1 = r["nn1"].cpu().numpy()
        mem = ratio < THRESHOLD
        n = len(ratio)
        res = AttackOutput(nfe_per_record=None)
        res.metrics = {"memorized_fraction": float(mem.mean()), "n_generated": int(n)}
        res.figures = {
            "n_memorized": int(mem.sum()), "threshold": "d(NN1)/d(NN2) < 1/3 (pixel L2)",
            "n_training_records": int(train_x.shape[0]), "n_unique_training_records": int(ref.shape[0]),
            "ratio_quantiles": {q: float(np.quantile(ratio, q)) for q in (0.0, 0.01, 0.1, 0.5)},
            "memorized_training_records": sorted({int(src[i]) for i in nn1[mem]}),
            "reference": "training dataset index" if train_index is not None else "row in the training tensor",
        }
        if ref.shape[0] < train_x.shape[0]:
            res.notes.append(f"{train_x.shape[0] - ref.shape[0]} duplicate training records collapsed before the "
                             "nearest-neighbour ratio (otherwise a duplicated record could never count as memorized)")
        res.arrays = {"ratio": ratio, "nn1": src[torch.as_tensor(nn1)].numpy(),
                      "nn2": src[r["nn2"].cpu()].numpy(), "d1": r["d1"].cpu().double().numpy(),
                      "d2": r["d2"].cpu().double().numpy(), "memorized": mem.astype(np.int8)}
        if sample_y is not None:
            res.arrays["sample_label"] = np.asarray(sample_y.cpu().numpy())
        # grid: memorized samples beside their nearest training record (or the closest-ratio ones)
        order = np.argsort(ratio, kind="stable")
        pick = order[mem[order]][:16] if mem.any() else order[:8]
        imgs, labels = [], []
        shown = samples[torch.as_tensor(pick, dtype=torch.long, device=samples.device)].cpu()  # one host copy
        for j, i in enumerate(pick):
            imgs += [shown[j], ref[nn1[i]]]
            labels += [f"r={ratio[i]:.2f}", f"#{int(src[nn1[i]])}"]
        title = "memorized" if mem.any() else "closest (none memorized)"
        res.images[f"memorization-{'memorized' if mem.any() else 'closest'}"] = (torch.stack(imgs), labels, 8)
        res.figures["grid"] = title + ": each sample (left, r = ratio) beside its nearest training record (right, #index)"
        return res
