"""Utility of synthetic samples, measured as DP-generative papers do (docs/benchmarks.md, "Utility of the samples").

Downstream accuracy (DPImageBench's protocol: epoch selected on synthetic validation, a real test split read once,
:class:`ReadOnce`; selecting on it would violate DP and overstate utility), precision / recall (Kynkäänniemi et al.
2019, k = 3, on privbench's digits CNN features: 8×8 images are meaningless to Inception) and class fidelity.
"""
from __future__ import annotations

import copy

import numpy as np
import torch
from torch.nn import functional as F

from ..core.io import load_weights
from .extractor import _build_cnn, _read_meta


class ReadOnce:
    """A real test split that may be read exactly once (the final test of downstream accuracy)."""

    def __init__(self, x: torch.Tensor, y: torch.Tensor, what: str = "the utility test split"):
        self._data, self.what, self.reads = (x, y), what, 0

    def read(self) -> tuple[torch.Tensor, torch.Tensor]:
        self.reads += 1
        if self.reads > 1:
            raise RuntimeError(f"{self.what} was read a second time: it may be read once, for the final test only")
        return self._data

    def __len__(self) -> int:
        return len(self._data[1])


def load_classifier(path) -> tuple[torch.nn.Module, dict]:
    """privbench's digits CNN (the FID extractor, a held-out classifier) from its weights file, with its meta."""
    meta = _read_meta(path)
    net = _build_cnn(meta["channels"], meta["size"], meta["num_classes"], meta["width"])
    net.load_state_dict(load_weights(path, "cpu"))
    return net.eval(), meta


def bootstrap_ci(values: np.ndarray, seed: int, n_boot: int = 1000, level: float = 0.95) -> list[float]:
    """Percentile bootstrap CI of the mean of ``values`` (resampled with replacement)."""
    v = np.asarray(values, dtype=np.float64)
    rng = np.random.default_rng([seed, 0xB007])
    means = v[rng.integers(0, len(v), (n_boot, len(v)))].mean(1)
    a = (1 - level) / 2
    return [float(np.quantile(means, a)), float(np.quantile(means, 1 - a))]


def _split_synthetic(n: int, val_fraction: float, g: torch.Generator) -> tuple[torch.Tensor, torch.Tensor]:
    perm = torch.randperm(n, generator=g)
    n_val = max(1, int(round(n * val_fraction)))
    return perm[n_val:], perm[:n_val]


def _accuracy(net, x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    with torch.no_grad():
        return (net(x).argmax(1) == y).float()


def downstream_accuracy(x_syn: torch.Tensor, y_syn: torch.Tensor, test: ReadOnce, num_classes: int, seed: int, *,
                        epochs: int = 30, val_fraction: float = 0.2, batch_size: int = 64, lr: float = 2e-3) -> dict:
    """Train on synthetic (x, y), select the epoch on synthetic validation, test once on ``test``."""
    g = torch.Generator().manual_seed(seed)
    tr, va = _split_synthetic(len(y_syn), val_fraction, g)
    torch.manual_seed(seed)
    net = _build_cnn(x_syn.shape[1], x_syn.shape[-1], num_classes)
    opt = torch.optim.AdamW(net.parameters(), lr=lr, weight_decay=1e-4)
    best, best_state, curve = -1.0, None, []
    with torch.enable_grad():
        for epoch in range(epochs):
            net.train()
            order = tr[torch.randperm(len(tr), generator=g)]
            for i in range(0, len(order), batch_size):
                idx = order[i:i + batch_size]
                loss = F.cross_entropy(net(x_syn[idx]), y_syn[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
            net.eval()
            val = float(_accuracy(net, x_syn[va], y_syn[va]).mean())
            curve.append(round(val, 4))
            if val > best:
                best, best_state, best_epoch = val, copy.deepcopy(net.state_dict()), epoch + 1
    net.load_state_dict(best_state)
    net.eval()
    xt, yt = test.read()  # the one read of the real test split
    correct = _accuracy(net, xt, yt).numpy()
    return {"accuracy": float(correct.mean()), "ci": bootstrap_ci(correct, seed), "ci_basis": "bootstrap over test "
            "records (95 %, 1000 resamples)", "selected_epoch": best_epoch, "synthetic_val_accuracy": round(best, 4),
            "val_curve": curve, "n_train": int(len(tr)), "n_val": int(len(va)), "n_test": int(len(yt)),
            "chance": 1.0 / num_classes, "selection": "epoch chosen on synthetic validation samples only"}


def _knn_radii(feats: torch.Tensor, k: int) -> torch.Tensor:
    d = torch.cdist(feats, feats)
    return d.kthvalue(k + 1, dim=1).values  # +1: the point itself at distance 0


def precision_recall(real: torch.Tensor, fake: torch.Tensor, k: int = 3) -> dict:
    """Improved precision and recall (Kynkäänniemi et al. 2019) of ``fake`` against ``real`` features."""
    r_real, r_fake = _knn_radii(real, k), _knn_radii(fake, k)
    d = torch.cdist(fake, real)  # (n_fake, n_real)
    precision = (d <= r_real[None, :]).any(1).float().mean()
    recall = (d.T <= r_fake[None, :]).any(1).float().mean()
    return {"precision": float(precision), "recall": float(recall), "k": k,
            "basis": "k-NN manifolds (Kynkäänniemi et al. 2019) on privbench's digits CNN features"}


def class_fidelity(logits: torch.Tensor, y: torch.Tensor, seed: int) -> dict:
    """Fraction of samples the held-out classifier assigns to their conditioning class, with a bootstrap CI."""
    hit = (logits.argmax(1) == y).float().numpy()
    return {"class_fidelity": float(hit.mean()), "ci": bootstrap_ci(hit, seed)}
