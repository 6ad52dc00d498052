"""Reference models for a model privbench did not train (``--reference-recipe FILE --reference-data SPEC``), so
that lira, rmia, gsa and qmia run on ``--model`` targets: the recipe (a shipped YAML recipe, or a Python file
defining ``train(records, seed) -> folder``, which runs the user's code), the halves, the store and the hash are
described in docs/external-models.md, "Reference-model attacks on your model".
"""
from __future__ import annotations

import importlib.util
import json
import logging
import time
from pathlib import Path

import numpy as np
import torch

from ..attacks.base import Records
from ..attacks.references import ReferenceModels
from ..core import progress
from ..core.config import config_hash
from ..core.errors import BadInput
from ..core.io import atomic_write_json, sha256_file
from ..core.yamlio import read_yaml
from ..data.records_io import load_records, records_sha256, shared_count
from ..models.external import load_external
from .loaded import loaded_once
from .store import default_runs_dir, run_lock

LOG = logging.getLogger(__name__)

SHIPPED_MODELS = ("UNet2DModel",)
_INCLUSION, _HOLDOUT = 0x5EF1, 0x5EF2
NOTE = ("reference models trained by privbench's reference recipe ({recipe}), NOT with the target's own training "
        "code: the calibration assumes they resemble the target's training")


def load_recipe(path) -> dict:
    """{"kind": "yaml"|"python", "spec" or "train", "sha256", "path"}; bad files are BadInput."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise BadInput(f"--reference-recipe {path}: no such file")
    digest = sha256_file(p)
    if p.suffix == ".py":
        spec = importlib.util.spec_from_file_location(f"privbench_recipe_{digest[:12]}", p)
        mod = importlib.util.module_from_spec(spec)
        try:
            spec.loader.exec_module(mod)  # the user's code, run because the user named the file
        except Exception as e:  # noqa: BLE001 — any failure is the user's file
            raise BadInput(f"--reference-recipe {path}: importing it failed ({type(e).__name__}: {e})") from None
        if not callable(getattr(mod, "train", None)):
            raise BadInput(f"--reference-recipe {path}: defines no train(records, seed) function")
        return {"kind": "python", "train": mod.train, "sha256": digest, "path": str(p.resolve())}
    if p.suffix not in (".yaml", ".yml"):
        raise BadInput(f"--reference-recipe {path}: a .yaml recipe or a .py file with train(records, seed)")
    spec = read_yaml(p, f"--reference-recipe {path}")
    if not isinstance(spec, dict):
        raise BadInput(f"--reference-recipe {path}: expected a mapping (model, steps, lr, batch)")
    model = spec.get("model")
    if model not in SHIPPED_MODELS:
        raise BadInput(f"--reference-recipe {path}: model {model!r}; privbench ships {', '.join(SHIPPED_MODELS)} "
                       f"(a text-conditioned UNet2DConditionModel needs a Python recipe)")
    clean = {"model": model}
    for key, typ, lo, hi in (("steps", int, 1, 10_000_000), ("batch", int, 1, 1_000_000), ("lr", float, 0.0, 1.0),
                             ("layers_per_block", int, 1, 8)):
        v = spec.get(key, {"steps": 1000, "batch": 64, "lr": 2e-4, "layers_per_block": 1}[key])
        ok = not isinstance(v, bool) and (isinstance(v, int) if typ is int else isinstance(v, (int, float)))
        if not ok or not (lo <= v <= hi if typ is int else lo < v <= hi):
            span = f"[{lo}, {hi}]" if typ is int else f"({lo}, {hi}]"
            raise BadInput(f"--reference-recipe {path}: {key}={v!r} must be {'an integer' if typ is int else 'a number'}"
                           f" in {span}")
        clean[key] = typ(v)
    arch = spec.get("architecture", "recipe")
    if arch not in ("recipe", "target"):
        raise BadInput(f"--reference-recipe {path}: architecture={arch!r}: recipe (block_out_channels, "
                       f"layers_per_block) or target (the outside model's own UNet2DModel config, fresh weights)")
    if arch == "target" and ("block_out_channels" in spec or "layers_per_block" in spec):
        raise BadInput(f"--reference-recipe {path}: architecture: target takes the target's own config; drop "
                       f"block_out_channels/layers_per_block")
    clean["architecture"] = arch
    boc = spec.get("block_out_channels", [16, 32])
    if not (isinstance(boc, list) and 1 <= len(boc) <= 6 and all(isinstance(c, int) and 8 <= c <= 1024
                                                                  and c % 8 == 0 for c in boc)):
        raise BadInput(f"--reference-recipe {path}: block_out_channels={boc!r}: 1-6 multiples of 8 in [8, 1024]")
    clean["block_out_channels"] = boc
    unknown = set(spec) - set(clean)
    if unknown:
        raise BadInput(f"--reference-recipe {path}: unknown keys {sorted(unknown)}")
    return {"kind": "yaml", "spec": clean, "sha256": digest, "path": str(p.resolve())}


def train_shipped(spec: dict, x: torch.Tensor, y: torch.Tensor | None, seed: int, out: Path, target) -> Path:
    """The shipped recipe: a diffusers UNet2DModel trained with the DDPM ε-loss on the target's schedule."""
    # lazy: diffusers (seconds to import) only when this runs
    from diffusers import DDPMPipeline, DDPMScheduler, UNet2DModel

    c, h, _ = x.shape[1:]
    n = len(spec["block_out_channels"])
    torch.manual_seed(seed)
    if spec.get("architecture") == "target":
        if not isinstance(getattr(target, "model", None), UNet2DModel):
            raise BadInput("--reference-recipe: architecture: target needs a diffusers UNet2DModel target")
        unet = UNet2DModel.from_config(target.model.config).train()  # the target's network, fresh weights
    else:
        unet = UNet2DModel(sample_size=h, in_channels=c, out_channels=c,
                           block_out_channels=tuple(spec["block_out_channels"]), layers_per_block=spec["layers_per_block"],
                           down_block_types=("DownBlock2D",) * n, up_block_types=("UpBlock2D",) * n, norm_num_groups=8,
                           num_class_embeds=target.num_classes or None).train()
    s = target.schedule
    sched = DDPMScheduler(num_train_timesteps=int(s.num_timesteps), beta_start=float(s.beta_start),
                          beta_end=float(s.beta_end), beta_schedule=str(s.beta_schedule))
    opt = torch.optim.Adam(unet.parameters(), lr=spec["lr"])
    g = torch.Generator().manual_seed(seed)
    for _ in progress.bar(iterable=range(spec["steps"]), desc=f"reference recipe (seed {seed})", unit="step"):
        idx = torch.randint(0, len(x), (min(spec["batch"], len(x)),), generator=g)
        x0 = x[idx]
        noise = torch.randn(x0.shape, generator=g)
        t = torch.randint(0, int(s.num_timesteps), (len(x0),), generator=g)
        labels = y[idx] if (target.num_classes and y is not None) else None
        loss = torch.nn.functional.mse_loss(unet(sched.add_noise(x0, noise, t), t, class_labels=labels).sample, noise)
        opt.zero_grad()
        loss.backward()
        opt.step()
    if target.num_classes:
        unet.eval().save_pretrained(str(out / "unet"))
        sched.save_pretrained(str(out / "scheduler"))
        return out / "unet"
    DDPMPipeline(unet=unet.eval(), scheduler=sched).save_pretrained(str(out))
    return out


def _split(n: int, seed: int, k: int) -> tuple[np.ndarray, np.ndarray]:
    """(population mask, (k, n) inclusion coins): a quarter held out of every reference, halves of the rest."""
    pop = np.zeros(n, dtype=bool)
    pop[np.random.default_rng([seed, _HOLDOUT]).permutation(n)[: n // 4]] = True
    coins = np.stack([np.random.default_rng([seed, _INCLUSION, i]).random(n) < 0.5 for i in range(k)]) \
        if k else np.zeros((0, n), dtype=bool)
    return pop, coins & ~pop[None]


def build_external_references(ext, recipe: dict | None, data_spec, *, n: int, seed: int, runs_dir=None,
                              device="cpu", dataset: str | None = None, data_root=None) -> tuple[ReferenceModels, dict]:
    """(ReferenceModels over ``ext.records``, provenance) — trains (or reuses) ``n`` references. ``dataset``,
    ``data_root``: where an ``.npy`` of dataset indices reads its records (the target's own)."""
    tgt = ext.tgt
    x, y, prov = load_records(data_spec, image_shape=tgt.meta.get("shape"), dataset=dataset, data_root=data_root)
    y = y.long() if y is not None else torch.zeros(len(x), dtype=torch.long)
    if len(x) < 8:
        raise BadInput(f"--reference-data {data_spec}: {len(x)} records; at least 8 are needed")
    clash = shared_count(x, ext.records.x)
    if clash:
        raise BadInput(f"--reference-data {data_spec}: {clash} records are also evaluation records; the "
                       f"reference data must be disjoint from --members/--nonmembers")
    pop, coins = _split(len(x), seed, n)
    if n and (coins.sum(1) < 2).any():
        raise BadInput(f"--reference-data {data_spec}: too few records for {n} reference halves")
    key = config_hash({"recipe": recipe["sha256"] if recipe else None, "data": records_sha256(x, y, None, None),
                       "schedule": tgt.schedule.__dict__ if hasattr(tgt.schedule, "__dict__") else str(tgt.schedule),
                       "shape": list(tgt.meta.get("shape") or []), "classes": tgt.num_classes, "seed": seed})
    store = (Path(runs_dir) if runs_dir else default_runs_dir()) / f"external-references-{key}"
    targets = []
    for i in range(n):
        ref_dir = store / f"ref-{i}"
        done = ref_dir / "train_done.json"
        with run_lock(ref_dir, "reference"):
            if not done.exists():
                LOG.info(f"privbench: training reference model {i} with {recipe['kind']} recipe {recipe['path']} "
                         f"in {ref_dir}")
                t0 = time.time()
                xi, yi = x[torch.as_tensor(coins[i])], y[torch.as_tensor(coins[i])]
                if recipe["kind"] == "yaml":
                    folder = train_shipped(recipe["spec"], xi, yi, seed * 1000 + i, ref_dir, tgt)
                else:
                    folder = Path(recipe["train"]({"images": xi.clone(), "labels": yi.clone()}, seed * 1000 + i))
                # relative inside the reference's folder (a moved run store still finds it), else as given
                where, home = folder.resolve(), ref_dir.resolve()
                rel = where.relative_to(home) if where.is_relative_to(home) else where
                atomic_write_json(done, {"seconds": round(time.time() - t0, 1), "folder": str(rel),
                                         "recipe_sha256": recipe["sha256"]})
            folder = ref_dir / json.loads(done.read_text())["folder"]  # an absolute path stays itself
        targets.append(loaded_once(("outside reference", str(folder.resolve()), str(device), i),
                                   lambda f=folder, i=i: load_external(f, device=device, name=f"reference-{i}")[0]))
    in_masks = np.zeros((n, len(ext.records)), dtype=bool)  # disjoint data: every reference is OUT on every record
    pool = Records(x[torch.as_tensor(~pop)], y[torch.as_tensor(~pop)], torch.zeros(int((~pop).sum()), dtype=torch.long),
                   torch.arange(len(x))[torch.as_tensor(~pop)])
    population = Records(x[torch.as_tensor(pop)], y[torch.as_tensor(pop)], torch.zeros(int(pop.sum()), dtype=torch.long),
                         torch.arange(len(x))[torch.as_tensor(pop)])
    refs = ReferenceModels(targets=targets, in_masks=in_masks, mode="offline", pool=pool,
                           pool_in=coins[:, ~pop] if n else np.zeros((0, len(pool)), dtype=bool),
                           population=population, seeds=[seed * 1000 + i for i in range(n)], store=str(store))
    provenance = {"recipe": None if recipe is None else {"kind": recipe["kind"], "path": recipe["path"],
                                                         "sha256": recipe["sha256"],
                                                         "spec": recipe.get("spec")},
                  "reference_data": prov, "n_reference": n, "store": str(store),
                  "note": NOTE.format(recipe=recipe["kind"] if recipe else "none")}
    return refs, provenance
