"""The order of rows in every report, asked of the registries (each method and attack declares its
``report_order``; a method declares the order of its target kinds). Names no registry knows (results of a plug-in
that is not installed here) go last, in name order."""
from __future__ import annotations

from ..core.ranks import rank_target
from ..core.registry import METHODS, entry_attribute, entry_owners, has_entry

UNKNOWN = 10_000


def method_rank(method: str) -> int:
    return entry_attribute("METHODS", method, "report_order") if has_entry("METHODS", method) else UNKNOWN


def is_private(method: str) -> bool:
    return bool(has_entry("METHODS", method) and entry_attribute("METHODS", method, "private"))


def target_rank(method: str, target: str) -> tuple:
    if has_entry("METHODS", method):
        if entry_owners("METHODS", method, ("target_rank", "target_kind")) == {"Method"}:  # the base's ranking
            return rank_target(target, tuple(entry_attribute("METHODS", method, "target_order")))
        return METHODS.get(method).factory.target_rank(target)
    head, _, k = target.partition(":")
    return (UNKNOWN, int(k) if k.isdigit() else 0, target)


def attack_rank(attack: str) -> int:
    """By the attack's report_order; variants (``lira@online``) right after their attack's default."""
    name = attack.split("@", 1)[0]
    return entry_attribute("ATTACKS", name, "report_order") if has_entry("ATTACKS", name) else UNKNOWN


#: the attack families of a paper's membership tables, in page order (asked of each attack's ``needs_references``)
FAMILIES = ("single-model attacks", "reference-model attacks")


def attack_family(attack: str) -> str:
    """"reference-model attacks" for attacks that train reference models (LiRA, RMIA, GSA), else "single-model
    attacks" — the split a two-column paper's membership tables use (plug-ins not installed here: single-model)."""
    name = attack.split("@", 1)[0]
    refs = has_entry("ATTACKS", name) and bool(entry_attribute("ATTACKS", name, "needs_references", False))
    return FAMILIES[1] if refs else FAMILIES[0]
