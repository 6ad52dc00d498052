"""The PFDM upload-mechanism audit: a likelihood-ratio attack on x~ = sqrt(a)·CLIP(x, C) + sqrt(1-a)·z."""
from __future__ import annotations

import pytest

from privbench.privacy.audit_uploads import audit_upload_mechanism
from privbench.privacy.ldp import pfdm_epsilon


def test_small_t0_gives_a_large_bound():
    r = audit_upload_mechanism(10.0, 10, n_trials=5000)
    assert r["analytic_epsilon"] > 1000                      # almost no noise at t0 = 10
    assert r["epsilon_lower_bound"] > 6.0                    # the trials' ceiling (~6.6 for 2500 per half)
    assert r["epsilon_lower_bound"] == pytest.approx(r["ceiling"], rel=1e-6)
    assert r["gdp"]["epsilon"] > 20
    assert r["epsilon_lower_bound"] <= r["analytic_epsilon"] and not r["exceeds_analytic"]


def test_pfdm_defaults_stay_below_the_analytic_epsilon_and_gdp_is_close():
    r = audit_upload_mechanism(10.0, 690, n_trials=20000)
    analytic = pfdm_epsilon(10.0, 690, 1e-5)
    assert r["analytic_epsilon"] == pytest.approx(analytic) == pytest.approx(8.774, abs=1e-3)
    assert 0 < r["epsilon_lower_bound"] <= analytic
    assert r["gdp"]["epsilon"] <= analytic
    assert r["gdp"]["epsilon"] > 0.75 * analytic             # the analytic epsilon is nearly tight
    assert not r["exceeds_analytic"]


def test_a_broken_mechanism_is_caught(monkeypatch):
    """If the upload used far less noise than claimed, the audit exceeds the analytic epsilon."""
    import privbench.privacy.audit_uploads as audit_uploads

    real = audit_uploads.ldp_upload

    def leaky(x, clip, alpha_bar, noise):  # a tenth of the claimed noise
        return real(x, clip, alpha_bar, 0.1 * noise)

    monkeypatch.setattr(audit_uploads, "ldp_upload", leaky)
    r = audit_upload_mechanism(10.0, 690, n_trials=5000)
    assert r["exceeds_analytic"]


def test_images_pair_is_weaker_than_the_worst_case():
    """8×8 images in [-1, 1] have norm <= 8 < C = 10: no valid image pair reaches the analytic sensitivity 2C."""
    r = audit_upload_mechanism(10.0, 690, n_trials=5000, candidates="images")
    assert r["pair_distance"] == pytest.approx(16.0)
    assert r["analytic_epsilon_pair"] < r["analytic_epsilon"]
