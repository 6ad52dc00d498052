"""privbench.privacy.compare: the neighbouring relation of a formal ε and its replace-one counterpart."""
import math

import pytest

from privbench.privacy.compare import (
    ADD_REMOVE,
    REPLACE_ONE,
    bound_confidence,
    comparable_claim,
    exceeds,
    flag_delta,
)
from privbench.privacy.compare import formal_relation as _formal_relation
from privbench.runs.result_schema import PrivacyClaim


def formal_relation(privacy: dict | None):
    """The relation of a ``privacy`` object as a result holds it (typed)."""
    return _formal_relation(None if privacy is None else PrivacyClaim.from_json({"epsilon": 1.0, "delta": 1e-5,
                                                                                **privacy}))


def test_relation_read_from_the_real_bases():
    from privbench.privacy.dpsgd import dpsgd_basis
    from privbench.privacy.ldp import ACCOUNT_LDP_BASIS, LDP_BASIS, pfdm_privacy

    assert formal_relation(pfdm_privacy(10, 690, 1e-5)) == REPLACE_ONE
    assert formal_relation({"basis": LDP_BASIS}) == formal_relation({"basis": ACCOUNT_LDP_BASIS}) == REPLACE_ONE
    assert formal_relation({"basis": dpsgd_basis("pld", 1e-5)}) == ADD_REMOVE
    assert formal_relation({"basis": "a claim", "neighbouring_relation": "replace-one"}) == REPLACE_ONE
    assert formal_relation({"basis": "RDP accountant of a Poisson-subsampled Gaussian"}) is None
    assert formal_relation(None) is None


def test_group_privacy_conversion():
    c = comparable_claim(1.0, 1e-5, ADD_REMOVE)
    assert (c["factor"], c["comparable_epsilon"]) == (2.0, 2.0)
    assert c["comparable_delta"] == pytest.approx((1 + math.e) * 1e-5) and c["testable"]
    same = comparable_claim(1.0, 1e-5, REPLACE_ONE)
    assert (same["factor"], same["comparable_epsilon"], same["comparable_delta"]) == (1.0, 1.0, 1e-5)
    unknown = comparable_claim(1.0, 1e-5, None)
    assert unknown["comparable_epsilon"] == 2.0 and "unknown" in unknown["formal"]
    huge = comparable_claim(12.0, 1e-5, ADD_REMOVE)
    assert not huge["testable"] and not exceeds({"x": 1e9}, huge)
    # the reverse direction does not exist
    assert not comparable_claim(1.0, 1e-5, REPLACE_ONE, empirical=ADD_REMOVE)["testable"]


def test_family_level_and_delta():
    assert bound_confidence(0.95, 4) == pytest.approx(0.9875)
    assert bound_confidence(0.95, 1) == pytest.approx(0.95)
    c = comparable_claim(1.0, 1e-5, ADD_REMOVE)
    assert flag_delta(1e-5, c) == pytest.approx(c["comparable_delta"])   # the claim's δ when larger
    assert flag_delta(1e-2, c) == 1e-2                                     # the audit's δ when larger
    assert exceeds({"a": 2.01, "b": 0.0}, c) and not exceeds({"a": 2.0}, c)
