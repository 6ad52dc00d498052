"""extract: the training-set count (headline), the clique count and its refusal where it cannot fire;
memorization/extract sampling settings."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from attack_fakes import SCHEDULE, CallLog, fake_target, gaussian_eps, memorizing_eps

from privbench.attacks.base import AttackEnv
from privbench.attacks.extract import Extract, auto_clique, expected_clique_records, greedy_cliques, tiled_l2
from privbench.attacks.memorization import NNRatioMemorization
from privbench.core.errors import BadInput
from privbench.models.target import Calls, Target


def _data(n, seed=0):
    g = torch.Generator().manual_seed(seed)
    return torch.rand((n, 1, 8, 8), generator=g) * 2 - 1


def test_tiled_l2_is_the_max_over_tiles_of_the_rms_difference():
    a = torch.zeros((1, 1, 8, 8)) - 1          # 0 on the [0,1] scale
    b = a.clone()
    b[0, 0, :4, :4] = 1                        # one 4x4 tile fully different (1.0 on [0,1])
    assert float(tiled_l2(a, b, 4)[0, 0]) == pytest.approx(1.0)
    assert float(tiled_l2(a, b, 8)[0, 0]) == pytest.approx(0.5)   # one tile of 64 pixels, 16 differ: sqrt(16/64)


def test_greedy_cliques_are_disjoint_cliques_of_at_least_the_minimum_size():
    d = np.full((7, 7), 9.0)
    for grp in ([0, 1, 2, 3], [4, 5]):
        for i in grp:
            for j in grp:
                d[i, j] = 0.0
    d[3, 6] = d[6, 3] = 0.0                    # 6 touches one member only: not in the clique
    assert [sorted(c) for c in greedy_cliques(d, 0.5, 3)] == [[0, 1, 2, 3]]


def _env(train):
    return AttackEnv(train_data=(train, torch.zeros(len(train), dtype=torch.long)), seed=0,
                     train_index=list(range(len(train))))


def test_memorised_duplicates_are_counted_at_default_sizes_and_a_gaussian_model_extracts_nothing():
    """A model that memorised 8 records (each duplicated 32x: the empirical optimum) regenerates all 8 at the
    default sizes (500 samples, the automatic clique of 10): the training-set count finds them, and so do the
    cliques; a model that learned only a Gaussian fit of 256 records: none."""
    ac = SCHEDULE.alphas_cumprod()
    few = _data(8)
    ex = Extract(sampler="ddim", steps=20)   # the default n_samples, extract_clique and extract_delta
    out = ex.run(fake_target(memorizing_eps(few, ac)), None, _env(few.repeat(32, 1, 1, 1)))
    assert out.metrics["n_generated"] == 500 and out.metrics["n_extracted"] == 8
    assert out.figures["n_training_records"] == 8 and out.figures["clique_min"] == 10
    assert out.metrics["n_extracted_clique"] >= 1 and out.metrics["filter_precision"] == 1.0
    assert set(out.figures["clique_extracted_records"]) <= set(out.figures["extracted_records"])
    for c in out.figures["candidates"]:
        assert c["distance"] < 0.1 and c["clique_size"] >= 10
    many = _data(256, seed=1)
    out2 = ex.run(fake_target(gaussian_eps(many, ac)), None, _env(many))
    assert out2.metrics["n_extracted"] == 0 and out2.metrics["n_candidates"] == 0
    assert out2.metrics["filter_precision"] is None and out2.figures["clique_min"] == 2


def _copying_target(train):
    """A perfect memoriser without a network: every sample is a training record, drawn uniformly (seeded)."""
    def sample(n, y, *, seed, **_):
        g = torch.Generator().manual_seed(seed)
        return train[torch.randint(0, len(train), (n,), generator=g)], y
    return Target("copies", "test", None, SCHEDULE, "cpu", None, calls=Calls(sampler=sample), meta={"shape": (1, 8, 8)})


def test_a_perfect_memoriser_of_256_records_is_counted_where_a_clique_of_10_cannot_fire():
    """500 samples of 256 records are 1.95 per record: the training-set count finds every record drawn, the
    automatic clique (2) fires too, and the paper's clique of 10 — 0.0092 records in expectation — is refused in one
    line naming the sizes and the n_samples that would do."""
    train = _data(256, seed=2)
    drawn = torch.randint(0, 256, (500,), generator=torch.Generator().manual_seed(0)).unique()
    out = Extract().run(_copying_target(train), None, _env(train))
    assert out.metrics["n_extracted"] == len(drawn) > 200 and out.figures["extracted_records"] == drawn.tolist()
    assert out.figures["clique_min"] == 2 and out.metrics["n_extracted_clique"] > 100
    assert out.figures["expected_clique_records"] == pytest.approx(148.9, abs=0.1)
    with pytest.raises(BadInput, match=r"attack.extract_clique=10 cannot fire at these sizes: attack.n_samples=500 "
                                       r"over 256 distinct training records is 1.95 samples per record.* 0.0092 "
                                       r"records in expectation; raise attack.n_samples to at least 921") as e:
        Extract(extract_clique=10).run(_copying_target(train), None, _env(train))
    assert "\n" not in str(e.value)
    with pytest.raises(BadInput, match=r"extract_clique=2 \(auto\).*n_samples=16 .*at least 24$"):
        Extract(n_samples=16).run(_copying_target(train), None, _env(train))


def test_clique_size_and_expected_counts():
    assert expected_clique_records(500, 256, 10) == pytest.approx(0.0092, abs=1e-4)
    assert expected_clique_records(500, 128, 10) == pytest.approx(0.86, abs=0.01)
    assert [auto_clique(500, n) for n in (8, 25, 50, 125, 256, 10_000)] == [10, 10, 5, 2, 2, 2]
    with pytest.raises(BadInput, match="at least 2 generations"):
        Extract(extract_clique=1).validate(1000)


def test_sampler_and_steps_set_the_cost_of_memorization():
    ac = SCHEDULE.alphas_cumprod()
    train = _data(8)
    log = CallLog()
    mem = NNRatioMemorization(n_samples=4, sampler="ddim", steps=7)
    out = mem.run(fake_target(memorizing_eps(train, ac), log=log), None,
                  AttackEnv(train_data=(train, torch.zeros(8, dtype=torch.long)), seed=0))
    assert len(log.calls) == 7 and out.figures["sampling"]["network_calls_per_sample"] == 7
    assert "sampler" not in NNRatioMemorization().hash_dict()["settings"]   # existing results keep their hash
    with pytest.raises(BadInput, match="needs attack.sampler=ddim"):
        NNRatioMemorization(steps=5).validate(1000)


def test_embedding_file_that_is_not_torchscript_is_refused_in_one_line(tmp_path):
    bad = tmp_path / "e.pt"
    bad.write_bytes(b"not a model")
    with pytest.raises(BadInput, match="not a TorchScript module"):
        Extract(extract_embedding=str(bad)).validate(1000)
    emb = torch.jit.script(torch.nn.Flatten())
    good = tmp_path / "flat.pt"
    emb.save(str(good))
    ex = Extract(extract_embedding=str(good))
    ex.validate(1000)
    a = _data(3)
    d = ex.distance(a, a, torch.jit.load(str(good)))
    assert torch.allclose(torch.diagonal(d), torch.zeros(3), atol=1e-5)
    assert ex.hash_dict()["embedding_sha256"]
