"""Training and sampling runs: make_method, train (cached by config hash, resumable), sample, load_target
(the stable Python API: docs/api.md)."""
from __future__ import annotations

import contextlib
import json
import logging
import shutil
import time
from pathlib import Path

import numpy as np
import torch

from ..core import distributed
from ..core.config import MAX_PARAMETERS, Config
from ..core.constants import MAX_SAMPLES
from ..core.errors import BadInput
from ..core.io import atomic_path, check_writable, safe_name
from ..core.registry import METHODS
from ..core.validation import path_arg
from ..data.base import load_dataset as _load_dataset
from ..data.splits import config_client_split
from ..metrics.plots import plot_image_grid
from ..models import checkpoint as ckpt
from ..models.method import Method, RunContext, resolve_device, run_partition
from .store import DONE, damaged_artefacts, read_config, read_done, run_dir_for, run_lock, write_config, write_done

LOG = logging.getLogger(__name__)


def load_dataset(name: str, data_root: str | None = None, download: bool = False):
    """(images N×C×H×W float in [−1, 1], labels N long) in the dataset's fixed order."""
    return _load_dataset(name, data_root, download)


def make_method(cfg: Config, run_dir: Path, device) -> Method:
    ctx = RunContext(cfg, Path(run_dir), resolve_device(device) if not isinstance(device, torch.device) else device)
    return METHODS.create(cfg.method, ctx)


def _validate_before_writing(cfg: Config, method: Method) -> None:
    """Everything that can be bad input is checked before the run directory is touched."""
    x, y = method.ctx.dataset  # unknown / missing data root → BadInput
    split = run_partition(cfg, y)
    if cfg.train.init == "public" and not split.public:
        raise BadInput("train.init=public: the run has no public split to pre-train on; set data.public=pool or "
                       "classes:A-B")
    check_model(method)
    method.validate()


def check_model(method: Method) -> None:
    """The UNet the config describes can be built for the dataset's images and run (on the ``meta`` device: no
    memory, no computation), and is not absurdly large (BadInput, one line)."""
    ctx = method.ctx
    c, h, w = ctx.image_shape
    try:
        with torch.device("meta"):
            net = ctx.new_denoiser()
            n_params = sum(p.numel() for p in net.parameters())
            if n_params > MAX_PARAMETERS:
                raise BadInput(f"model.*: the UNet would have {n_params:,} parameters (at most {MAX_PARAMETERS:,}); "
                               f"lower model.block_out_channels or model.layers_per_block")
            y = torch.zeros(2, dtype=torch.long) if ctx.num_classes else None
            net(torch.empty(2, c, h, w), torch.zeros(2, dtype=torch.long), y)
    except BadInput:
        raise
    except (ValueError, RuntimeError, TypeError, IndexError) as e:
        first = (str(e).splitlines() or [type(e).__name__])[0][:160]
        raise BadInput(f"model.*: cannot build the UNet for {c}x{h}x{w} images ({first})") from None


def _say(msg: str) -> None:
    LOG.warning(f"privbench: {msg}")


def _is_unit_file(rel: str, units: set[str]) -> str | None:
    """The checkpoint a recorded artefact belongs to (``checkpoints/<name>.safetensors`` / ``.state.json``)."""
    parts = rel.split("/")
    if len(parts) == 2 and parts[0] == "checkpoints":
        for suffix in (".safetensors", ".state.json"):
            if parts[1].endswith(suffix) and parts[1][:-len(suffix)] in units:
                return parts[1][:-len(suffix)]
    return None


def _repair(method: Method, done: dict | None) -> dict[str, str]:
    """Under the run lock, before training: make the run directory trustworthy again (docs/cli.md §7, "Nothing is
    reused unchecked"): damaged checkpoints are removed, and all derived artefacts if one is damaged; leftovers of
    killed writes too. Returns the recorded hashes of the derived artefacts that were intact (to compare with their
    regeneration)."""
    run_dir, ckpt_dir = method.ctx.run_dir, method.ctx.ckpt_dir
    recorded = (done or {}).get("sha256") if done else None
    bad = damaged_artefacts(run_dir, done) if done is not None else []
    if done is not None:
        (run_dir / DONE).unlink(missing_ok=True)  # first: a kill during the repair leaves an unfinished run
    units = set(ckpt.names(ckpt_dir))
    kept: dict[str, str] = {}
    if isinstance(recorded, dict):
        derived = [rel for rel in recorded if _is_unit_file(rel, units) is None]
        if any(rel in bad for rel in derived):
            for rel in derived:
                if rel not in bad:
                    kept[rel] = recorded[rel]
                (run_dir / rel).unlink(missing_ok=True)
        for rel in bad:
            name = _is_unit_file(rel, units)
            if name is not None:
                ckpt.discard(ckpt_dir, name)
    for name in ckpt.names(ckpt_dir):
        why = ckpt.problem(ckpt_dir, name)
        if why is not None:
            _say(f"{why.split(';')[0]}; removing checkpoint {name} and retraining it")
            ckpt.discard(ckpt_dir, name)
    for folder in (run_dir, ckpt_dir):
        for p in folder.glob(".*") if folder.is_dir() else ():
            if p.is_file() and not p.name.endswith(".lock") and not p.name.startswith((".result.", ".scores.")):
                p.unlink(missing_ok=True)  # a temporary file of a write that was killed
            elif p.is_dir() and ".tmp-" in p.name and folder == ckpt_dir:
                shutil.rmtree(p, ignore_errors=True)  # a checkpoint save that was killed before its commit
    _check_splits(method)
    return kept


def _check_splits(method: Method) -> None:
    """split.json / clients.json are functions of the config and seed: a stored one that differs from the
    recomputed split (garbled, swapped from another run) is removed and rewritten, never used."""
    ctx, cfg = method.ctx, method.cfg
    path = ctx.run_dir / "split.json"
    expected = run_partition(cfg, ctx.dataset[1])
    checks = [(path, expected.to_json())]
    cpath = ctx.run_dir / "clients.json"
    if cpath.exists():
        cs = config_client_split(cfg, expected.members, ctx.dataset[1].numpy(), ctx.info.num_classes)
        checks.append((cpath, cs.to_json()))
    for p, want in checks:
        if not p.exists():
            continue
        try:
            same = json.loads(p.read_text()) == json.loads(want)
        except (OSError, ValueError):
            same = False
        if not same:
            _say(f"{p}: damaged (differs from the split of this config and seed); rewriting it")
            p.unlink()
            ctx.__dict__.pop(p.stem, None)  # a split read from it before (ctx.split, ctx.clients) is re-derived


def train(cfg: Config, runs_dir=None, device="auto") -> Method:
    """Train the method's targets (:func:`ensure_trained`); returns the Method."""
    method = make_method(cfg, run_dir_for(cfg, runs_dir), device)
    ensure_trained(method)
    return method


def ensure_trained(method: Method) -> bool:
    """Train ``method``'s targets in its run directory unless the run finished with intact artefacts (a cache hit);
    True when it trained now. Under torchrun rank 0 alone locks, repairs and writes, and decides every branch."""
    cfg, run_dir = method.cfg, method.ctx.run_dir
    main = distributed.is_main()
    done = read_done(run_dir)
    bad = damaged_artefacts(run_dir, done) if done is not None else None
    if distributed.agree(done is not None and not bad):
        if main:
            LOG.info(f"privbench: cache hit: {run_dir}")
        return False
    if done is not None and main:
        what = ("no content hashes are recorded" if bad == ["*"] else
                f"{', '.join(bad[:4])}{' …' if len(bad) > 4 else ''} missing or damaged")
        _say(f"{run_dir}: {what}; retraining (what is intact is reused)")
    _validate_before_writing(cfg, method)
    with run_lock(run_dir) if main else contextlib.nullcontext():
        done = read_done(run_dir)
        if distributed.agree(done is not None and not damaged_artefacts(run_dir, done)):
            return False  # another process finished (or repaired) it while we waited
        kept = _repair(method, done) if main else {}
        if main:
            write_config(run_dir, cfg)
        distributed.barrier()  # the other ranks read the run only once rank 0 has repaired it
        t0 = time.time()
        method.train()
        method.ctx.write_split()  # every finished run holds its split (attacks read it)
        if "clients.json" in kept or (run_dir / "clients.json").exists():
            method.ctx.write_clients()
        if main:
            world = {"world_size": distributed.world_size()} if distributed.is_distributed() else {}
            record = write_done(run_dir, {"seconds": round(time.time() - t0, 1), "device": str(method.ctx.device),
                                          **world})
            changed = [rel for rel, h in kept.items() if record["sha256"].get(rel) != h]
            if changed:
                _say(f"note: {', '.join(changed)} regenerated with other content than before (the checkpoints "
                     f"were trained with the old one; delete {run_dir} to retrain everything)")
        distributed.barrier()
    return True


def load_target(run_dir, target: str | None = None, device="auto"):
    """``privbench.load_target(run_dir, target=None)`` → a Target of a trained run."""
    run_dir = path_arg(run_dir, "run_dir")
    cfg = read_config(run_dir)
    method = make_method(cfg, run_dir, device)
    done = read_done(run_dir)
    if done is None:
        raise BadInput(f"{run_dir}: training has not finished; run `privbench train` first")
    bad = damaged_artefacts(run_dir, done)
    if bad and bad != ["*"]:
        raise BadInput(f"{run_dir}: {', '.join(bad[:4])} missing or damaged; `privbench train` retrains it")
    return method.load_target(target)


def sample(cfg: Config, runs_dir=None, device="auto", *, n: int = 64, target: str | None = None,
           klass: int | None = None, out: str | None = None, npz: str | None = None) -> dict:
    """Draw ``n`` samples from a trained (or newly trained) target; write a grid PNG and optionally an npz."""
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES:
        raise BadInput(f"--n {n}: must be an integer in [1, {MAX_SAMPLES}]")
    for opt, path, suffix in (("--out", out, ".png"), ("--npz", npz, ".npz")):
        if path and Path(path).is_dir():
            raise BadInput(f"{opt} {path}: is a directory; give a file name")
        if path and Path(path).suffix.lower() != suffix:  # the file is written in this format whatever its name
            raise BadInput(f"{opt} {path}: writes a {suffix[1:].upper()} file; give a name ending in {suffix}")
        if path:
            check_writable(path, opt)
    run_dir = run_dir_for(cfg, runs_dir)
    method = make_method(cfg, run_dir, device)
    method.check_target(target)
    nc = method.ctx.num_classes
    if klass is not None and (nc is None or not 0 <= klass < nc):
        raise BadInput(f"--class {klass}: must be in [0, {nc}) for dataset {cfg.dataset}" if nc else
                       "--class: this target is unconditional")
    ensure_trained(method)
    tgt = method.load_target(target)
    y = torch.full((n,), klass, dtype=torch.long) if klass is not None else None
    images, labels = tgt.sample(n, y, seed=cfg.seed, sampler=cfg.sample.sampler, ddim_steps=cfg.sample.ddim_steps,
                                batch_size=cfg.sample.batch_size)
    images = images.float().clamp(-1, 1) if tgt.clip_sample else images.float()
    out_path = Path(out) if out else run_dir / f"samples-{safe_name(tgt.name)}.png"
    plot_image_grid(images.clamp(-1, 1), out_path, labels=labels.tolist() if labels is not None else None)
    if npz:
        with atomic_path(Path(npz)) as tmp, open(tmp, "wb") as fh:
            np.savez(fh, images=images.numpy().astype(np.float32),
                     labels=(labels.numpy() if labels is not None else np.full(n, -1)))
    return {"method": cfg.method, "target": tgt.name, "dataset": cfg.dataset, "n": n, "class": klass,
            "run_dir": str(run_dir), "grid": str(out_path), "npz": str(npz) if npz else None}
