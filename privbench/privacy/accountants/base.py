"""The accountant interface."""
from __future__ import annotations

from typing import ClassVar

DPSGD, LDP = "dpsgd", "ldp"


class Accountant:
    name: ClassVar[str] = "?"
    description: ClassVar[str] = ""
    kind: ClassVar[str] = DPSGD
    #: DP-SGD accountants: order of the fallback chain (lower first); None = never used as a fallback
    fallback_rank: ClassVar[int | None] = None
    #: the JSON/CLI label of an LDP analysis (``account ldp`` reports every LDP accountant under its label)
    label: ClassVar[str] = ""

    @staticmethod
    def epsilon(*args) -> float:
        """DP-SGD: ``(noise_multiplier, sample_rate, steps, delta)``; LDP: ``(clip, sigma, delta)``."""
        raise NotImplementedError
