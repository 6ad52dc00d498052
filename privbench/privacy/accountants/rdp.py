"""``rdp``: DP-SGD, opacus' RDP analysis with the improved RDP → DP conversion over privbench's order grid (fast;
looser than PLD, docs/accountants.md §2)."""
from __future__ import annotations

import math

from ...core.errors import BadInput
from ...core.extras import require
from ...core.registry import ACCOUNTANTS
from .base import DPSGDAccountant

# RDP orders. opacus' RDPAccountant.DEFAULT_ALPHAS (kept here so the grid does not change with opacus' version):
RDP_ORDERS_OPACUS = tuple([1 + x / 10.0 for x in range(1, 100)] + list(range(12, 64)))
# privbench's grid adds 11 and 64…1024 (ratio 2^¼), where a small ε's optimal order lies; opacus returns NaN
# for some settings above 1024.
RDP_ORDERS = tuple(sorted(set(RDP_ORDERS_OPACUS) | {11} | {int(round(64 * 2 ** (k / 4))) for k in range(17)}))
_RDP_GRIDS = {"privbench": RDP_ORDERS, "opacus": RDP_ORDERS_OPACUS}


def order_grid(orders) -> tuple:
    """The RDP orders: None or "privbench" = :data:`RDP_ORDERS`, "opacus" = opacus' grid, or a list of orders > 1."""
    if orders is None:
        return RDP_ORDERS
    if isinstance(orders, str):
        if orders not in _RDP_GRIDS:
            raise BadInput(f"rdp_orders={orders!r}: must be one of {', '.join(_RDP_GRIDS)} or a list of orders > 1")
        return _RDP_GRIDS[orders]
    try:
        out = tuple(float(a) for a in orders)
    except (TypeError, ValueError):
        raise BadInput(f"rdp_orders={orders!r}: must be one of {', '.join(_RDP_GRIDS)} or a list of orders > 1") \
            from None
    if not out or not all(a > 1 and math.isfinite(a) for a in out):
        raise BadInput(f"rdp_orders={orders!r}: every order must be a finite number > 1")
    return out


def rdp_epsilon(noise_multiplier: float, sample_rate: float, steps: int, delta: float, orders=None) -> float:
    """opacus' RDP analysis (improved RDP → DP conversion) over ``orders`` (:func:`order_grid`)."""
    require("opacus", "the RDP accountant")
    from opacus.accountants import RDPAccountant  # lazy: the [dp] extra (opacus) is optional: require() above names it

    acc = RDPAccountant()
    acc.history = [(float(noise_multiplier), float(sample_rate), int(steps))]
    return float(acc.get_epsilon(delta=float(delta), alphas=list(order_grid(orders))))


@ACCOUNTANTS.register_class
class RDPAccountant(DPSGDAccountant):
    name = "rdp"
    description = "DP-SGD, opacus RDP analysis, orders up to 1024, improved conversion (fast; looser than PLD)"
    label = "RDP"
    fallback_rank = 2
    takes_rdp_orders = True
    epsilon = staticmethod(rdp_epsilon)
