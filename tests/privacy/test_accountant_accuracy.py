"""The DP-SGD accountants' accuracy claims, checked against dp_accounting references.

* RDP: the order grid must reach the orders that are optimal at small ε (opacus' grid, which stops at 63, is far
  looser at ``SMALL_EPS``: docs/benchmarks.md).
* PLD: the pessimistic ε exceeds the exact one by an amount that grows with the discretization interval; the
  interval is refined until the excess is within the stated tolerance — checked here against a fine interval.
"""
import warnings

import pytest

from privbench.core.errors import BadInput
from privbench.privacy import dpsgd
from privbench.privacy.accountants import pld as pld_acc
from privbench.privacy.accountants import rdp as rdp_acc

SMALL_EPS = (9.365, 0.00131, 3761, 1e-5)


def _dp_accounting(sigma, q, steps, delta, *, pld_interval=None):
    from dp_accounting import dp_event
    from dp_accounting.pld import pld_privacy_accountant
    from dp_accounting.rdp import rdp_privacy_accountant

    acc = (rdp_privacy_accountant.RdpAccountant() if pld_interval is None
           else pld_privacy_accountant.PLDAccountant(value_discretization_interval=pld_interval))
    acc.compose(dp_event.SelfComposedDpEvent(dp_event.PoissonSampledDpEvent(q, dp_event.GaussianDpEvent(sigma)), steps))
    return acc.get_epsilon(delta)


def test_rdp_orders_reach_small_epsilon():
    ours = rdp_acc.rdp_epsilon(*SMALL_EPS)
    reference_rdp = _dp_accounting(*SMALL_EPS)                      # dp_accounting's default orders (to 1024)
    reference_pld = _dp_accounting(*SMALL_EPS, pld_interval=2e-5)   # ≈ exact
    assert reference_pld <= ours <= reference_rdp + 1e-9
    assert ours <= 1.2 * reference_pld
    assert dpsgd.dpsgd_epsilon(*SMALL_EPS, accountant="rdp")["epsilon"] == pytest.approx(ours)
    # large ε: the extended grid changes nothing (the optimum is a low order)
    assert rdp_acc.rdp_epsilon(1.0, 0.01, 10_000, 1e-5) == pytest.approx(6.7127, abs=1e-3)


def test_rdp_opacus_grid_is_reachable():
    from opacus.accountants import RDPAccountant

    acc = RDPAccountant()
    acc.history = [SMALL_EPS[:3]]
    with warnings.catch_warnings():
        warnings.simplefilter("ignore")
        theirs = acc.get_epsilon(delta=SMALL_EPS[3])
        assert rdp_acc.rdp_epsilon(*SMALL_EPS, orders="opacus") == pytest.approx(theirs, rel=1e-12)
    assert rdp_acc.RDP_ORDERS_OPACUS == tuple(RDPAccountant.DEFAULT_ALPHAS)
    assert set(rdp_acc.RDP_ORDERS) > set(rdp_acc.RDP_ORDERS_OPACUS) and max(rdp_acc.RDP_ORDERS) == 1024
    with pytest.raises(BadInput):
        rdp_acc.rdp_epsilon(*SMALL_EPS, orders="nosuch")
    with pytest.raises(BadInput):
        rdp_acc.rdp_epsilon(*SMALL_EPS, orders=[0.5, 2])


@pytest.mark.parametrize("sigma, q, steps, delta, fine", [
    (10.0, 1e-3, 1000, 1e-5, 1e-5),        # a fixed interval of 1e-3 overstates this ε several-fold
    (9.365, 0.00131, 3761, 1e-5, 1e-5),
    (1.0, 0.01, 10_000, 1e-5, 5e-5),
    (2.0, 4096 / 60000, 2197, 1e-5, 1e-4),
])
def test_pld_interval_meets_its_stated_accuracy(sigma, q, steps, delta, fine):
    reference = _dp_accounting(sigma, q, steps, delta, pld_interval=fine)
    ours = pld_acc.pld_epsilon(sigma, q, steps, delta)
    assert ours <= reference + max(1e-3, 1e-3 * reference)              # the stated accuracy
    d = pld_acc.pld_epsilon_details(sigma, q, steps, delta)
    assert d["eps_error"] == pytest.approx(max(pld_acc.PLD_EPS_ERROR, pld_acc.PLD_EPS_ERROR_REL * d["epsilon"]))
    assert d["estimated_excess"] <= d["eps_error"]
    # pessimistic (never below the reference beyond its own tiny excess) and within the stated tolerance
    assert reference - 1e-4 * max(reference, 1.0) <= d["epsilon"] <= reference + d["eps_error"]
    assert ours == d["epsilon"]


def test_pld_explicit_tolerance_refines_further():
    loose = pld_acc.pld_epsilon_details(10.0, 1e-3, 1000, 1e-5, eps_error=0.01)
    tight = pld_acc.pld_epsilon_details(10.0, 1e-3, 1000, 1e-5, eps_error=2e-4)
    assert tight["interval"] < loose["interval"] and tight["epsilon"] < loose["epsilon"]
    assert tight["estimated_excess"] <= 2e-4
