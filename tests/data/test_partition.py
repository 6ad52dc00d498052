"""The one partition of a run's records: members, non-members, public, reference pool, RMIA population."""
from __future__ import annotations

import json

import numpy as np
import pytest
from helpers import train_cfg

from privbench.core.errors import BadInput
from privbench.core.registry import ATTACKS, METHODS, load_builtins
from privbench.data.splits import member_split, partition

load_builtins()

PUBLIC_MODES = [{"data__public": "none"}, {"data__public": "pool"}, {"data__public": "classes:5-9"},
                {"data__public": "none", "dpsad__teacher_data": "public"},
                {"data__public": "pool", "dpsad__teacher_data": "public"},
                {"data__public": "pool", "data__n_test": 100}, {"data__public": "classes:5-9", "data__n_test": 100}]


def _public_of(method) -> set[int]:
    """Every record the method's public consumers read (DP-SAD's teacher under teacher_data=public)."""
    out = set(method.ctx.split.public)
    if getattr(method, "teacher_data", None) == "public":
        out |= set(method.public_indices())
    return out


@pytest.mark.parametrize("method_name", sorted(METHODS.names()))
def test_partition_is_disjoint_for_every_method_and_attack(method_name, tmp_path):
    from privbench.runs.attack import make_attack
    from privbench.runs.references import plan_pool
    from privbench.runs.train import make_method

    for j, sets in enumerate(PUBLIC_MODES):
        if "dpsad__teacher_data" in sets and method_name != "dpsad":
            continue
        cfg = train_cfg(method_name, "test", **sets)
        method = make_method(cfg, tmp_path / f"run-{j}", "cpu")
        method.ctx.run_dir.mkdir(parents=True)
        split = method.ctx.split
        members, nonmembers, public = set(split.members), set(split.nonmembers), _public_of(method)
        test = set(split.test)
        assert len(members) == cfg.data.n_members and len(nonmembers) == cfg.data.n_nonmembers
        assert len(test) == cfg.data.n_test and not test & (members | nonmembers | public)
        assert not members & nonmembers and not (members | nonmembers) & public, sets
        if sets["data__public"] != "none" or "dpsad__teacher_data" in sets:
            assert public, sets
        n_total = len(method.ctx.dataset[1])
        for attack_name in ATTACKS.names():
            if getattr(ATTACKS.get(attack_name).factory, "requires_text", False):
                continue  # needs captions (clid): refused on privbench's image methods, tested in tests/latent
            attack = make_attack(cfg, attack_name, strict=False)
            for target in method.target_names():
                if not attack.applies(target):
                    continue
                mem, non = method.attack_split(target)
                assert set(mem) <= members and set(non) <= nonmembers
            if not attack.needs_references:
                continue
            for mode in ("offline", "online"):
                pool, population = plan_pool(split, n_total, mode, cfg.seed, attack.population_size())
                assert not set(population) & (members | nonmembers | public | test | set(pool)), (attack_name, mode)
                if mode == "offline":
                    assert not set(pool) & (members | nonmembers | public | test), (attack_name, sets)
                else:
                    assert set(pool) == members | nonmembers


def test_none_is_the_allocation_of_before_and_keeps_the_run_hash():
    """``data.public=none`` (and ``pool``) draw the members and non-members of :func:`member_split`, and the
    default ``none`` stays out of the training hash."""
    labels = np.random.default_rng(0).integers(0, 10, 1797)
    for seed in (0, 3):
        old, new = member_split(1797, 256, 256, seed), partition(labels, 256, 256, seed, "none", 0)
        assert (new.members, new.nonmembers, new.public) == (old.members, old.nonmembers, [])
        pool = partition(labels, 256, 256, seed, "pool", 300)
        assert (pool.members, pool.nonmembers) == (old.members, old.nonmembers) and len(pool.public) == 300
    cfg = train_cfg("dpdm", "tiny")
    assert "public" not in cfg.training_dict()["data"] and "n_public" not in cfg.training_dict()["data"]
    assert train_cfg("dpdm", "tiny", data__public="pool").training_hash() != cfg.training_hash()
    assert train_cfg("dpdm", "tiny", data__public="none").training_hash() == cfg.training_hash()


def test_public_classes_hold_no_private_record_and_split_json_records_sizes(tmp_path):
    from privbench.runs.train import make_method

    cfg = train_cfg("centralized", "test", data__public="classes:5-9", data__n_public=100)
    m = make_method(cfg, tmp_path / "run", "cpu")
    m.ctx.run_dir.mkdir(parents=True)
    split, y = m.ctx.split, m.ctx.dataset[1].numpy()
    assert set(y[split.members]) | set(y[split.nonmembers]) <= {0, 1, 2, 3, 4}
    assert set(y[split.public]) <= {5, 6, 7, 8, 9} and len(split.public) == 100
    stored = json.loads((m.ctx.run_dir / "split.json").read_text())
    assert stored["sizes"] == {"members": 64, "nonmembers": 64, "public": 100, "test": 0}
    assert stored["sha256"] == split.content_hash() and stored["public_mode"] == "classes:5-9"
    all_public = partition(y, 64, 64, 0, "classes:5-9", 0)
    assert len(all_public.public) == int(np.isin(y, [5, 6, 7, 8, 9]).sum())  # 0 = every public-class record


@pytest.mark.parametrize("bad", ["classes:", "classes:x-9", "classes:0-9", "pools"])
def test_bad_public_setting_is_one_line(bad):
    with pytest.raises(BadInput, match="data.public") as e:
        cfg = train_cfg("centralized", "test", data__public=bad)
        partition(np.arange(1797) % 10, 64, 64, 0, cfg.data.public, 0)
    assert "\n" not in str(e.value)


def test_dpsad_public_teacher_is_outside_the_reference_pool_and_population(tmp_path):
    """DP-SAD's public teacher records are in neither the offline reference pool nor RMIA's population."""
    from privbench.runs.references import plan_pool
    from privbench.runs.train import make_method

    cfg = train_cfg("dpsad", "tiny", dpsad__teacher_data="public")
    m = make_method(cfg, tmp_path / "run", "cpu")
    m.ctx.run_dir.mkdir(parents=True)
    pool, population = plan_pool(m.ctx.split, len(m.ctx.dataset[1]), "offline", cfg.seed, 256)
    public = set(m.public_indices())
    assert len(public) == 256 and len(population) == 256
    assert not public & set(pool) and not public & set(population)
