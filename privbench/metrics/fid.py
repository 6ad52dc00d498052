"""FID / KID through torch-fidelity, and the per-client FID of the PFDM paper's Table 1.

``fid(a, b, ...)`` compares two in-memory image sets (float N×C×H×W in [−1, 1]); torch-fidelity's
``calculate_metrics`` extracts the features (privbench's CNN by default, Inception with ``inception_weights``)
and computes FID (and KID). Every result dict carries ``extractor``: the name of what produced the features.

``client_fid(method, client=0, ...)``: for client K's majority classes and minority classes separately, samples
of the method's target for that client (pfdm → ``pipeline:K``, local → ``client:K``, single-model methods → their
default target) against client K's real records of those classes; ``average`` = the mean of the two
(the paper's Table 1 shape). The class labels of the generated set follow the class proportions of the real
reference set (``n_per_class`` × number of classes samples in all), so the two sets differ only in the images.
Client reference sets are small on the tiny preset (tens of records): the absolute FIDs are biased and noisy;
compare methods at equal sizes and over several seeds.
"""
from __future__ import annotations

import numpy as np
import torch

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
    import torch_fidelity

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


def fid_target_name(method, client: int) -> str:
    names = method.target_names()
    for cand in (f"pipeline:{client}", f"client:{client}"):
        if cand in names:
            return cand
    return method.default_target


def _matched_labels(ref_labels: torch.Tensor, n_total: int, seed: int) -> torch.Tensor:
    """n_total labels with the class proportions of ``ref_labels`` (largest remainder)."""
    classes, counts = torch.unique(ref_labels, return_counts=True)
    share = counts.double() / counts.sum() * n_total
    k = share.floor().long()
    rem = n_total - int(k.sum())
    order = torch.argsort(-(share - k), stable=True)
    k[order[:rem]] += 1
    return torch.cat([torch.full((int(c),), int(cl)) for cl, c in zip(classes, k)]).long()


def client_fid(method, client: int = 0, n_per_class: int = 50, *, target: str | None = None, seed: int = 0,
               inception_weights: str | None = None, kid: bool = False, sampler: str | None = None,
               ddim_steps: int | None = None, batch_size: int | None = None, heldout: bool = False) -> dict:
    """Per-client FID on the client's majority and minority classes (+ their average), the paper's Table 1.

    ``method``: a trained Method (``api.train(cfg)``). Returns {"majority", "minority", "average", "extractor",
    "target", "client", "n_generated", "n_real", "majority_classes", "minority_classes", "sampler"}.

    The reference is the client's own (training) records, as specified: a model that memorises them scores well.
    ``heldout=True`` also compares the same samples with the held-out non-member records of those classes
    (``out["heldout"]`` = {"majority", "minority", "average", "n_real"}), which rewards generalisation instead.
    """
    ctx = method.ctx
    cfg = method.cfg
    runs_dir = ctx.run_dir.parent
    ex = resolve_extractor(cfg.dataset, runs_dir, inception_weights=inception_weights,
                           resolution=cfg.data.resolution, data_root=cfg.data.data_root or None)
    split = ctx.clients
    if not 0 <= client < len(split.clients):
        from ..errors import BadInput

        raise BadInput(f"client {client}: the split has clients 0..{len(split.clients) - 1}")
    tname = target or fid_target_name(method, client)
    tgt = method.load_target(tname)
    xr, yr = ctx.records(split.clients[client])
    sampler = sampler or cfg.sample.sampler
    ddim_steps = ddim_steps or cfg.sample.ddim_steps
    batch_size = batch_size or cfg.sample.batch_size
    out = {"target": tname, "client": client, "extractor": ex.name, "sampler": sampler,
           "majority_classes": list(split.majority[client]), "minority_classes": list(split.minority[client])}
    groups = {"majority": split.majority[client], "minority": split.minority[client]}
    # one sampling call for both groups (fewer chains); labels in class proportions of the real records
    labels, spans = [], {}
    for gname, classes in groups.items():
        mask = torch.isin(yr, torch.as_tensor(classes))
        ref_y = yr[mask]
        if len(ref_y) < 2:
            spans[gname] = None
            continue
        lab = _matched_labels(ref_y, n_per_class * len(set(ref_y.tolist())), seed)
        spans[gname] = (sum(len(a) for a in labels), len(lab))
        labels.append(lab)
    y_all = torch.cat(labels) if labels else torch.zeros(0, dtype=torch.long)
    if len(y_all):
        gen, _ = tgt.sample(len(y_all), y_all, seed=seed, sampler=sampler, ddim_steps=ddim_steps,
                            batch_size=batch_size)
        gen = gen.float().clamp(-1, 1)
    def against(x_ref, y_ref, with_kid: bool) -> dict:
        """FID (+ KID) of each group's samples vs the reference records of that group's classes."""
        res = {"n_real": {}}
        for gname, classes in groups.items():
            mask = torch.isin(y_ref, torch.as_tensor(classes))
            if spans[gname] is None or int(mask.sum()) < 2:
                res[gname] = None
                continue
            lo, n = spans[gname]
            r = fid_with(ex, gen[lo:lo + n], x_ref[mask], kid=with_kid, device=ctx.device, seed=seed)
            res[gname] = r["fid"]
            if with_kid:
                res[f"{gname}_kid"] = r["kid"]
            res["n_real"][gname] = int(mask.sum())
        vals = [res[g] for g in groups if res[g] is not None]
        res["average"] = float(np.mean(vals)) if len(vals) == 2 else None
        return res

    out.update(against(xr, yr, kid))
    out["n_generated"] = {g: spans[g][1] for g in groups if spans[g] is not None}
    if heldout:
        xh, yh = ctx.records(ctx.split.nonmembers)
        out["heldout"] = against(xh, yh, False)
    return out
