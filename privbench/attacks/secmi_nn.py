"""SecMI-NN, SecMI's neural variant (Duan et al., ICML 2023, "SecMI_NNs"; official code ``jinhaoduan/SecMI``).

A classifier (small CNN, or the official CIFAR ResNet-18) on the pixel-wise absolute t-error map at SecMI's
comparison level, trained by MSE onto {1 member, 0 non-member} with the official SGD recipe; its output is the
score. Every score is out of fold (stratified K-fold cross-fitting). Differences from the official code:
docs/attacks.md §7, docs/attacks-threat-models.md ("SecMI-NN").
"""
from __future__ import annotations

import numpy as np
import torch
from torch import nn

from ..core.config import setting
from ..core.errors import BadInput
from ..core.registry import ATTACKS
from ..core.seeding import seeded_generator
from .base import AttackEnv, AttackOutput, Records
from .secmi import SecMI, compare_level, secmi_nfe, t_error_pairs

_FOLD_STREAM = 0x5EC0F
_NN_STREAM = 0x5EC22


def stratified_folds(labels: np.ndarray, k: int, seed: int) -> np.ndarray:
    """Fold number of each record: within each label, a seeded permutation dealt round-robin into k folds."""
    labels = np.asarray(labels)
    fold = np.empty(len(labels), dtype=np.int64)
    rng = np.random.default_rng([seed, _FOLD_STREAM])
    for lab in np.unique(labels):
        idx = np.flatnonzero(labels == lab)
        idx = idx[rng.permutation(len(idx))]
        fold[idx] = np.arange(len(idx)) % k
    return fold


def small_cnn(channels: int) -> nn.Module:
    """Three conv–BatchNorm–ReLU blocks, global pooling, one output. BatchNorm (as in the ResNet-18) matters:
    t-error maps of a well-fit model are tiny (~1e-2), and without it SGD at lr 1e-3 barely moves the output."""
    return nn.Sequential(
        nn.Conv2d(channels, 32, 3, padding=1, bias=False), nn.BatchNorm2d(32), nn.ReLU(),
        nn.Conv2d(32, 64, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.Conv2d(64, 64, 3, stride=2, padding=1, bias=False), nn.BatchNorm2d(64), nn.ReLU(),
        nn.AdaptiveAvgPool2d(1), nn.Flatten(), nn.Linear(64, 1))


def cifar_resnet18(channels: int) -> nn.Module:
    """ResNet-18 with the CIFAR stem (3×3 conv, stride 1, no max-pool) and one output, as the official
    ``resnet.ResNet18(num_channels, num_classes=1)``."""
    from torchvision.models import resnet18  # lazy: torchvision only for secmi_nn_arch=resnet18

    m = resnet18(num_classes=1)
    m.conv1 = nn.Conv2d(channels, 64, kernel_size=3, stride=1, padding=1, bias=False)
    m.maxpool = nn.Identity()
    return m


def train_classifier(maps: torch.Tensor, labels: torch.Tensor, *, arch: str, steps: int, seed: int,
                     batch_size: int = 128) -> nn.Module:
    """The official recipe: MSE of the single output against {0, 1}, SGD(1e-3, momentum 0.9, wd 5e-4)."""
    device = maps.device
    with torch.random.fork_rng(devices=[device] if device.type == "cuda" else []):
        torch.manual_seed(seed)
        net = (cifar_resnet18 if arch == "resnet18" else small_cnn)(maps.shape[1]).to(device)
    opt = torch.optim.SGD(net.parameters(), lr=1e-3, momentum=0.9, weight_decay=5e-4)
    g = seeded_generator(device, _NN_STREAM, seed)
    y = labels.float().view(-1, 1).to(device)
    n = maps.shape[0]
    net.train()
    for _ in range(steps):
        idx = torch.randperm(n, generator=g, device=device)[:min(batch_size, n)]
        loss = (net(maps[idx]) - y[idx]).pow(2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
    return net.eval()


@ATTACKS.register_class
class SecMINN(SecMI):
    name = "secmi-nn"
    description = "SecMI-NN: classifier on SecMI t-error maps, K-fold cross-fitted (every score out of fold)"
    report_order = 25
    settings_presets = {"test": {"secmi_nn_steps": 20}}
    threat_model = {"queries": "eps-prediction (SecMI's DDIM inversion and one step up and back)",
                    "reference_models": 0, "reference_training": "none",
                    "auxiliary_data": "membership labels of the other folds' evaluation records (K-fold "
                                      "cross-fitting; every reported score is out of fold)",
                    "queries_per_record": "t_sec/k + 1 (official offset) or t_sec/k + 2 (paper)",
                    "source": "as `secmi` (`nns_attack`)"}

    secmi_nn_arch: str = setting("small", choices=["small", "resnet18"],
                                 help="secmi-nn classifier: small CNN, or the official code's CIFAR ResNet-18")
    secmi_nn_steps: int = setting(1000, lo=1, help="secmi-nn SGD steps per fold (official: 15 epochs of 10k maps)")
    secmi_nn_folds: int = setting(2, lo=2, help="secmi-nn cross-fitting folds: every record is scored out of fold")

    def run(self, target, records: Records, env: AttackEnv | None = None) -> AttackOutput:
        env = env or AttackEnv()
        k, offset, folds = int(self.secmi_k), self.secmi_offset, int(self.secmi_nn_folds)
        t_sec = self._tsecs(target.num_timesteps, bool(target.capabilities.latent))[0]
        level = compare_level(t_sec, k, offset)
        labels = records.labels.numpy()
        if min(records.n_members, records.n_nonmembers) < folds:
            raise BadInput(f"secmi-nn: {folds} folds need at least {folds} members and {folds} non-members")
        maps = []
        for _, xb, yb in records.batches(self.batch_size, target.device):
            x_c, x_back = t_error_pairs(target, xb, yb, [level], k)[level]
            maps.append((x_back - x_c).abs().float())      # official: |x̃ − ψ(ϕ(x̃))|^1 for one timestep
        maps_t = torch.cat(maps)
        fold = stratified_folds(labels, folds, env.seed)
        scores = np.empty(len(records))
        for f in range(folds):
            train = torch.as_tensor(np.flatnonzero(fold != f), device=maps_t.device)
            test = torch.as_tensor(np.flatnonzero(fold == f), device=maps_t.device)
            net = train_classifier(maps_t[train], records.labels.to(maps_t.device)[train],
                                   arch=self.secmi_nn_arch, steps=int(self.secmi_nn_steps), seed=env.seed * 1000 + f)
            with torch.no_grad():
                scores[test.cpu().numpy()] = net(maps_t[test]).view(-1).double().cpu().numpy()
        nfe = secmi_nfe(t_sec, k, offset)
        res = AttackOutput(scores=scores, nfe_per_record=nfe)
        res.arrays = {"secmi_nn_fold": fold}
        res.figures = {"t_sec": t_sec, "t_sec_setting": "secmi_t_latent" if target.capabilities.latent else "secmi_t",
                       "k": k, "offset": offset, "compared_levels": [level, level + k],
                       "queries_per_record": nfe, "folds": folds, "arch": self.secmi_nn_arch,
                       "steps": int(self.secmi_nn_steps), "training_share": 1 - 1 / folds,
                       "score": "out-of-fold output of a classifier on |psi(phi(x_c)) - x_c| maps (higher = member)"}
        res.notes.append(f"SecMI-NN: {folds}-fold cross-fitting — every score comes from a classifier that did not "
                         f"see the record's label; offset '{offset}' (levels {level} and {level + k})")
        return res
