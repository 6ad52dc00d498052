"""``privbench check-split``: can members and non-members be told apart without any model?

The two record sets are loaded and refused as ``attack --model`` does (at their own size: no model to fit them to);
the check is :func:`privbench.metrics.split_shift.split_shift`, on captions too when the records carry them."""
from __future__ import annotations

from ..core.errors import BadInput
from ..core.registry import DATASETS
from ..metrics.split_shift import DEFAULT_FOLDS, DEFAULT_PERMUTATIONS, check_permutations, split_shift
from .external import build_external_records, load_member_sets, refuse_repeated


def check_split(members=None, nonmembers=None, *, split=None, dataset: str | None = None, data_root=None,
                records_range: str = "auto", folds: int = DEFAULT_FOLDS, seed: int = 0,
                permutations: int = DEFAULT_PERMUTATIONS) -> dict:
    """The shift check of two SPECs (or a split file): :func:`split_shift`'s dict plus ``members`` and
    ``nonmembers`` (where the records came from) and ``records_range``. Captions given with one set and not the
    other are bad input."""
    if not isinstance(seed, int) or isinstance(seed, bool) or seed < 0:
        raise BadInput(f"--seed {seed!r}: expected a non-negative integer")
    check_permutations(permutations)
    if split is None and (members is None or nonmembers is None):
        raise BadInput("check-split needs --members SPEC and --nonmembers SPEC (or --split FILE with --dataset)")
    if dataset:
        DATASETS.get(dataset)
    mem, non = load_member_sets(members, nonmembers, None, dataset=dataset, data_root=data_root, split=split,
                                records_range=records_range)
    build_external_records(mem, non, None)  # shared records and different encodings are bad input here too
    refuse_repeated(mem, non)  # a repeated record would sit in a training and a test fold of the classifier
    out = split_shift(mem.x, non.x, folds=folds, seed=seed, permutations=permutations,
                      member_captions=mem.captions, nonmember_captions=non.captions)
    out["members"] = {k: v for k, v in mem.provenance.items() if k != "index"}
    out["nonmembers"] = {k: v for k, v in non.provenance.items() if k != "index"}
    out["records_range"] = mem.provenance.get("range")
    return out
