"""One notion of a privacy claim: what a result's ``privacy`` object says about the released model, with its kind.

A result carries at most one ε claim: ``formal``, ``conditional``, ``claimed_by_paper`` or ``claimed_by_user``
(docs/accountants.md §3.4, "Claims"). Only a formal ε is a guarantee; a conditional ε is shown, never compared.
"""
from __future__ import annotations

import math
from dataclasses import dataclass
from typing import Any

from ..core.errors import BadInput
from ..core.schema import Schema, extra_keys, given_order, optional

FORMAL = "formal"
CONDITIONAL = "conditional"
CLAIMED_BY_PAPER = "claimed_by_paper"
CLAIMED_BY_USER = "claimed_by_user"
KINDS = (FORMAL, CONDITIONAL, CLAIMED_BY_PAPER, CLAIMED_BY_USER)

#: how each kind is named wherever a claim is shown (tables, audit lines, gate breaches)
KIND_LABEL = {
    FORMAL: "formal ε",
    CONDITIONAL: "conditional ε (no guarantee)",
    CLAIMED_BY_PAPER: "ε claimed by the paper (no guarantee)",
    CLAIMED_BY_USER: "ε claimed by the user (not verified by privbench)",
}
#: the kinds an empirical lower bound is compared with (a conditional ε is about a model that was not released)
COMPARED = (FORMAL, CLAIMED_BY_PAPER, CLAIMED_BY_USER)


@dataclass
class PrivacyClaim(Schema):
    """A result's ``privacy`` object (docs/cli.md §5, "``privacy`` objects"; its claim: :func:`claim_of`)."""
    epsilon: float | None = None                 # the formal ε only; null for a conditional or claimed one
    delta: float | None = None
    basis: str | None = None                     # ends with the noise source
    accountant: str | None = optional()
    neighbouring_relation: str | None = optional()
    noise_source: str | None = optional()
    noise_label: str | None = optional()         # seeded noise: not a deployable release
    epsilon_paper_bound: float | None = optional()  # pfdm: the paper's Theorem 5.1 bound
    noise_multiplier: float | None = optional()  # DP-SGD (dpdm, dpsad, dp-txt2img)
    sample_rate: float | None = optional()
    steps: int | None = optional()
    max_grad_norm: float | None = optional()
    epsilon_budget: float | None = optional()
    noise_calibrated: bool | None = optional()
    fallback: Any = optional()                   # only when an accountant fell back
    trained: dict | None = optional()            # what DP-SGD trained (stored with the accounting)
    init: dict | None = optional()               # what the training started from
    conditional_epsilon: float | None = optional()  # dpsad teacher_data=members: holds only under its assumptions
    conditional_on: list | None = optional()
    conditional_basis: str | None = optional()
    end_to_end: bool | None = optional()
    teacher_data: str | None = optional()
    n_public: int | None = optional()
    public_split: dict | None = optional()       # public-only: the public records it was trained on
    claimed_epsilon: float | None = optional()   # claimed by the paper or the user, not a guarantee
    claim_kind: str | None = optional()
    claimed_by_paper: bool | None = optional()
    claim_basis: str | None = optional()
    #: a registered method's own keys that the schema does not declare (Method.privacy is a plugin interface)
    details: dict = extra_keys()
    key_order: tuple = given_order()



def as_number(v) -> float | None:
    """A float, or None for a missing, boolean or non-numeric value."""
    if v is None or isinstance(v, bool):
        return None
    try:
        return float(v)
    except (TypeError, ValueError):
        return None


def claim_of(privacy: PrivacyClaim | None) -> dict[str, Any] | None:
    """The claim a result's ``privacy`` object makes: ``{kind, epsilon, delta, basis}`` or None (no ε at all); one
    marked ``claimed_by_paper: true`` is never formal, even with its number in ``epsilon``."""
    if privacy is None:
        return None
    p = privacy
    delta = as_number(p.delta)
    basis = str(p.basis or "not stated by the result")
    claimed = as_number(p.claimed_epsilon)
    if claimed is not None:
        kind = p.claim_kind or (CLAIMED_BY_PAPER if p.claimed_by_paper else CLAIMED_BY_USER)
        return {"kind": kind if kind in KINDS else CLAIMED_BY_USER, "epsilon": claimed, "delta": delta,
                "basis": str(p.claim_basis or basis)}
    eps = as_number(p.epsilon)
    if eps is not None:
        return {"kind": CLAIMED_BY_PAPER if p.claimed_by_paper else FORMAL, "epsilon": eps, "delta": delta,
                "basis": basis}
    cond = as_number(p.conditional_epsilon)
    if cond is not None:
        return {"kind": CONDITIONAL, "epsilon": cond, "delta": delta, "basis": str(p.conditional_basis or basis)}
    return None


def formal_epsilon(privacy: PrivacyClaim | None) -> float | None:
    """The formal ε of a result (a guarantee), else None — whatever other number the result carries."""
    c = claim_of(privacy)
    return c["epsilon"] if c and c["kind"] == FORMAL else None


def compared_claim(privacy: PrivacyClaim | None) -> dict[str, Any] | None:
    """The claim an empirical lower bound is compared with (formal or claimed), else None."""
    c = claim_of(privacy)
    return c if c and c["kind"] in COMPARED else None


def no_formal_reason(privacy: PrivacyClaim | None, outside: bool) -> str:
    """Why a result has no formal ε, in a few words; ``outside``: a model privbench did not train."""
    c = claim_of(privacy)
    if c is not None and c["kind"] != FORMAL:
        return f"no formal guarantee: ε {c['epsilon']:.4g} is the {KIND_LABEL[c['kind']]}"
    if outside:
        return "no formal guarantee: a model trained outside privbench"
    return "no formal guarantee"


def user_claim(epsilon, delta, basis) -> dict[str, Any] | None:
    """The ``privacy`` object of an outside model whose training claims (ε, δ) on ``basis`` (None: no claim);
    BadInput unless all three are given, ε > 0 finite, δ in (0, 1) and the basis non-empty."""
    given = [v is not None for v in (epsilon, delta, basis)]
    if not any(given):
        return None
    if not all(given):
        raise BadInput("--claimed-epsilon, --claimed-delta and --claim-basis go together: give all three "
                       "(the ε your training claims, its δ, and what it covers)")
    e, d = as_number(epsilon), as_number(delta)
    if e is None or not math.isfinite(e) or e <= 0:
        raise BadInput(f"--claimed-epsilon={epsilon!r}: must be a finite number > 0")
    if d is None or not 0 < d < 1:
        raise BadInput(f"--claimed-delta={delta!r}: must be in (0, 1)")
    text = str(basis).strip()
    if not text or len(text) > 500 or any(ord(ch) < 32 for ch in text):
        raise BadInput("--claim-basis: one line of text (at most 500 characters) saying what the ε covers, e.g. "
                       "'DP-SGD, add/remove-one, PRV accountant, 10 epochs'")
    return {"epsilon": None, "delta": d, "claimed_epsilon": e, "claim_kind": CLAIMED_BY_USER,
            "basis": f"claimed by the user, not verified by privbench: {text}", "claim_basis": text}
