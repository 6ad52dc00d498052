"""Comparing empirical ε lower bounds with a formal ε: like with like, and at a stated family-wise confidence.

The bounds test replace-one (the fixed-size member split of ``data/splits.py``); a formal ε is converted to that
relation and flagged with a Bonferroni-corrected family (docs/accountants.md §3.4, "Neighbouring relation").
"""
from __future__ import annotations

import math
from typing import Any

import numpy as np

from .claims import PrivacyClaim

ADD_REMOVE = "add/remove-one"
REPLACE_ONE = "replace-one"

MEMBERSHIP_GAME = (
    "fixed-size member split (a seeded random permutation): a member takes the place of another record of the "
    "pool, so a record's IN and OUT trials come from same-size training sets that differ by one substitution "
    "(replace-one)")
UPLOAD_GAME = ("two candidate inputs x, x' of one upload, chosen by a fair coin per trial: replace-one, the "
               "relation of the local-DP guarantee itself")


def formal_relation(privacy: PrivacyClaim | None) -> str | None:
    """The neighbouring relation of a result's formal ε: its ``neighbouring_relation`` key, else read from its
    ``basis`` text (``replace-one`` / ``add/remove``); None when neither says."""
    if privacy is None:
        return None
    explicit = str(privacy.neighbouring_relation or "").lower()
    basis = str(privacy.basis or "").lower()
    for text in (explicit, basis):
        if "replace" in text or "substitut" in text:
            return REPLACE_ONE
        if "add/remove" in text or "add-or-remove" in text or "add or remove" in text:
            return ADD_REMOVE
    return None


def comparable_claim(epsilon: float, delta: float | None, relation: str | None, *,
                     empirical: str = REPLACE_ONE, game: str = MEMBERSHIP_GAME) -> dict[str, Any]:
    """The formal (ε, δ) expressed in the empirical test's relation (docs/accountants.md §3.4), with how: keys
    ``formal``, ``empirical``, ``empirical_game``, ``conversion`` (a sentence), ``factor`` (comparable ε / formal ε),
    ``comparable_epsilon``, ``comparable_delta`` and ``testable`` (False when the converted δ is ≥ 1)."""
    eps = float(epsilon)
    d = float(delta) if delta is not None else 0.0
    out: dict[str, Any] = {"formal": relation or f"unknown (not stated in the basis; assumed {ADD_REMOVE})",
                           "empirical": empirical, "empirical_game": game}
    if empirical not in (REPLACE_ONE, ADD_REMOVE):
        raise ValueError(f"empirical relation {empirical!r}")
    if relation == empirical:
        out.update(conversion=f"none: both are {empirical}, compared directly (factor 1)", factor=1.0,
                   comparable_epsilon=eps, comparable_delta=d, testable=True)
        return out
    if empirical == ADD_REMOVE:
        # replace-one (ε, δ) does not imply any add/remove guarantee (a replace-one mechanism may reveal the size)
        out.update(conversion=f"none possible: a {REPLACE_ONE} guarantee implies nothing for an {ADD_REMOVE} game",
                   factor=None, comparable_epsilon=math.inf, comparable_delta=d, testable=False)
        return out
    # add/remove (stated or assumed) → replace-one by group privacy of size 2
    d2 = (1.0 + math.exp(eps)) * d if eps < 700 else math.inf
    testable = d2 < 1.0
    out.update(
        conversion=(f"group privacy: an {ADD_REMOVE} ({eps:.4g}, {d:.3g}) guarantee gives {REPLACE_ONE} "
                    f"(2*eps, (1+e^eps)*delta) = ({2 * eps:.4g}, {d2:.3g})"
                    + ("" if testable else "; that delta is >= 1, so the claim implies nothing for the "
                                           "replace-one game and cannot be contradicted by it")),
        factor=2.0, comparable_epsilon=2.0 * eps, comparable_delta=min(d2, 1.0), testable=testable)
    return out


def bound_confidence(confidence: float, family_size: int) -> float:
    """Bonferroni: the confidence of each of ``family_size`` bounds for the family to hold at ``confidence``."""
    return 1.0 - (1.0 - float(confidence)) / max(int(family_size), 1)


def membership_flag_bounds(scores: Any, labels: Any, *, delta: float, confidence: float, seed: int = 0
                           ) -> dict[str, float]:
    """The Clopper–Pearson (split) and one-run (default counts) bounds of one membership result, at ``confidence``
    each: the reported procedures, for a flag decision."""
    # lazy: privacy.audit loads scipy.optimize/stats; only for a flag decision
    from .audit import clopper_pearson_epsilon, one_run_epsilon

    s, y = np.asarray(scores), np.asarray(labels)
    cp = clopper_pearson_epsilon(s, y, delta=delta, confidence=confidence, threshold_selection="split", seed=seed)
    one = one_run_epsilon(s, y, delta=delta, confidence=confidence, seed=seed)
    return {"clopper_pearson": float(cp["epsilon_lower_bound"]), "one_run": float(one["epsilon_lower_bound"])}


def flag_delta(audit_delta: float, claim: dict) -> float:
    """The δ of the flag's bounds: the converted claim's δ, or the audit's when larger (a claim at δ' holds at
    every larger δ)."""
    return float(min(max(float(audit_delta), float(claim["comparable_delta"])), 1.0 - 1e-12))


def exceeds(bounds: dict[str, float], claim: dict) -> bool:
    """Whether any of the flag bounds exceeds the comparable ε (False when the claim is not testable)."""
    if not claim["testable"]:
        return False
    return any(float(b) > float(claim["comparable_epsilon"]) for b in bounds.values())


#: the bound kinds of a headline family, in the order they are listed
HEADLINE_KINDS = ("clopper_pearson", "one_run")
#: how the bound kinds are named in sentences and tables
KIND_TEXT = {"clopper_pearson": "Clopper-Pearson", "one_run": "one-run"}


def headline_bounds(items: list[tuple[str, Any, Any]], *, delta: float, confidence: float, seed: int = 0
                    ) -> dict[str, Any]:
    """The headline empirical ε lower bound of one model: the largest of its 2k corrected bounds.

    ``items``: (attack label, scores, labels) of the model's k membership results; each gives the two bounds of
    :func:`membership_flag_bounds` at 1 − α/(2k) (docs/accountants.md §3.4, "One headline per model").

    Returns the ``headline`` keys of docs/cli.md §4.6 from ``epsilon_lower_bound`` to ``bounds`` (each
    ``{attack, bound, epsilon_lower_bound}``; ``attack`` and ``bound`` None when the maximum is 0)."""
    if not items:
        raise ValueError("headline_bounds: no membership results")
    k = 2 * len(items)
    conf_k = bound_confidence(confidence, k)
    rows = []
    for label, scores, labels in items:
        b = membership_flag_bounds(scores, labels, delta=delta, confidence=conf_k, seed=seed)
        rows += [{"attack": label, "bound": kind, "epsilon_lower_bound": float(b[kind])} for kind in HEADLINE_KINDS]
    best = max(rows, key=lambda r: r["epsilon_lower_bound"])
    positive = best["epsilon_lower_bound"] > 0
    return {"epsilon_lower_bound": best["epsilon_lower_bound"] if positive else 0.0,
            "attack": best["attack"] if positive else None, "bound": best["bound"] if positive else None,
            "confidence": float(confidence), "bound_confidence": conf_k, "family_size": k, "delta": float(delta),
            "bounds": rows}
