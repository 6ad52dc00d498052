"""FID / KID through torch-fidelity, and the per-client FID of the PFDM paper's Table 1 (docs/benchmarks.md).

Every result dict carries ``extractor``: the name of what produced the features. ``bench.cells.client_fid``
samples with the real reference set's class proportions, so the two sets differ only in the images. Client reference
sets are small on the tiny preset (tens of records): the FIDs are biased and noisy; compare methods at equal sizes
and seeds.
"""
from __future__ import annotations

import torch

from ..core.extras import require
from .extractor import Extractor, resolve_extractor


class _ImageSet(torch.utils.data.Dataset):
    """uint8 C×H×W tensors, as torch-fidelity expects (channels repeated to 3 for Inception)."""

    def __init__(self, images: torch.Tensor, channels: int):
        x = images.detach().float().cpu().clamp(-1, 1)
        x = ((x + 1.0) * 127.5).round().to(torch.uint8)
        if channels == 3 and x.shape[1] == 1:
            x = x.repeat(1, 3, 1, 1)
        self.x = x

    def __len__(self):
        return self.x.shape[0]

    def __getitem__(self, i):
        return self.x[i]


def fid_with(ex: Extractor, images_a: torch.Tensor, images_b: torch.Tensor, *, kid: bool = False,
             device="cpu", batch_size: int = 256, seed: int = 0) -> dict:
    """FID (and KID) of two image sets with a resolved extractor, computed by torch-fidelity."""
    torch_fidelity = require("torch_fidelity", "FID")

    if len(images_a) < 2 or len(images_b) < 2:
        raise ValueError(f"FID needs at least 2 images per set (got {len(images_a)} and {len(images_b)})")
    kw = dict(input1=_ImageSet(images_a, ex.channels), input2=_ImageSet(images_b, ex.channels), fid=True, kid=kid,
              feature_extractor=ex.tf_name, feature_extractor_weights_path=ex.weights,
              cuda=torch.device(device).type == "cuda", batch_size=batch_size, save_cpu_ram=True, verbose=False,
              cache=False, rng_seed=seed)
    if kid:
        kw["kid_subset_size"] = min(len(images_a), len(images_b), 1000)
        kw["kid_subsets"] = 100
    m = torch_fidelity.calculate_metrics(**kw)
    out = {"fid": float(m["frechet_inception_distance"]), "n1": len(images_a), "n2": len(images_b),
           "extractor": ex.name}
    if kid:
        out["kid"] = float(m["kernel_inception_distance_mean"])
        out["kid_std"] = float(m["kernel_inception_distance_std"])
    return out


def fid(images_a: torch.Tensor, images_b: torch.Tensor, *, dataset: str, runs_dir, inception_weights=None,
        resolution: int = 0, kid: bool = False, device="cpu", seed: int = 0) -> dict:
    """FID (and KID) between two image sets of ``dataset`` → {"fid", ["kid"], "n1", "n2", "extractor"}."""
    ex = resolve_extractor(dataset, runs_dir, inception_weights=inception_weights, resolution=resolution)
    return fid_with(ex, images_a, images_b, kid=kid, device=device, seed=seed)
