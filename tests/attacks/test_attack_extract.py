"""extract: clique-filtered, verified extractions; memorization/extract sampling settings."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from attack_fakes import SCHEDULE, CallLog, fake_target, gaussian_eps, memorizing_eps

from privbench.attacks.base import AttackEnv
from privbench.attacks.extract import Extract, greedy_cliques, tiled_l2
from privbench.attacks.memorization import NNRatioMemorization
from privbench.core.errors import BadInput


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


def test_duplicated_records_are_extracted_and_a_gaussian_model_extracts_nothing():
    """A model that memorised 8 records (each duplicated 32x: the empirical optimum) regenerates them: verified
    extractions with filter precision 1; a model that learned only a Gaussian fit of 256 records: none."""
    ac = SCHEDULE.alphas_cumprod()
    few = _data(8)
    train = few.repeat(32, 1, 1, 1)
    env = AttackEnv(train_data=(train, torch.zeros(len(train), dtype=torch.long)), seed=0,
                    train_index=list(range(len(train))))
    ex = Extract(n_samples=48, sampler="ddim", steps=20, extract_clique=4, extract_delta=0.1)
    out = ex.run(fake_target(memorizing_eps(few, ac)), None, env)
    assert out.metrics["n_extracted"] >= 1 and out.metrics["filter_precision"] == 1.0
    for c in out.figures["candidates"]:
        assert c["distance"] < 0.1 and c["clique_size"] >= 4
    many = _data(256, seed=1)
    env2 = AttackEnv(train_data=(many, torch.zeros(256, dtype=torch.long)), seed=0, train_index=list(range(256)))
    out2 = ex.run(fake_target(gaussian_eps(many, ac)), None, env2)
    assert out2.metrics["n_extracted"] == 0 and out2.metrics["n_candidates"] == 0
    assert out2.metrics["filter_precision"] is None


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
