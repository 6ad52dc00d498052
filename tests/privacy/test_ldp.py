"""PFDM LDP accountant: known values (docs/accountants.md §1), the t0 convention, the analytic Gaussian."""
import json
import math

import numpy as np
import pytest
from scipy.stats import norm

from privbench.core.errors import BadInput
from privbench.privacy import (
    account_ldp,
    alpha_bar,
    delta_analytic_gaussian,
    epsilon_analytic_gaussian,
    epsilon_paper_bound,
    epsilon_rdp,
    epsilon_rdp_improved,
    ldp,
    ldp_sigma,
    min_t0,
    pfdm_epsilon,
    pfdm_privacy,
)

C, DELTA = 10.0, 1e-5


# ---------------------------------------------------------------- the t0 convention

def test_alpha_bar_is_one_indexed_product():
    betas = np.linspace(1e-4, 0.02, 1000)
    for t0 in (1, 2, 690, 1000):
        assert alpha_bar(t0) == pytest.approx(np.prod(1.0 - betas[:t0]), rel=1e-12)
    assert alpha_bar(1) == pytest.approx(1.0 - 1e-4, rel=1e-15)


def test_alpha_bar_uses_the_schedule_helper():
    from privbench.core.schedule import alphas_cumprod

    ac = alphas_cumprod(1000, 1e-4, 0.02, "linear")
    assert alpha_bar(690) == float(ac[689])
    assert ldp_sigma(690) == pytest.approx(math.sqrt((1 - float(ac[689])) / float(ac[689])), rel=1e-14)


def test_schedule_parameters_change_sigma():
    assert ldp_sigma(250, num_timesteps=500) != ldp_sigma(250)
    assert ldp_sigma(690, beta_end=0.03) > ldp_sigma(690)
    assert alpha_bar(10, num_timesteps=10, beta_start=0.1, beta_end=0.1) == pytest.approx(0.9 ** 10)


# ---------------------------------------------------------------- known values

def test_worked_example_t0_690():
    s = ldp_sigma(690)
    assert s == pytest.approx(11.1246, abs=1e-4)
    assert 2 * C / s == pytest.approx(1.7978, abs=1e-4)  # μ
    assert epsilon_paper_bound(C, s, DELTA) == pytest.approx(10.243, abs=1e-3)
    assert epsilon_rdp(C, s, DELTA) == pytest.approx(10.243, abs=1e-3)
    assert epsilon_rdp_improved(C, s, DELTA) == pytest.approx(9.424, abs=1e-3)
    assert epsilon_analytic_gaussian(C, s, DELTA) == pytest.approx(8.774, abs=1e-3)
    # δ actually achieved at ε = 10, and the tight ε at smaller δ (docs/accountants.md §1)
    assert delta_analytic_gaussian(C, s, 10.0) == pytest.approx(4.11e-7, rel=2e-3)
    assert epsilon_analytic_gaussian(C, s, 1e-6) == pytest.approx(9.675, abs=1e-3)
    assert epsilon_analytic_gaussian(C, s, 1e-7) == pytest.approx(10.495, abs=1e-3)
    assert epsilon_paper_bound(C, s, 1e-6) == pytest.approx(11.07, abs=6e-3)
    assert epsilon_paper_bound(C, s, 1e-7) == pytest.approx(11.82, abs=6e-3)


# docs/accountants.md §1: t0, ᾱ, σ, ε Thm 5.1, ε analytic Gaussian (4 decimals)
TABLE = [
    (670, 0.010548, 9.6851, 12.0412, 10.3998),
    (674, 0.009991, 9.9543, 11.6595, 10.0538),
    (675, 0.009856, 10.0230, 11.5658, 9.9690),
    (680, 0.009204, 10.3751, 11.1080, 9.5548),
    (685, 0.008592, 10.7421, 10.6673, 9.1566),
    (689, 0.008128, 11.0469, 10.3265, 8.8493),
    (690, 0.008016, 11.1246, 10.2429, 8.7739),
    (691, 0.007905, 11.2031, 10.1599, 8.6992),
    (692, 0.007795, 11.2822, 10.0776, 8.6251),
    (693, 0.007687, 11.3620, 9.9959, 8.5515),
    (700, 0.006966, 11.9395, 9.4411, 8.0527),
]


@pytest.mark.parametrize("t0, ab, sigma, eps_thm, eps_agm", TABLE)
def test_table_1_5b(t0, ab, sigma, eps_thm, eps_agm):
    assert alpha_bar(t0) == pytest.approx(ab, abs=6e-7)
    assert ldp_sigma(t0) == pytest.approx(sigma, abs=6e-5)
    assert pfdm_epsilon(C, t0, DELTA, "paper_bound") == pytest.approx(eps_thm, abs=6e-5)
    assert pfdm_epsilon(C, t0, DELTA, "thm51") == pytest.approx(eps_thm, abs=6e-5)
    assert pfdm_epsilon(C, t0, DELTA, "rdp") == pytest.approx(eps_thm, abs=6e-5)
    assert pfdm_epsilon(C, t0, DELTA) == pytest.approx(eps_agm, abs=6e-5)
    assert pfdm_epsilon(C, t0, DELTA, "agm") == pytest.approx(eps_agm, abs=6e-5)


def test_min_t0_for_epsilon_10():
    assert min_t0(C, 10.0, DELTA, "paper_bound") == 693
    assert min_t0(C, 10.0, DELTA, "analytic_gaussian") == 675
    assert min_t0(C, 10.0, DELTA, "rdp") == 693
    # the boundary really is the boundary
    assert pfdm_epsilon(C, 674, DELTA) > 10.0 >= pfdm_epsilon(C, 675, DELTA)
    assert pfdm_epsilon(C, 692, DELTA, "paper_bound") > 10.0 >= pfdm_epsilon(C, 693, DELTA, "paper_bound")


# docs/accountants.md §1: minimum t0 as Thm 5.1 / tight, δ = 1e-5; None = unreachable even at t0 = T
MIN_T0 = {
    1: {1: (672, 631), 2: (567, 528), 5: (408, 375), 8: (323, 295), 10: (284, 260)},
    5: {1: (877, 846), 2: (798, 769), 5: (683, 658), 8: (619, 597), 10: (588, 567)},
    10: {1: (952, 924), 2: (880, 854), 5: (777, 755), 8: (721, 701), 10: (693, 675)},
    20: {1: (None, 995), 2: (955, 931), 5: (860, 841), 8: (810, 793), 10: (786, 770)},
}


@pytest.mark.parametrize("clip", sorted(MIN_T0))
def test_min_t0_table_5(clip):
    for eps, (thm, agm) in MIN_T0[clip].items():
        assert min_t0(clip, eps, DELTA, "paper_bound") == thm, (clip, eps)
        assert min_t0(clip, eps, DELTA, "analytic_gaussian") == agm, (clip, eps)


def test_t0_equals_T_and_unreachable_targets():
    s = ldp_sigma(1000)
    assert epsilon_paper_bound(C, s, DELTA) == pytest.approx(0.618, abs=1e-3)
    assert epsilon_analytic_gaussian(C, s, DELTA) == pytest.approx(0.442, abs=1e-3)
    assert min_t0(C, 0.3, DELTA, "analytic_gaussian") is None
    assert min_t0(C, 0.5, DELTA, "paper_bound") is None
    assert min_t0(C, 0.5, DELTA, "analytic_gaussian") is not None
    assert min_t0(C, 1e7, DELTA) == 1  # already satisfied at the first timestep (ε(1) ≈ 2.0e6)


def test_epsilon_decreases_in_t0():
    eps = [pfdm_epsilon(C, t0, DELTA) for t0 in range(1, 1001, 37)]
    assert all(a > b for a, b in zip(eps, eps[1:]))


# ---------------------------------------------------------------- properties of the analyses

GRID = [(c, s, d) for c in (0.5, 1.0, 10.0, 20.0) for s in (0.05, 1.0, 11.1246, 158.0) for d in (1e-3, 1e-5, 1e-9)]


@pytest.mark.parametrize("clip, sigma, delta", GRID)
def test_analytic_gaussian_inverts_delta_and_is_tightest(clip, sigma, delta):
    eps = epsilon_analytic_gaussian(clip, sigma, delta)
    assert math.isfinite(eps) and eps >= 0
    if eps > 0:
        assert delta_analytic_gaussian(clip, sigma, eps) == pytest.approx(delta, rel=1e-9)
    paper = epsilon_paper_bound(clip, sigma, delta)
    assert eps <= epsilon_rdp_improved(clip, sigma, delta) + 1e-12
    assert epsilon_rdp_improved(clip, sigma, delta) <= paper + 1e-12
    assert eps <= paper
    assert epsilon_rdp(clip, sigma, delta) == pytest.approx(paper, rel=1e-12)


def test_delta_formula_matches_plain_scipy():
    """δ(ε) = Φ(Δ/2σ − εσ/Δ) − e^ε Φ(−Δ/2σ − εσ/Δ) straight from the definition, where that is stable."""
    s = ldp_sigma(690)
    dlt = 2 * C
    for eps in (0.5, 2.0, 5.0, 8.774, 12.0):
        direct = norm.cdf(dlt / (2 * s) - eps * s / dlt) - math.exp(eps) * norm.cdf(-dlt / (2 * s) - eps * s / dlt)
        assert delta_analytic_gaussian(C, s, eps) == pytest.approx(direct, rel=1e-8)


def test_analytic_gaussian_matches_dp_accounting_pld():
    """An independent implementation: dp_accounting's PLD of the Gaussian mechanism (pessimistic, so ≥)."""
    from dp_accounting.pld import privacy_loss_distribution as pld

    s = ldp_sigma(690)
    dist = pld.from_gaussian_mechanism(standard_deviation=s, sensitivity=2 * C, value_discretization_interval=5e-4)
    eps_pld = dist.get_epsilon_for_delta(DELTA)
    eps = epsilon_analytic_gaussian(C, s, DELTA)
    assert eps <= eps_pld + 1e-9
    assert eps_pld - eps < 5e-3


def test_rdp_is_the_minimum_over_orders():
    s = ldp_sigma(690)
    rho = (2 * C) ** 2 / (2 * s * s)
    alphas = 1.0 + np.logspace(-4, 4, 200001)
    brute = np.min(alphas * rho + math.log(1 / DELTA) / (alphas - 1))
    assert epsilon_rdp(C, s, DELTA) == pytest.approx(brute, rel=1e-8)
    improved = np.min(alphas * rho + np.log((alphas - 1) / alphas) - (math.log(DELTA) + np.log(alphas)) / (alphas - 1))
    assert epsilon_rdp_improved(C, s, DELTA) == pytest.approx(improved, rel=1e-7)


def test_large_epsilon_is_stable():
    s = ldp_sigma(1)  # ᾱ ≈ 1: almost no noise
    eps = epsilon_analytic_gaussian(C, s, DELTA)
    assert math.isfinite(eps) and eps > 1e5
    assert delta_analytic_gaussian(C, s, eps) == pytest.approx(DELTA, rel=1e-7)
    assert eps < epsilon_paper_bound(C, s, DELTA)


def test_zero_epsilon_when_delta_already_covers_it():
    assert epsilon_analytic_gaussian(1e-6, 10.0, 0.5) == 0.0
    assert epsilon_analytic_gaussian(C, math.inf, DELTA) == 0.0
    assert delta_analytic_gaussian(C, ldp_sigma(690), 0.0) == pytest.approx(2 * norm.cdf(2 * C / ldp_sigma(690) / 2) - 1)


@pytest.mark.parametrize("clip", [1e-320, 1e-200, 1e150, 1e160, 1e308])
def test_epsilon_at_the_ends_of_a_double(clip):
    """C² or (2C)² alone leaves a double's range where C/σ does not: every accountant still answers, +inf only
    where ε itself is past the range, and rdp equals the paper bound (the same closed form) at every scale."""
    s = ldp_sigma(1)
    eps = {a.label: a.epsilon(clip, s, DELTA) for a in ldp.ldp_accountants()}
    eps["rdp_improved"] = epsilon_rdp_improved(clip, s, DELTA)
    assert all(v >= 0.0 and not math.isnan(v) for v in eps.values()), eps
    assert eps["rdp"] == pytest.approx(eps["paper_bound"], rel=1e-12)
    r = clip / s
    if 2 * r * r == math.inf:
        assert all(v == math.inf for v in eps.values()), eps
    else:
        assert all(math.isfinite(v) for v in eps.values()), eps
        assert eps["paper_bound"] == pytest.approx(2 * r * r + r * math.sqrt(8 * math.log(1 / DELTA)), rel=1e-12)
    out = account_ldp(clip, 1, DELTA, epsilon=3.0)
    assert out["epsilon"] == {k: v for k, v in eps.items() if k != "rdp_improved"}
    assert out["min_t0"] == {k: (1 if clip < 1 else None) for k in ("paper_bound", "analytic_gaussian")}


# ---------------------------------------------------------------- reports

def test_account_ldp_contract():
    out = account_ldp(10, 690, 1e-5)
    assert {"clip", "t0", "delta", "sigma", "epsilon", "basis"} <= set(out)
    assert "min_t0" not in out
    assert set(out["epsilon"]) == {"paper_bound", "rdp", "analytic_gaussian"}
    assert out["epsilon_rdp_improved"] == pytest.approx(9.424, abs=1e-3)
    assert out["clip"] == 10 and out["t0"] == 690 and out["delta"] == 1e-5
    assert out["sigma"] == pytest.approx(11.1246, abs=1e-4)
    assert out["epsilon"]["paper_bound"] == pytest.approx(10.243, abs=1e-3)
    assert out["epsilon"]["rdp"] == pytest.approx(10.243, abs=1e-3)
    assert out["epsilon"]["analytic_gaussian"] == pytest.approx(8.774, abs=1e-3)
    for words in ("per record", "single upload", "replace-one", "2C", "labels", "local model"):
        assert words in out["basis"]
    json.dumps(out, allow_nan=False)

    out = account_ldp(10, 690, 1e-5, epsilon=10)
    assert out["min_t0"] == {"paper_bound": 693, "analytic_gaussian": 675}
    json.dumps(out, allow_nan=False)
    assert account_ldp(10, 690, 1e-5, epsilon=0.3)["min_t0"] == {"paper_bound": None, "analytic_gaussian": None}


def test_account_ldp_schedule_options():
    out = account_ldp(10, 345, 1e-5, steps=500)
    assert out["sigma"] == pytest.approx(ldp_sigma(345, num_timesteps=500))
    with pytest.raises(BadInput):
        account_ldp(10, 690, 1e-5, steps=500)  # t0 > T


def test_pfdm_privacy_block():
    from privbench.core.mechanisms import SEEDED_NOISE_LABEL

    p = pfdm_privacy(10, 690, 1e-5)
    assert set(p) == {"epsilon", "delta", "basis", "epsilon_paper_bound", "accountant", "noise_source", "noise_label"}
    assert p["epsilon"] == pytest.approx(8.774, abs=1e-3)
    assert p["epsilon_paper_bound"] == pytest.approx(10.243, abs=1e-3)
    assert p["delta"] == 1e-5 and p["accountant"] == "analytic_gaussian"
    base = ("analytic-gaussian LDP per record, per single upload (replace-one, Δ=2C); labels, class counts and the "
            "client's local model are not covered")
    # the default is the benchmark's seeded noise: the basis says so and the result carries the label
    assert p["basis"].startswith(base + "; noise source: seeded") and SEEDED_NOISE_LABEL in p["basis"]
    assert p["noise_source"] == "seeded" and p["noise_label"] == SEEDED_NOISE_LABEL
    s = pfdm_privacy(10, 690, 1e-5, noise_source="secure")
    assert s["basis"] == base + "; noise source: secure (OS entropy, never stored)"
    assert s["noise_source"] == "secure" and "noise_label" not in s and s["epsilon"] == p["epsilon"]


# ---------------------------------------------------------------- validation

@pytest.mark.parametrize("kwargs", [
    dict(clip=0), dict(clip=-1), dict(clip=float("nan")), dict(clip=float("inf")), dict(clip="10"),
    dict(t0=0), dict(t0=1001), dict(t0=690.5), dict(t0=True), dict(t0="690"),
    dict(delta=0), dict(delta=1), dict(delta=-1e-5), dict(delta=float("nan")),
    dict(epsilon=0), dict(epsilon=-1), dict(epsilon=float("inf")),
    dict(steps=0), dict(steps=10.5), dict(steps=10**9, t0=100), dict(beta_start=0), dict(beta_end=1.5), dict(beta_start=float("nan")),
])
def test_account_ldp_bad_input(kwargs):
    args = dict(clip=10, t0=690, delta=1e-5, epsilon=None) | kwargs
    with pytest.raises(BadInput) as e:
        account_ldp(**args)
    assert "\n" not in str(e.value)


def test_other_bad_input():
    with pytest.raises(BadInput):
        pfdm_epsilon(C, 690, DELTA, method="moments")
    with pytest.raises(BadInput):
        min_t0(C, 0, DELTA)
    with pytest.raises(BadInput):
        epsilon_analytic_gaussian(C, 0.0, DELTA)
    with pytest.raises(BadInput):
        ldp_sigma(690, beta_schedule="cosine-ish")
    assert pfdm_epsilon(C, np.int64(690), DELTA) == pfdm_epsilon(C, 690, DELTA)


def test_accountants_registered():
    from privbench.core.registry import ACCOUNTANTS

    assert {"ldp-analytic", "ldp-paper", "prv", "pld", "rdp"} <= set(ACCOUNTANTS.names())
    assert ACCOUNTANTS.get("ldp-analytic").factory.epsilon is ldp.epsilon_analytic_gaussian
    assert ACCOUNTANTS.get("ldp-paper").factory.epsilon(C, ldp_sigma(690), DELTA) == pytest.approx(10.243, abs=1e-3)
    for e in ACCOUNTANTS:
        assert e.description and "\n" not in e.description
