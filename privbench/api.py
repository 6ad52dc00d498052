"""The library functions behind the CLI: train, sample, load_target (docs/api.md: the stable Python API)."""
from __future__ import annotations

import sys
import time
from pathlib import Path

import numpy as np
import torch

from .config import Config
from .data.datasets import load_dataset as _load_dataset
from .data.splits import member_split
from .errors import BadInput
from .models.base import Method, RunContext, resolve_device
from .registry import METHODS
from .runs import atomic_path, atomic_write_json, read_config, run_dir_for, run_lock, safe_name, write_config


def load_dataset(name: str, data_root: str | None = None, download: bool = False):
    """(images N×C×H×W float in [−1, 1], labels N long) in the dataset's fixed order."""
    return _load_dataset(name, data_root, download)


def make_method(cfg: Config, run_dir: Path, device) -> Method:
    ctx = RunContext(cfg, Path(run_dir), resolve_device(device) if not isinstance(device, torch.device) else device)
    return METHODS.create(cfg.method, ctx)


def _validate_before_writing(cfg: Config, method: Method) -> None:
    """Everything that can be bad input is checked before the run directory is touched."""
    x, y = method.ctx.dataset  # unknown / missing data root → BadInput
    member_split(len(y), cfg.data.n_members, cfg.data.n_nonmembers, cfg.seed)
    method.validate()


def train(cfg: Config, runs_dir=None, device="auto") -> Method:
    """Train the method's targets (cached by config hash; resumes an interrupted run). Returns the Method."""
    run_dir = run_dir_for(cfg, runs_dir)
    method = make_method(cfg, run_dir, device)
    done = run_dir / "train_done.json"
    if done.exists():
        print(f"privbench: cache hit: {run_dir}", file=sys.stderr)
        return method
    _validate_before_writing(cfg, method)
    with run_lock(run_dir):
        if done.exists():  # another process finished it while we waited
            return method
        write_config(run_dir, cfg)
        t0 = time.time()
        method.train()
        atomic_write_json(done, {"seconds": round(time.time() - t0, 1), "device": str(method.ctx.device)})
    return method


def load_target(run_dir, target: str | None = None, device="auto"):
    """``privbench.load_target(run_dir, target=None)`` → a Target of a trained run."""
    run_dir = Path(run_dir)
    cfg = read_config(run_dir)
    method = make_method(cfg, run_dir, device)
    if not (run_dir / "train_done.json").exists():
        raise BadInput(f"{run_dir}: training has not finished; run `privbench train` first")
    return method.load_target(target)


def sample(cfg: Config, runs_dir=None, device="auto", *, n: int = 64, target: str | None = None,
           klass: int | None = None, out: str | None = None, npz: str | None = None) -> dict:
    """Draw ``n`` samples from a trained (or newly trained) target; write a grid PNG and optionally an npz."""
    if n < 1:
        raise BadInput(f"--n {n}: must be >= 1")
    run_dir = run_dir_for(cfg, runs_dir)
    method = make_method(cfg, run_dir, device)
    method.check_target(target)
    nc = method.ctx.num_classes
    if klass is not None and (nc is None or not 0 <= klass < nc):
        raise BadInput(f"--class {klass}: must be in [0, {nc}) for dataset {cfg.dataset}" if nc else
                       "--class: this target is unconditional")
    method = train(cfg, runs_dir, device)
    tgt = method.load_target(target)
    y = torch.full((n,), klass, dtype=torch.long) if klass is not None else None
    images, labels = tgt.sample(n, y, seed=cfg.seed, sampler=cfg.sample.sampler, ddim_steps=cfg.sample.ddim_steps,
                                batch_size=cfg.sample.batch_size)
    images = images.float().clamp(-1, 1) if tgt.clip_sample else images.float()
    from .metrics.plots import plot_image_grid

    out_path = Path(out) if out else run_dir / f"samples-{safe_name(tgt.name)}.png"
    plot_image_grid(images.clamp(-1, 1), out_path, labels=labels.tolist() if labels is not None else None)
    if npz:
        with atomic_path(Path(npz)) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, images=images.numpy().astype(np.float32),
                     labels=(labels.numpy() if labels is not None else np.full(n, -1)))
    return {"method": cfg.method, "target": tgt.name, "dataset": cfg.dataset, "n": n, "class": klass,
            "run_dir": str(run_dir), "grid": str(out_path), "npz": str(npz) if npz else None}
