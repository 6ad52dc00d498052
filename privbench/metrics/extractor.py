"""Feature extractors for FID/KID, used through torch-fidelity.

privbench runs offline, without Inception-v3's weights, so the default extractor (``cnn``) is a small CNN classifier
trained on the same real records for every run (the extractor split, else a seeded half of at most 20 000 records:
docs/methods.md §0), so FIDs of different methods and seeds are comparable. Its held-out accuracy is measured on up
to 5000 other records. Cached under ``<runs-dir>/extractors/cnn-<dataset>-<size>px.safetensors``; its features are
the global-average-pooled last convolution (64-d), registered with torch-fidelity as ``privbench-cnn``.
``inception-v3-compat`` is torch-fidelity's standard Inception (``--inception-weights FILE``).

Every number names its extractor (:func:`resolve_extractor`). Importing this module loads no torch.
"""
from __future__ import annotations

import json
import os
from dataclasses import dataclass
from pathlib import Path

import numpy as np
from safetensors import safe_open

from ..core.errors import BadInput
from ..core.extras import require
from ..core.io import path_lock, save_weights
from ..core.registry import FEATURE_EXTRACTORS
from ..data.splits import member_split

TF_CNN_NAME = "privbench-cnn"
EXTRACTOR_VERSION = 1
_MAX_TRAIN = 20_000


@dataclass
class Extractor:
    """What torch-fidelity needs (its registered name + weights file) and the name every result carries."""
    tf_name: str
    weights: str
    name: str          # e.g. "privbench-cnn[digits 8px, v1]" or "inception-v3-compat[pt_inception.pth]"
    channels: int      # channels the extractor expects (inception: 3)
    info: dict


# ------------------------------------------------------------------ the CNN

def _build_cnn(channels: int, size: int, num_classes: int, width: int = 32):
    # lazy: torch only when the CNN is built; this module loads with the registry, without torch
    import torch
    from torch import nn

    class SmallCNN(nn.Module):
        def __init__(self):
            super().__init__()
            layers = [nn.Conv2d(channels, width, 3, padding=1), nn.GELU(),
                      nn.Conv2d(width, width, 3, padding=1), nn.GELU()]
            s, c = size, width
            while s > 4:  # downsample to ≤ 4×4
                layers += [nn.MaxPool2d(2), nn.Conv2d(c, 2 * width, 3, padding=1), nn.GELU()]
                c, s = 2 * width, s // 2
            if c != 2 * width:
                layers += [nn.Conv2d(c, 2 * width, 3, padding=1), nn.GELU()]
            self.body = nn.Sequential(*layers)
            self.head = nn.Linear(2 * width, num_classes)

        def features_and_logits(self, x: torch.Tensor):
            f = self.body(x).mean(dim=(2, 3))
            return f, self.head(f)

        def forward(self, x):
            return self.features_and_logits(x)[1]

    return SmallCNN()


def cnn_path(runs_dir, dataset: str, size: int) -> Path:
    return Path(runs_dir) / "extractors" / f"cnn-{dataset}-{size}px.safetensors"


def train_cnn_extractor(dataset: str, runs_dir, resolution: int = 0, data_root: str | None = None,
                        download: bool = False, steps: int = 1500, seed: int = 0) -> Path:
    """Train (once; cached, under a lock) the CNN feature extractor of ``dataset`` at ``resolution``."""
    # lazy: torch (and data.base, which imports it) only when the CNN is trained
    import torch
    from torch.nn import functional as F

    from ..data.base import extractor_split, load_dataset

    x, y = load_dataset(dataset, data_root or None, download, resolution)
    n, c, size = len(y), x.shape[1], x.shape[-1]
    path = cnn_path(runs_dir, dataset, size)
    if path.exists():
        return path
    with path_lock(path.parent, f"extractor-{dataset}-{size}", "is training a feature extractor"):
        if path.exists():
            return path
        reserved = extractor_split(dataset, y)
        if reserved:
            others = np.setdiff1d(np.arange(n), reserved)
            tr = torch.as_tensor(reserved)
            te = torch.as_tensor(np.sort(others[np.random.default_rng(seed).permutation(len(others))[:5000]]))
        else:
            n_train = min(n // 2, _MAX_TRAIN)
            split = member_split(n, n_train, min(n - n_train, 5000), seed)
            tr, te = torch.as_tensor(split.members), torch.as_tensor(split.nonmembers)
        num_classes = int(y.max()) + 1
        torch.manual_seed(seed)
        net = _build_cnn(c, size, num_classes)
        opt = torch.optim.AdamW(net.parameters(), lr=2e-3, weight_decay=1e-4)
        g = torch.Generator().manual_seed(seed)
        xtr, ytr = x[tr], y[tr]
        net.train()
        with torch.enable_grad():
            for step in range(steps):
                idx = torch.randint(0, len(tr), (64,), generator=g)
                xb = xtr[idx]
                # light augmentation: ±1 pixel shifts and a little noise, so features vary smoothly
                dx, dy = torch.randint(-1, 2, (2,), generator=g).tolist()
                xb = torch.roll(xb, shifts=(dy, dx), dims=(2, 3))
                xb = xb + 0.05 * torch.randn(xb.shape, generator=g)
                lr = 2e-3 * 0.5 * (1 + np.cos(np.pi * step / steps))
                for grp in opt.param_groups:
                    grp["lr"] = lr
                loss = F.cross_entropy(net(xb), ytr[idx])
                opt.zero_grad()
                loss.backward()
                opt.step()
        net.eval()
        with torch.no_grad():
            acc = float((net(x[te]).argmax(1) == y[te]).float().mean()) if len(te) else float("nan")
        meta = {"dataset": dataset, "size": size, "channels": c, "num_classes": num_classes, "width": 32,
                "n_train": len(tr), "heldout_accuracy": round(acc, 4), "seed": seed, "version": EXTRACTOR_VERSION,
                "steps": steps}
        if reserved:
            meta["trained_on"] = "extractor split"
        save_weights(path, dict(net.state_dict()), {"privbench": json.dumps(meta)})
    return path


def _read_meta(path) -> dict:
    with safe_open(str(path), framework="pt") as f:
        return json.loads((f.metadata() or {})["privbench"])


# ------------------------------------------------------------------ torch-fidelity registration

_TF_REGISTERED = False


def register_torch_fidelity() -> None:
    """Register ``privbench-cnn`` with torch-fidelity (idempotent)."""
    global _TF_REGISTERED
    if _TF_REGISTERED:
        return
    # lazy: torch only when FID runs; this module loads with the registry, without torch
    import torch

    torch_fidelity = require("torch_fidelity", "FID")
    # lazy: the [fid] extra (torch-fidelity) is optional: require() above names it
    from torch_fidelity.feature_extractor_base import FeatureExtractorBase
    from torch_fidelity.registry import FEATURE_EXTRACTORS_REGISTRY

    class PrivbenchCNNExtractor(FeatureExtractorBase):
        """uint8 images N×C×H×W → (64-d pooled features, class logits) of the cached privbench CNN."""

        def __init__(self, name, features_list, feature_extractor_weights_path=None, **kwargs):
            super().__init__(name, features_list)
            if not feature_extractor_weights_path:
                raise ValueError("privbench-cnn needs feature_extractor_weights_path (train_cnn_extractor)")
            from safetensors.torch import load_file  # lazy: safetensors.torch imports torch

            meta = _read_meta(feature_extractor_weights_path)
            self.meta = meta
            self.net = _build_cnn(meta["channels"], meta["size"], meta["num_classes"], meta["width"])
            self.net.load_state_dict(load_file(str(feature_extractor_weights_path)))
            self.net.eval()

        @staticmethod
        def get_provided_features_list():
            return ("features", "logits")

        @staticmethod
        def get_default_feature_layer_for_metric(metric):
            return {"isc": "logits"}.get(metric, "features")

        @staticmethod
        def can_be_compiled():
            return False

        @staticmethod
        def get_dummy_input_for_compile():
            return torch.zeros((1, 1, 8, 8), dtype=torch.uint8)

        def forward(self, x):
            if x.dtype != torch.uint8:
                raise ValueError("privbench-cnn expects uint8 images (as torch-fidelity passes them)")
            xf = x.float() / 127.5 - 1.0
            f, logits = self.net.features_and_logits(xf)
            out = {"features": f, "logits": logits}
            return tuple(out[k] for k in self.features_list)

    if TF_CNN_NAME not in FEATURE_EXTRACTORS_REGISTRY:
        torch_fidelity.register_feature_extractor(TF_CNN_NAME, PrivbenchCNNExtractor)
    _TF_REGISTERED = True


# ------------------------------------------------------------------ the privbench registry

def _cnn_factory(dataset: str, runs_dir, resolution: int = 0, data_root=None, download=False, **_) -> Extractor:
    path = train_cnn_extractor(dataset, runs_dir, resolution, data_root, download)
    meta = _read_meta(path)
    register_torch_fidelity()
    return Extractor(TF_CNN_NAME, str(path), f"{TF_CNN_NAME}[{dataset} {meta['size']}px, v{meta['version']}]",
                     meta["channels"], meta)


def _inception_factory(weights: str | None = None, **_) -> Extractor:
    if not weights:
        raise BadInput("inception-v3-compat needs --inception-weights FILE (it cannot be downloaded here)")
    if not os.path.isfile(weights):
        raise BadInput(f"--inception-weights {weights}: file not found")
    return Extractor("inception-v3-compat", str(weights), f"inception-v3-compat[{os.path.basename(weights)}]", 3,
                     {"weights": str(weights)})


FEATURE_EXTRACTORS.add("cnn", _cnn_factory,
                       "small CNN classifier trained on the dataset's extractor split (else a seeded half of the real "
                       "data), cached in the run store (torch-fidelity 'privbench-cnn'; default)")
FEATURE_EXTRACTORS.add("inception-v3-compat", _inception_factory,
                       "torch-fidelity's standard Inception-v3 with --inception-weights FILE")


def resolve_extractor(dataset: str, runs_dir, *, inception_weights: str | None = None, resolution: int = 0,
                      data_root=None, download=False) -> Extractor:
    """The extractor an FID uses: Inception when weights are given, else the dataset's cached CNN."""
    if inception_weights:
        return FEATURE_EXTRACTORS.create("inception-v3-compat", weights=inception_weights)
    return FEATURE_EXTRACTORS.create("cnn", dataset=dataset, runs_dir=runs_dir, resolution=resolution,
                                     data_root=data_root, download=download)
