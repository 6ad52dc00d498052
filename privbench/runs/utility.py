"""Utility of a trained target's samples: downstream accuracy, precision/recall, class fidelity.

One record per (run, target, settings): ``<run_dir>/utility/utility-<target>-<hash>.json``. The protocol (private
classes, the test split read once): docs/benchmarks.md, "Utility of the samples".
"""
from __future__ import annotations

from pathlib import Path

import torch

from ..core.config import config_hash
from ..core.errors import BadInput
from ..core.io import atomic_write_json, read_json_or_none, safe_name
from ..core.seeding import sub_seed
from ..data.splits import public_classes
from ..metrics.extractor import train_cnn_extractor
from ..metrics.utility import ReadOnce, class_fidelity, downstream_accuracy, load_classifier, precision_recall
from .store import run_dir_for
from .train import train

UTILITY_VERSION = 1
_TAG_SAMPLES = 0x0071


def utility_settings(cfg, target: str, n_per_class: int, epochs: int) -> dict:
    return {"target": target, "n_per_class": int(n_per_class), "epochs": int(epochs), "seed": cfg.seed,
            "sampler": cfg.sample.sampler, "ddim_steps": cfg.sample.ddim_steps, "version": UTILITY_VERSION}


def utility_path(run_dir, cfg, target: str, n_per_class: int, epochs: int) -> Path:
    key = config_hash(utility_settings(cfg, target, n_per_class, epochs))
    return Path(run_dir) / "utility" / f"utility-{safe_name(target)}-{key}.json"


def private_classes(cfg, num_classes: int) -> list[int]:
    pub = set(public_classes(cfg.data.public, num_classes))
    return [c for c in range(num_classes) if c not in pub]


def _cnn(runs_dir, cfg):
    return load_classifier(train_cnn_extractor(cfg.dataset, runs_dir, cfg.data.resolution, cfg.data.data_root or None))


def measure_utility(cfg, runs_dir, device="auto", *, target: str | None = None, n_per_class: int = 50,
                    epochs: int = 30) -> dict:
    """Train (or load) the run, sample, measure, write and return the utility record (cached)."""
    method = train(cfg, runs_dir, device)
    target = method.check_target(target)
    path = utility_path(run_dir_for(cfg, runs_dir), cfg, target, n_per_class, epochs)
    cached = read_json_or_none(path, "corrupt utility record; remove it")
    if cached is not None:
        return cached
    ctx = method.ctx
    if ctx.num_classes is None:
        raise BadInput(f"utility of {cfg.method}/{target}: the target is not class-conditional")
    if not ctx.split.test:
        raise BadInput("utility: the run has no test split; set data.n_test (e.g. 300)")
    classes = private_classes(cfg, ctx.info.num_classes)
    y = torch.tensor(classes, dtype=torch.long).repeat_interleave(n_per_class)
    tgt = method.load_target(target)
    x, _ = tgt.sample(len(y), y, seed=sub_seed(cfg.seed, _TAG_SAMPLES), sampler=cfg.sample.sampler,
                      ddim_steps=cfg.sample.ddim_steps, batch_size=cfg.sample.batch_size)
    x = x.float().clamp(-1, 1).cpu()
    test = ReadOnce(*ctx.records(ctx.split.test))
    down = downstream_accuracy(x, y, test, ctx.info.num_classes, cfg.seed, epochs=epochs)
    down["chance"] = 1.0 / len(classes)
    net, meta = _cnn(ctx.store_root, cfg)
    xm, ym = ctx.records(ctx.split.members)
    with torch.no_grad():
        f_fake, logits = net.features_and_logits(x)
        f_real, _ = net.features_and_logits(xm[torch.isin(ym, torch.tensor(classes))])
    rec = {"method": cfg.method, "target": target, "dataset": cfg.dataset, "seed": cfg.seed,
           "classes": classes, "n_samples": len(y), **utility_settings(cfg, target, n_per_class, epochs),
           "downstream": down, "precision_recall": precision_recall(f_real, f_fake),
           "class_fidelity": {**class_fidelity(logits, y, cfg.seed),
                              "classifier_heldout_accuracy": meta.get("heldout_accuracy")},
           "test_reads": test.reads}
    atomic_write_json(path, rec)
    return rec
