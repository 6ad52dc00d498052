"""attack.statistic: what LiRA and RMIA calibrate (default loss; lira@sima, rmia@pia, ...), checked against closed
forms on analytic targets."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from attack_fakes import fake_target

from privbench.attacks.base import AttackEnv, Records
from privbench.attacks.lira import LiRA, lira_scores
from privbench.attacks.references import ReferenceModels
from privbench.attacks.rmia import RMIA, rmia_scores
from privbench.attacks.statistics import statistic_names
from privbench.core.errors import BadInput


def _records(n_mem=6, n_non=6, seed=0, first_index=100):
    g = torch.Generator().manual_seed(seed)
    x = torch.rand((n_mem + n_non, 1, 8, 8), generator=g) * 2 - 1
    labels = torch.cat([torch.ones(n_mem), torch.zeros(n_non)]).long()
    return Records(x, torch.zeros(n_mem + n_non, dtype=torch.long), labels,
                   torch.arange(first_index, first_index + n_mem + n_non))


def _scaled(c):
    return fake_target(lambda x_t, *_args: c * x_t)


def _sima_stat(rec: Records, c: float) -> np.ndarray:
    """SimA's distance Σ|ε_θ(x₀, t)|⁴ ÷ C·H·W for ε_θ(x, t) = c·x, record by record."""
    return np.array([float((c * rec.x[j]).abs().pow(4).mean()) for j in range(len(rec))])


def test_statistics_are_the_reference_free_label_free_membership_attacks():
    names = statistic_names()
    assert names[0] == "loss" and {"pia", "pian", "sima", "secmi"} <= set(names)
    assert not {"lira", "rmia", "gsa", "secmi-nn", "memorization", "reconstruction"} & set(names)


def test_lira_at_sima_is_lira_on_simas_distance():
    rec = _records()
    cs = [0.2, 0.5, 0.3, 0.6]
    inm = np.array([[1] * 6 + [0] * 6, [0] * 6 + [1] * 6, [1] * 3 + [0] * 6 + [1] * 3, [0] * 12], dtype=bool)
    env = AttackEnv(seed=1, references=ReferenceModels([_scaled(c) for c in cs], inm, mode="online"))
    lira = LiRA(statistic="sima", lira_variance="per_record", batch_size=5)
    out = lira.run(_scaled(0.25), rec, env)
    s = np.log(_sima_stat(rec, 0.25))[:, None]
    r = np.log(np.stack([_sima_stat(rec, c) for c in cs]))[..., None]
    want, _ = lira_scores(s, r, inm, online=True, variance="per_record")
    np.testing.assert_allclose(out.scores, want, rtol=1e-6)
    assert out.figures["statistic_name"] == "sima" and out.figures["queries_per_record"] == 1
    assert lira.label == "lira@sima" and LiRA(statistic="loss").label == "lira"


def test_rmia_at_sima_likelihood_is_exp_minus_the_distance():
    rec, pop = _records(5, 5), _records(4, 4, seed=1, first_index=500)
    cs = [0.2, 0.4]
    env = AttackEnv(seed=2, references=ReferenceModels([_scaled(c) for c in cs], np.zeros((2, 10), bool),
                                                       mode="offline", population=pop))
    out = RMIA(statistic="sima", rmia_a=0.3, batch_size=4).run(_scaled(0.3), rec, env)
    lik = lambda c, r: np.exp(-_sima_stat(r, c))  # noqa: E731
    want = rmia_scores(lik(0.3, rec), np.stack([lik(c, rec) for c in cs]), np.zeros((2, 10), bool),
                       lik(0.3, pop), np.stack([lik(c, pop) for c in cs]), online=False, a=0.3, gamma=1.0)
    np.testing.assert_allclose(out.scores, want)


def test_statistic_is_a_variant_label_and_enters_the_hash():
    assert LiRA.variant_overrides(["online", "loss"]) == {"reference_pool": "online", "statistic": "loss"}
    assert LiRA(reference_pool="online", statistic="pia").label == "lira@online@pia"
    assert RMIA(statistic="sima").label == "rmia@sima" and RMIA().label == "rmia"
    # the default (loss) stays out of the hash: results computed before the setting existed keep theirs
    assert "statistic" not in LiRA().hash_dict()["settings"]
    on = LiRA(statistic="sima").hash_dict()
    assert on["settings"]["statistic"] == "sima" and on["statistic_attack"]["attack"] == "sima"


@pytest.mark.parametrize("bad", ["gsa", "secmi-nn", "nope"])
def test_a_statistic_that_is_not_one_is_refused_in_one_line(bad):
    with pytest.raises(BadInput, match="not a per-record statistic"):
        LiRA(statistic=bad).validate(1000)
    with pytest.raises(BadInput, match="not a variant of rmia"):
        RMIA.variant_overrides([bad])


def test_two_variants_of_one_setting_are_named_as_such():
    with pytest.raises(BadInput, match="lira@online@offline: both set reference_pool"):
        LiRA.variant_overrides(["online", "offline"])
    assert LiRA.variant_overrides(["online", "official"]) == {"reference_pool": "online", "lira_convention": "official"}


def test_sima_mc_is_the_mean_norm_over_fixed_noised_queries():
    from attack_fakes import SCHEDULE

    from privbench.attacks.references import record_noise
    from privbench.attacks.sima import SimA

    rec = _records(3, 3)
    a = SCHEDULE.alphas_cumprod()[100]
    mc = SimA(sima_estimator="mc", sima_draws=3, batch_size=4)
    out = mc.run(_scaled(0.5), rec, AttackEnv(seed=7))
    want = []
    for j in range(len(rec)):
        d = [float((0.5 * (a.sqrt() * rec.x[j] + (1 - a).sqrt() * record_noise(rec.index[j:j + 1], (1, 8, 8), 7,
                                                                                100, k)[0])).abs().pow(4).sum())
             for k in range(3)]
        want.append(-np.mean(d))
    np.testing.assert_allclose(out.scores, want, rtol=1e-5)
    assert mc.label == "sima@mc" and SimA().label == "sima" and out.nfe_per_record == 3
    assert mc.threat()["queries_per_record"] == 3 and SimA().threat()["queries_per_record"] == 1
    assert "sima_estimator" not in SimA().hash_dict()["settings"]  # sima's existing results keep their hash
    clean = SimA(batch_size=4).run(_scaled(0.5), rec, AttackEnv(seed=7)).scores
    np.testing.assert_allclose(clean, [-float((0.5 * rec.x[j]).abs().pow(4).sum()) for j in range(6)], rtol=1e-5)


def _unet_target(seed: int):
    """A tiny UNet target, a new object on every call (as the runner loads the target and its references for an
    attack run alone)."""
    from attack_fakes import SCHEDULE

    from privbench.core.config import ModelConfig
    from privbench.models.target import Target
    from privbench.models.unet import build_denoiser

    torch.manual_seed(seed)
    net = build_denoiser(ModelConfig(block_out_channels=[8, 16], norm_num_groups=4), 1, 8, None)
    return Target("model", "test", net, SCHEDULE, "cpu", None, clip_sample=False)


def _copy(rec: Records) -> Records:
    return Records(rec.x.clone(), rec.y.clone(), rec.labels.clone(), rec.index.clone())


@pytest.mark.parametrize("statistic", ["loss", "sima"])
def test_attacks_sharing_a_statistic_compute_it_once_and_score_as_without_the_cache(monkeypatch, statistic):
    """lira, rmia and qmia in one process, each with its own copies of the target, the references and the records
    (as the runner hands them over), query each model once per record set; their scores are bit-identical to
    those computed with nothing cached."""
    from privbench.attacks import statistics
    from privbench.attacks.qmia import QMIA

    rec, pop, pool = _records(6, 6), _records(4, 4, seed=1, first_index=500), _records(5, 5, seed=2, first_index=700)
    pool = Records(pool.x, pool.y, torch.zeros(10, dtype=torch.long), pool.index)
    calls = []
    for fn in ("fixed_noise_losses", "attack_distance"):
        real = getattr(statistics, fn)
        monkeypatch.setattr(statistics, fn, lambda *a, _real=real, **kw: calls.append(1) or _real(*a, **kw))

    def run(attack):
        refs = ReferenceModels([_unet_target(s) for s in (1, 2)], np.zeros((2, 12), bool), mode="offline",
                               pool=_copy(pool), pool_in=np.zeros((2, 10), bool), population=_copy(pop))
        return attack.run(_unet_target(0), _copy(rec), AttackEnv(seed=3, references=refs)).scores

    attacks = [LiRA(statistic=statistic, batch_size=5), RMIA(statistic=statistic, rmia_a=0.3, batch_size=5),
               QMIA(statistic=statistic, batch_size=5)]
    statistics.clear_values()
    cached = [run(a) for a in attacks]
    # lira: 3 models on the records; rmia: the 3 on the population; qmia: the target on its public records
    assert len(calls) == 3 + 3 + 1
    uncached = []
    for a in attacks:
        statistics.clear_values()
        uncached.append(run(a))
    assert len(calls) == 7 + 3 + 6 + 2
    for c, u in zip(cached, uncached):
        assert c.tobytes() == u.tobytes()
    statistics.clear_values()
    run(attacks[0])
    n = len(calls)
    run(attacks[0])
    assert len(calls) == n  # all from the cache
    run(LiRA(statistic=statistic, batch_size=4))  # another batch size is another statistic
    assert len(calls) == n + 3
