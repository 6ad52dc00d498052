"""The per-record membership statistic that lira, rmia and qmia calibrate (``attack.statistic``), computed once
per process.

``loss`` (default): the fixed-noise diffusion loss at ``attack.t`` over ``attack.lira_draws`` draws (mean over
pixels); or any registered membership attack that needs no reference model and no auxiliary data, whose distance
(−score ÷ C·H·W) is the statistic. Every statistic is a distance: lower = member (docs/attacks.md §7, §13).
Values are shared by attacks in one process, keyed by the model's content, the statistic and its settings, the
records and the seed, so a shared value is the one the same call would compute (docs/attacks.md §10).
"""
from __future__ import annotations

import hashlib
import itertools
import json
import math
import weakref
from collections import OrderedDict

import numpy as np
import torch

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


# ---------------------------------------------------------------------- the values, once per process

#: statistic values computed in this process, least recently used first: (model, statistic, records, seed) →
#: read-only (n_records, draws) array
_VALUES: OrderedDict[tuple, np.ndarray] = OrderedDict()
#: the most values kept (a bench process attacks many targets; each value is n_records × draws floats)
_MAX_VALUES = 512
_DIGESTS: dict[int, tuple[weakref.ref, str]] = {}
_UNIQUE = itertools.count()


def _memo(obj, compute) -> str:
    """``compute(obj)`` once per live object (objects are neither hashable nor mutated while attacked)."""
    i = id(obj)
    hit = _DIGESTS.get(i)
    if hit is not None and hit[0]() is obj:
        return hit[1]
    key = compute(obj)
    _DIGESTS[i] = (weakref.ref(obj, lambda _, i=i: _DIGESTS.pop(i, None)), key)
    return key


def _update(h, *tensors: torch.Tensor) -> None:
    for v in tensors:
        v = v.detach().to("cpu").contiguous()
        h.update(f"{v.dtype}{tuple(v.shape)}".encode())
        h.update(v.reshape(-1).view(torch.uint8).numpy().tobytes())


def model_key(target) -> str:
    """What a target's predictions are a function of: a digest of its network's weights and buffers, its noise
    schedule, its conditioning and its name and provenance. A target with no network of its own (a function
    stand-in) is its own key: its values are never shared with another object."""
    def digest(t) -> str:
        model = getattr(t, "model", None)
        if model is None:
            return f"object-{next(_UNIQUE)}"
        h = hashlib.blake2b(digest_size=16)
        h.update(repr((type(t).__qualname__, t.name, t.method, t.num_classes, t.extra,
                       (t.meta or {}).get("provenance"))).encode())
        _update(h, t.alphas_cumprod)
        for k, v in model.state_dict().items():
            h.update(k.encode())
            _update(h, v)
        return h.hexdigest()
    return _memo(target, digest)


def records_key(records: Records) -> str:
    """A digest of the records' images, labels and dataset indices."""
    def digest(r: Records) -> str:
        h = hashlib.blake2b(digest_size=16)
        _update(h, r.x, r.y, r.index)
        return h.hexdigest()
    return _memo(records, digest)


def clear_values() -> None:
    """Forget every statistic value computed so far (benchmarks time attacks from a cold start)."""
    _VALUES.clear()


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
        """(n_records, draws) statistic of ``records`` under ``model`` (lower = member), read-only; computed once
        per process for the same model, statistic, records and seed."""
        sub = self.statistic_attack(model.num_timesteps)
        how = ((LOSS_STATISTIC, int(self.t), int(self.lira_draws), int(self.batch_size)) if sub is None else
               (sub.name, json.dumps(sub.hash_dict(), sort_keys=True, default=str)))
        key = (model_key(model), how, self.precision, records_key(records), int(seed))
        values = _VALUES.get(key)
        if values is None:
            values = (fixed_noise_losses(model, records, int(self.t), int(self.lira_draws), seed, self.batch_size)
                      if sub is None else attack_distance(sub, model, records, seed))
            values.setflags(write=False)
            _VALUES[key] = values
            while len(_VALUES) > _MAX_VALUES:
                _VALUES.popitem(last=False)
        _VALUES.move_to_end(key)
        return values

    def statistic_figures(self) -> dict:
        return describe_statistic(self.statistic_attack(), self.statistic)

    def statistic_queries(self) -> float:
        """Queries per record of the statistic on one model."""
        sub = self.statistic_attack()
        if sub is None:
            return float(self.lira_draws)
        q = (sub.threat() or {}).get("queries_per_record")
        return float(q) if isinstance(q, (int, float)) else float("nan")
