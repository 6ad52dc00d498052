"""A toy membership attack in one file (the architecture test drops it into privbench/attacks/): the score is
minus the squared ε-prediction error at one timestep, with its own setting ``attack.toy_t``."""
from __future__ import annotations

import torch

from privbench.attacks.base import Attack, AttackOutput, cond, to_numpy, tvec
from privbench.core.config import setting
from privbench.core.registry import ATTACKS
from privbench.core.seeding import seeded_generator


@ATTACKS.register_class
class ToyAttack(Attack):
    name = "toy"
    description = "toy: -||eps - eps_theta(x_t, toy_t)||^2 with one seeded draw"
    report_order = 90
    threat_model = {"queries": "epsilon-prediction at one timestep", "reference_models": 0,
                    "auxiliary_data": "none", "queries_per_record": 1}

    toy_t: int = setting(100, lo=0, help="timestep of the toy attack")

    @torch.no_grad()
    def run(self, target, records, env=None):
        del env  # part of the Attack.run interface; the toy attack queries the target alone
        ac = target.alphas_cumprod
        out = []
        for b, xb, yb in records.batches(self.batch_size, target.device):
            g = seeded_generator(target.device, 7, b)
            eps = torch.randn(xb.shape, generator=g, device=target.device)
            a = ac[self.toy_t]
            x_t = a.sqrt() * xb + (1 - a).sqrt() * eps
            pred = target.predict_noise(x_t, tvec(self.toy_t, xb.shape[0], target.device), cond(target, yb))
            out.append(-(pred - eps).pow(2).flatten(1).sum(1))
        return AttackOutput(scores=to_numpy(out), nfe_per_record=1)
