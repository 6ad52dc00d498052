"""Attacks on diffusion targets, registered by name in ``privbench.registry.ATTACKS``.

Every attack implements :class:`privbench.attacks.base.Attack` (one score per record, higher = member, plus
attack-specific figures); :mod:`privbench.attacks.runner` trains/loads the target, runs an attack and writes its
results (docs/cli.md §5).
"""
from ..registry import ATTACKS
from .base import Attack, AttackEnv, AttackOutput, Records
from .loss import LossAttack
from .memorization import NNRatioMemorization
from .pia import PIA, PIAN
from .reconstruction import Reconstruction
from .secmi import SecMI

ATTACKS.add("loss", LossAttack, "loss threshold: -||eps - eps_theta(x_t, t)||^2 at t=200 (n_draws seeded draws)")
ATTACKS.add("secmi", SecMI, "SecMI_stat: DDIM inversion to t_sec=100 (k=10), t-error of one step up and back")
ATTACKS.add("pia", PIA, "PIA: eps0 = eps_theta(x0, 0), -sum|eps0 - eps_theta(x_t, t)|^4 at t=200 (2 queries)")
ATTACKS.add("pian", PIAN, "PIAN: PIA with eps0 rescaled to mean |eps0| = sqrt(2/pi) (official constant)")
ATTACKS.add("memorization", NNRatioMemorization,
            "memorized fraction of samples: L2(x, NN1)/L2(x, NN2) < 1/3 against the training records")
ATTACKS.add("reconstruction", Reconstruction,
            "reconstruct records from noised uploads (naive, Tweedie, reverse chain): PSNR, SSIM, re-id rate")

__all__ = ["Attack", "AttackEnv", "AttackOutput", "Records", "LossAttack", "SecMI", "PIA", "PIAN",
           "NNRatioMemorization", "Reconstruction"]
