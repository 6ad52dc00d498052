"""The per-record membership statistic that reference-model attacks (lira, rmia) and qmia calibrate.

LiRA separates the calibration (per-record Gaussians over reference models) from the statistic it calibrates
(Carlini et al. 2022, §IV: "any" per-example signal; the paper uses the logit-scaled confidence). privbench makes
the statistic a setting, ``attack.statistic``:

* ``loss`` (default): the diffusion loss at ``attack.t`` on ``attack.lira_draws`` fixed noise draws per record
  (:func:`~privbench.attacks.references.fixed_noise_losses`; mean over pixels);
* the name of any registered membership attack that needs no reference model and no auxiliary data (``pia``,
  ``pian``, ``sima``, ``secmi``, a plug-in's): that attack runs with its own settings (their defaults; the
  batch size is the caller's) on the target and on every reference, and its distance — the negated score,
  divided by the number of elements C·H·W so that it is on a per-pixel scale like the loss — is the statistic.
  These statistics are deterministic or seeded by ``env.seed``, so the target and the references see identical
  inputs. One column ("draw") per record.

Every statistic is a DISTANCE: lower = member. Variants carry the statistic in their label (``lira@sima``); the
setting enters the cache hash off its default. docs/attacks.md §13 compares the statistics on the overfit tiny
target.
"""
from __future__ import annotations

import math

import numpy as np

from ..core.config import setting
from ..core.errors import BadInput
from ..core.registry import ATTACKS
from .base import MEMBERSHIP, Attack, AttackEnv, Records, check_timestep
from .references import fixed_noise_losses

#: LiRA's and RMIA's own statistic (fixed-noise diffusion loss)
LOSS_STATISTIC = "loss"


def _eligible(cls) -> bool:
    """A registered attack whose score can serve as a per-record statistic: a membership score that needs no
    reference model and no auxiliary data (labels, pools) — computable on any model, the references included."""
    tm = getattr(cls, "threat_model", None) or {}
    return (getattr(cls, "kind", None) == MEMBERSHIP and not getattr(cls, "needs_references", False)
            and tm.get("auxiliary_data") == "none")


def statistic_names() -> list[str]:
    """``loss`` and every eligible registered attack (in registry order)."""
    return [LOSS_STATISTIC] + [e.name for e in ATTACKS if e.name != LOSS_STATISTIC and _eligible(e.factory)]


def check_statistic(name: str, what: str = "attack.statistic") -> str:
    names = statistic_names()
    if name not in names:
        raise BadInput(f"{what}={name!r}: not a per-record statistic; choose one of: {', '.join(names)}")
    return name


def statistic_attack(name: str, batch_size: int, num_timesteps: int | None = None):
    """The attack computing statistic ``name`` (None for ``loss``) with its default settings, validated."""
    if check_statistic(name) == LOSS_STATISTIC:
        return None
    sub = ATTACKS.create(name, batch_size=int(batch_size))
    if num_timesteps is not None:
        sub.validate(num_timesteps)
    return sub


def attack_distance(sub, target, records: Records, seed: int) -> np.ndarray:
    """(n_records, 1) distance of ``sub`` (−score ÷ C·H·W) on ``target``; lower = member."""
    out = sub.run(target, records, AttackEnv(seed=seed))
    d = math.prod(records.x.shape[1:])
    return (-np.asarray(out.scores, dtype=np.float64) / d)[:, None]


def describe_statistic(sub, name: str) -> dict:
    """What the statistic is, for result figures."""
    if sub is None:
        return {"name": LOSS_STATISTIC, "definition": "mean over pixels of (eps_d - eps_theta(x_t, t))^2, fixed noise "
                                                      "per record (attack.t, attack.lira_draws)"}
    return {"name": name, "definition": f"-({sub.name} score) / (C*H*W), the attack's own default settings",
            "settings": sub.describe()}


class StatisticAttack(Attack):
    """An attack that calibrates a per-record statistic (lira, rmia, qmia): its ``attack.statistic`` settings, its
    variant label (``lira@sima``), its validation, its cache hash (the statistic attack's own settings) and its
    values."""
    t: int = setting(200, lo=0, help="model timestep (0-indexed) of loss/PIA/PIAN")
    lira_draws: int = setting(4, lo=1, help="LiRA/RMIA: fixed noise draws per record of the loss statistic at "
                                            "attack.t (the target and every reference are queried on each)")
    statistic: str = setting("loss", hashed_at_default=False,
                             help="LiRA/RMIA/QMIA: the per-record statistic calibrated: a registered attack's distance "
                                  "(sima, pia, pian, secmi, ...) or loss (fixed-noise diffusion loss at attack.t)")

    @classmethod
    def variant_choices(cls) -> dict[str, tuple]:
        out = super().variant_choices()
        out["statistic"] = tuple(statistic_names())
        return out

    def validate(self, num_timesteps: int, cfg=None) -> None:
        super().validate(num_timesteps, cfg)
        check_timestep(self.t, num_timesteps, "attack.t")
        self.statistic_attack(num_timesteps)

    def statistic_attack(self, num_timesteps: int | None = None):
        return statistic_attack(self.statistic, self.batch_size, num_timesteps)

    def hash_dict(self, cfg=None) -> dict:
        d = super().hash_dict(cfg)
        sub = self.statistic_attack()
        if sub is not None:
            d["statistic_attack"] = sub.hash_dict()
        return d

    def statistic_values(self, model, records: Records, seed: int) -> np.ndarray:
        """(n_records, draws) statistic of ``records`` under ``model`` (lower = member)."""
        sub = self.statistic_attack(model.num_timesteps)
        if sub is None:
            return fixed_noise_losses(model, records, int(self.t), int(self.lira_draws), seed, self.batch_size)
        return attack_distance(sub, model, records, seed)

    def statistic_figures(self) -> dict:
        return describe_statistic(self.statistic_attack(), self.statistic)

    def statistic_queries(self) -> float:
        """Queries per record of the statistic on one model."""
        sub = self.statistic_attack()
        if sub is None:
            return float(self.lira_draws)
        q = (sub.threat() or {}).get("queries_per_record")
        return float(q) if isinstance(q, (int, float)) else float("nan")
