"""Attacks on diffusion targets, registered by name in ``privbench.registry.ATTACKS``.

Every attack implements :class:`privbench.attacks.base.Attack` (one score per record, higher = member, plus
attack-specific figures); :mod:`privbench.attacks.runner` trains/loads the target, runs an attack and writes its
results (cli.md).
"""
from ..registry import ATTACKS
from .base import Attack, AttackEnv, AttackOutput, Records
from .loss import LossAttack
from .memorization import NNRatioMemorization
from .pia import PIA, PIAN
from .reconstruction import Reconstruction
from .secmi import SecMI
from .secmi_nn import SecMINN
from .sima import SimA
from .lira import LiRA
from .rmia import RMIA
from .gsa import GSA

ATTACKS.add("loss", LossAttack, "loss threshold: -||eps - eps_theta(x_t, t)||^2 at t=200 (n_draws seeded draws)")
ATTACKS.add("secmi", SecMI, "SecMI_stat: DDIM inversion to t_sec=100 (k=10), t-error of one step up and back")
ATTACKS.add("pia", PIA, "PIA: eps0 = eps_theta(x0, 0), -sum|eps0 - eps_theta(x_t, t)|^4 at t=200 (2 queries)")
ATTACKS.add("pian", PIAN, "PIAN: PIA with eps0 rescaled to mean |eps0| = sqrt(2/pi) (official constant)")
ATTACKS.add("secmi-nn", SecMINN, "SecMI-NN: classifier on SecMI t-error maps, K-fold cross-fitted (every score out of fold)")
ATTACKS.add("sima", SimA, "SimA: -sum|eps_theta(x0, t)|^4 of the unnoised record at t=100 (1 query)")
ATTACKS.add("lira", LiRA, "LiRA (online/offline): per-record Gaussians of reference models' fixed-noise losses")
ATTACKS.add("rmia", RMIA, "RMIA: share of population z with LR(x)/LR(z) > gamma, LR from reference models")
ATTACKS.add("gsa", GSA, "GSA: classifier on per-layer gradient norms, trained on reference-model data (white-box)")
ATTACKS.add("memorization", NNRatioMemorization,
            "memorized fraction of samples: L2(x, NN1)/L2(x, NN2) < 1/3 against the training records")
ATTACKS.add("reconstruction", Reconstruction,
            "reconstruct records from noised uploads (naive, Tweedie, reverse chain): PSNR, SSIM, re-id rate")

__all__ = ["Attack", "AttackEnv", "AttackOutput", "Records", "LossAttack", "SecMI", "PIA", "PIAN",
           "NNRatioMemorization", "Reconstruction", "SecMINN", "SimA", "LiRA", "RMIA", "GSA"]
