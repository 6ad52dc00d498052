"""``privbench infer-dataset --model M --suspect S --reference R``: was the suspect set used to train M?

Loads the model and the two record sets as ``attack --model`` does (suspect set as members, reference set as
non-members), computes per-record statistics (:mod:`privbench.attacks.statistics`) and runs the CDI-style set test
of :mod:`privbench.metrics.set_inference`; ``valid: false`` when the shift check flags the two sets (docs/attacks.md
§12). Nothing is written to disk.
"""
from __future__ import annotations

import numpy as np

from ..attacks.references import fixed_noise_losses
from ..attacks.statistics import LOSS_STATISTIC, attack_distance, statistic_attack
from ..core.errors import BadInput
from ..metrics.set_inference import set_inference_test
from ..metrics.split_shift import flagged
from .external import OutsideSpec, load_external_target, refuse_repeated

DEFAULT_STATISTICS = ("loss", "pia", "sima")


def record_statistics(tgt, records, names, seed: int, batch_size: int = 256) -> np.ndarray:
    """(n_records, len(names)) distances of ``records`` under ``tgt`` (lower = member for each)."""
    cols = []
    for name in names:
        if name == LOSS_STATISTIC:
            cols.append(fixed_noise_losses(tgt, records, 200, 4, seed, batch_size).mean(1))
        else:
            cols.append(attack_distance(statistic_attack(name, batch_size, tgt.num_timesteps), tgt, records,
                                        seed)[:, 0])
    return np.log(np.maximum(np.stack(cols, 1), 1e-300))


def infer_dataset(model_path, suspect, reference, *, statistics=DEFAULT_STATISTICS, seed: int = 0,
                  device="auto", arch=None, scheduler_config=None, use_ema: bool = True, dataset=None,
                  data_root=None) -> dict:
    names = [s.strip() for s in statistics if s.strip()]
    if not names:
        raise BadInput("--statistics: name at least one per-record statistic")
    twice = sorted({n for n in names if names.count(n) > 1})
    if twice:
        raise BadInput(f"--statistics: {', '.join(twice)} named twice (each is one feature of the test)")
    for n in names:
        statistic_attack(n, 1)  # an unknown statistic is bad input, before loading anything
    ext = load_external_target(OutsideSpec(model_path, suspect, reference, device=device, arch=arch,
                                           scheduler_config=scheduler_config, use_ema=use_ema, dataset=dataset,
                                           data_root=data_root))
    refuse_repeated(ext.mem, ext.non)  # the set test counts records
    rec = ext.records
    is_s = rec.labels.numpy() == 1
    feats = record_statistics(ext.tgt, rec, names, seed)
    test = set_inference_test(feats[is_s], feats[~is_s], seed=seed)
    shift = ext.split_check  # present: the set test above refused fewer than 4 records of either set
    valid = not flagged(shift)
    return {"p_value": test["p_value"], "method": test["method"], "statistics": names, "valid": valid,
            "n_suspect": int(is_s.sum()), "n_reference": int((~is_s).sum()), "test": test,
            "shift_check": {**shift, "verdict": shift["verdict"] if valid else
                            f"the suspect and reference sets differ WITHOUT the model (AUC {shift['auc']:.3f}, "
                            f"p = {shift['p_value']:.3g}): the p-value is not evidence of training"},
            "model": ext.prov, "seed": seed}
