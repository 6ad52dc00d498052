"""The accountant interface: two typed bases, one per kind of analysis.

The registry ``ACCOUNTANTS`` is the dispatch: the DP-SGD choices and fallback chain come from the registered
:class:`DPSGDAccountant` classes, ``account ldp`` reports every :class:`LDPAccountant` under its ``label``
(docs/architecture.md §"Adding an accountant").
"""
from __future__ import annotations

from typing import ClassVar, Optional

from ...core.errors import BadInput
from ...core.registry import ACCOUNTANTS
from ...core.validation import positive_finite, real

DPSGD, LDP = "dpsgd", "ldp"


class Accountant:
    """What every accountant declares: ``name`` (the registry key), ``description`` (one line) and ``kind``."""

    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    kind: ClassVar[str] = ""
    #: the short label results and bases print (DP-SGD: "PRV"; LDP: the key in ``account ldp``'s epsilon object)
    label: ClassVar[str] = ""
    #: other names that select it where a label is asked for (``pfdm_epsilon(method=...)``: ``agm``, ``thm51``)
    aliases: ClassVar[tuple[str, ...]] = ()


class DPSGDAccountant(Accountant):
    """ε of DP-SGD: a Poisson-subsampled Gaussian (rate q, noise multiplier σ) composed over ``steps``, at δ,
    add/remove-one record. ``epsilon`` must return an upper bound on ε (or raise / return a non-finite number,
    which sends the caller to the next accountant of the fallback chain)."""

    kind = DPSGD
    #: the order of the fallback chain (lower first); None = used only when asked for by name
    fallback_rank: ClassVar[Optional[int]] = None
    #: True when ``epsilon`` takes ``orders=`` (the RDP order grid of ``account dpsgd``'s rdp_orders)
    takes_rdp_orders: ClassVar[bool] = False

    @staticmethod
    def epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float) -> float:
        raise NotImplementedError

    @classmethod
    def skip_reason(cls, noise_multiplier: float, sample_rate: float, steps: int, delta: float,
                    rdp_orders=None) -> Optional[str]:
        """Why this accountant is not run in this regime (it is known to fail there), or None."""
        del noise_multiplier, sample_rate, steps, delta, rdp_orders  # the hook's arguments: by default it runs
        return None


class LDPAccountant(Accountant):
    """ε of one Gaussian upload x̃ = √ᾱ·CLIP(x, C) + √(1−ᾱ)·z (noise σ = √((1−ᾱ)/ᾱ) relative to the signal),
    replace-one, Δ = 2C, at δ (docs/accountants.md §1)."""

    kind = LDP
    #: position in ``account ldp``'s epsilon object (lower first)
    rank: ClassVar[int] = 100

    @staticmethod
    def epsilon(clip: float, sigma: float, delta: float) -> float:
        raise NotImplementedError


ACCOUNTANTS.require_base(Accountant)


def dpsgd_accountants() -> list[type[DPSGDAccountant]]:
    """Every registered DP-SGD accountant, in registry order."""
    return [e.factory for e in ACCOUNTANTS if issubclass(e.factory, DPSGDAccountant)]


def ldp_accountants() -> list[type[LDPAccountant]]:
    """Every registered LDP accountant, by ``rank`` then name."""
    return sorted((e.factory for e in ACCOUNTANTS if issubclass(e.factory, LDPAccountant)),
                  key=lambda a: (a.rank, a.name))


def ldp_accountant(name: str) -> Optional[type[LDPAccountant]]:
    """The registered LDP accountant whose label, registry name or one of whose ``aliases`` is ``name``, or None."""
    return next((a for a in ldp_accountants() if name in (a.label, a.name, *a.aliases)), None)


def check_clip(clip) -> float:
    """An L2 clipping norm C: a finite number > 0 (BadInput otherwise)."""
    return positive_finite(clip, "clip", " (the L2 clipping norm C)")


def check_sigma(sigma) -> float:
    """A noise σ relative to the signal: > 0; +inf is allowed (no signal left: ε = 0)."""
    s = real(sigma, "sigma")
    if not s > 0:
        raise BadInput(f"sigma={sigma!r}: must be > 0")
    return s
