"""train.init=public (models/public_init.py): a pre-training on the public split only, cached and shared."""
from __future__ import annotations

import json

import pytest
import torch
from helpers import train_cfg

from privbench.core.errors import BadInput


def _ctx(tmp_path, name, **sets):
    from privbench.runs import train as api

    sets = {"data__public": "pool", "train__init": "public", "train__public_steps": 4, **sets}
    m = api.make_method(train_cfg("dpdm", "test", **sets), tmp_path / name, "cpu")
    m.ctx.run_dir.mkdir(parents=True)
    return m.ctx


def test_pretrained_weights_do_not_depend_on_the_members(tmp_path):
    from privbench.models.public_init import pretrain_dir, pretrained_denoiser

    a = _ctx(tmp_path, "a")
    b = _ctx(tmp_path / "other-root", "b")  # its own cache folder: trained again, from the same public records
    x, y = b.dataset
    x = x.clone()
    x[torch.tensor(b.split.members)] *= -1  # every member's pixels change, nothing else
    x[torch.tensor(b.split.nonmembers)] = 0
    b.__dict__["dataset"] = (x, y)
    wa, wb = pretrained_denoiser(a).state_dict(), pretrained_denoiser(b).state_dict()
    assert pretrain_dir(a).name == pretrain_dir(b).name
    assert all(torch.equal(wa[k], wb[k]) for k in wa)
    record = json.loads((pretrain_dir(a) / "pretrain.json").read_text())
    assert record["n_public"] == 64 and record["steps"] == 4
    # under classes:A-B the public split is every record of the public classes: other member counts, other seeds
    # and other epsilons share one pre-training
    c1 = _ctx(tmp_path, "c1", data__public="classes:5-9", data__n_members=32)
    c2 = _ctx(tmp_path, "c2", data__public="classes:5-9", data__n_members=48, dp__epsilon=4.0)
    c3 = _ctx(tmp_path, "c3", data__public="classes:5-9", seed=0)
    assert pretrain_dir(c1) == pretrain_dir(c2) == pretrain_dir(c3)
    assert pretrain_dir(_ctx(tmp_path, "c4", data__public="classes:5-9", train__public_steps=5)) != pretrain_dir(c1)


def test_a_method_starts_from_the_pretraining_and_records_it(tmp_path):
    from privbench.models.public_init import pretrained_denoiser
    from privbench.runs import train as api

    cfg = train_cfg("dpdm", "test", data__public="pool", train__init="public", train__public_steps=4,
                    dp__trainable="lora", dp__lora_rank=2)
    m = api.train(cfg, tmp_path, "cpu")
    p = m.privacy("model")
    assert p["init"]["init"] == "public" and p["init"]["n_public"] == 64
    assert p["trained"]["trainable"] == "lora" and p["trained"]["n_trainable"] < p["trained"]["n_total"]
    assert "pre-training on public records" in p["basis"]
    start = m.ctx.initial_denoiser()
    pre = pretrained_denoiser(m.ctx).state_dict()
    assert all(torch.equal(v, pre[k]) for k, v in start.state_dict().items())
    target = m.load_target("model")  # the adapters' layout is rebuilt for loading
    assert any("lora_A" in n for n, _ in target.model.named_parameters())
    assert cfg.training_hash() != train_cfg("dpdm", "test", data__public="pool").training_hash()


def test_public_init_without_a_public_split_is_one_line(tmp_path):
    from privbench.runs import train as api

    with pytest.raises(BadInput, match="train.init=public: the run has no public split") as e:
        api.train(train_cfg("centralized", "test", train__init="public"), tmp_path, "cpu")
    assert "\n" not in str(e.value) and not any(tmp_path.iterdir())


def test_public_only_releases_the_pretraining_with_epsilon_zero(tmp_path):
    """``public-only`` (the reference a DP fine-tune must beat): its target is the cached pre-training itself,
    shared with every train.init=public run of the same public split; its formal ε is 0 by construction, the
    audit compares with it, and reference-model attacks are refused in one line."""
    from click.testing import CliRunner

    from privbench.cli import main
    from privbench.models.public_init import pretrained_denoiser
    from privbench.runs import train as api

    m = api.train(train_cfg("public-only", "test", data__public="pool", train__public_steps=4), tmp_path, "cpu")
    dp = _ctx(tmp_path, "dp")  # a dpdm run with train.init=public on the same seed and public split
    released = m.load_target("model").model.state_dict()
    pre = pretrained_denoiser(dp).state_dict()
    assert released.keys() == pre.keys() and all(torch.equal(released[k], pre[k]) for k in pre)
    p = m.privacy("model")
    assert p["epsilon"] == 0.0 and p["delta"] == 0.0 and "no member is read" in p["basis"]
    assert p["public_split"]["n_public"] == 64
    # under data.public=none the method asks for its own public records (as pool): no flag needed
    assert api.make_method(train_cfg("public-only", "test"), tmp_path / "none", "cpu").ctx.split.public
    r = CliRunner().invoke(main, ["attack", "--method", "public-only", "--attack", "lira", "--preset", "test",
                                  "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2 and "--attack lira" in r.stderr and "\n" not in r.stderr.strip(), r.output


def test_the_privacy_utility_figure_draws_epsilon_zero_as_a_reference_line():
    import math

    from privbench.reports.privacy_utility import _axis_epsilon
    from privbench.reports.privacy_utility_figure import is_reference

    assert _axis_epsilon(None, 0.0) == 0.0 and is_reference(0.0)  # public-only: never read a member
    assert math.isinf(_axis_epsilon(None, None)) and is_reference(math.inf)  # a non-private baseline
    assert _axis_epsilon(4.0, 3.98) == 4.0 and not is_reference(4.0)  # a point of the ε axis
