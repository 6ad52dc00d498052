"""The order of rows in every report, asked of the registries (each method and attack declares its
``report_order``; a method declares the order of its target kinds). Names no registry knows (results of a plug-in
that is not installed here) go last, in name order."""
from __future__ import annotations

from ..core.registry import ATTACKS, METHODS

UNKNOWN = 10_000


def method_rank(method: str) -> int:
    return METHODS.get(method).factory.report_order if method in METHODS else UNKNOWN


def is_private(method: str) -> bool:
    return bool(method in METHODS and METHODS.get(method).factory.private)


def target_rank(method: str, target: str) -> tuple:
    if method in METHODS:
        return METHODS.get(method).factory.target_rank(target)
    head, _, k = target.partition(":")
    return (UNKNOWN, int(k) if k.isdigit() else 0, target)


def attack_rank(attack: str) -> int:
    """By the attack's report_order; variants (``lira@online``) right after their attack's default."""
    name = attack.split("@", 1)[0]
    return ATTACKS.get(name).factory.report_order if name in ATTACKS else UNKNOWN


#: the attack families of a paper's membership tables, in page order (asked of each attack's ``needs_references``)
FAMILIES = ("single-model attacks", "reference-model attacks")


def attack_family(attack: str) -> str:
    """"reference-model attacks" for attacks that train reference models (LiRA, RMIA, GSA), else "single-model
    attacks" — the split a two-column paper's membership tables use (plug-ins not installed here: single-model)."""
    name = attack.split("@", 1)[0]
    refs = name in ATTACKS and bool(getattr(ATTACKS.get(name).factory, "needs_references", False))
    return FAMILIES[1] if refs else FAMILIES[0]
