import pytest

from privbench.core.config import build_config, parse_set_args
from privbench.core.errors import BadInput


def test_stable_keys_exist():
    from privbench.core.config import all_keys

    keys = {k for k, *_ in all_keys()}
    for k in ["data.n_members", "data.n_nonmembers", "train.steps", "train.batch_size", "train.lr",
              "clients.n_clients", "pfdm.clip", "pfdm.t0", "dp.epsilon", "dp.delta", "attack.t", "attack.p"]:
        assert k in keys


@pytest.mark.parametrize("pair,msg", [
    ("train.steps=-5", ">= 1"), ("train.steps=abc", "integer"), ("train.stepz=3", "unknown key"),
    ("nosection.x=1", "unknown section"), ("train.lr=0", "> 0"), ("dp.delta=1", "< 1"),
    ("diffusion.beta_schedule=cosine", "choose one of"), ("train.steps", "key=value"),
])
def test_bad_overrides(pair, msg):
    with pytest.raises(BadInput, match=msg):
        build_config("centralized", overrides=parse_set_args([pair]))


def test_overrides_typed_and_hash():
    a = build_config("centralized", overrides=parse_set_args(["train.steps=7", "train.lr=1e-3",
                                                              "model.block_out_channels=[8,16]"]))
    assert a.train.steps == 7 and a.train.lr == 1e-3 and a.model.block_out_channels == [8, 16]
    b = build_config("centralized", overrides=[("train.steps", 7), ("train.lr", 1e-3),
                                               ("model.block_out_channels", [8, 16])])
    assert a.training_hash() == b.training_hash()
    assert build_config("centralized", seed=1).training_hash() != build_config("centralized").training_hash()
    # attack settings never change what is trained
    c = build_config("centralized", overrides=parse_set_args(["attack.t=100"]))
    assert c.training_hash() == build_config("centralized").training_hash()


def _h(method, *sets):
    return build_config(method, overrides=parse_set_args(list(sets))).training_hash()


@pytest.mark.parametrize("method,unused,used", [
    ("centralized", ["pfdm.t0=600", "dp.epsilon=3", "fed.rounds=3", "dpsad.teacher_steps=9"], ["train.steps=9"]),
    ("dpdm", ["pfdm.t0=600", "fed.rounds=3", "dpsad.teacher_steps=9"], ["dp.epsilon=3", "train.lr=1e-3"]),
    ("dpsad", ["pfdm.clip=5", "fed.local_steps=3"], ["dp.epsilon=3", "dpsad.adv_weight=0.5"]),
    ("pfdm", ["dp.epsilon=3", "fed.rounds=3", "dpsad.mode=paper", "pfdm.stage1_sampler=ddim"],
     ["pfdm.t0=600", "clients.n_clients=2", "dp.delta=1e-6"]),
    ("local", ["pfdm.t0=600", "pfdm.clip=5", "fed.rounds=3", "dp.epsilon=3"],
     ["clients.n_clients=2", "clients.imbalance=4", "fed.local_only_steps=9"]),
    ("feddm", ["pfdm.t0=600", "fed.local_only_steps=9", "dp.epsilon=3"],
     ["clients.majority_classes=3", "fed.rounds=3", "fed.prox_mu=0.1"]),
])
def test_hash_covers_exactly_what_a_method_reads(method, unused, used):
    # a run is re-keyed by the settings its method reads, and only by those
    base = _h(method)
    for s in unused:
        assert _h(method, s) == base, s
    for s in used:
        assert _h(method, s) != base, s


def test_yaml_config(tmp_path):
    p = tmp_path / "c.yaml"
    p.write_text("train:\n  steps: 11\npfdm:\n  t0: 675\n")
    cfg = build_config("centralized", config_file=str(p))
    assert cfg.train.steps == 11 and cfg.pfdm.t0 == 675
    p.write_text("train:\n  nope: 1\n")
    with pytest.raises(BadInput):
        build_config("centralized", config_file=str(p))
    with pytest.raises(BadInput, match="not found"):
        build_config("centralized", config_file=str(tmp_path / "missing.yaml"))


def test_unknown_names():
    with pytest.raises(BadInput, match="unknown method"):
        build_config("nope")
    with pytest.raises(BadInput, match="unknown dataset"):
        build_config("centralized", dataset="nope")


def test_paper_preset_builds_and_steps_on_cpu():
    """The paper preset is the standard DDPM CIFAR-10 victim; one training step at batch 2 runs on CPU."""
    import torch

    from privbench.models.unet import build_denoiser

    cfg = build_config("centralized", preset="paper")
    assert cfg.dataset == "cifar10" and cfg.data.resolution == 32
    assert cfg.model.block_out_channels == [128, 256, 256, 256] and cfg.model.attention_levels == [1]
    assert (cfg.train.batch_size, cfg.train.lr, cfg.train.ema_decay, cfg.model.dropout) == (128, 2e-4, 0.9999, 0.1)
    m = build_denoiser(cfg.model, 3, 32, 10)
    n = sum(p.numel() for p in m.parameters())
    assert 35.0e6 < n < 36.5e6  # pytorch-ddpm's CIFAR-10 UNet has 35.7M parameters
    opt = torch.optim.AdamW(m.parameters(), lr=cfg.train.lr)
    x = torch.randn(2, 3, 32, 32)
    loss = ((m(x, torch.tensor([10, 500]), torch.tensor([1, 2])) - x) ** 2).mean()
    loss.backward()
    opt.step()
    assert torch.isfinite(loss)


def test_named_dataset_is_never_replaced_by_the_preset(tmp_path):
    """A named dataset is never taken for "not given": --dataset digits --preset paper trains digits."""
    assert build_config("centralized", "digits", preset="paper").dataset == "digits"
    assert build_config("centralized", "colored-digits", preset="paper").dataset == "colored-digits"
    assert build_config("centralized", "digits", preset="small").dataset == "digits"
    assert build_config("centralized", preset="small").dataset == "colored-digits"   # none named: the preset's
    p = tmp_path / "c.yaml"
    p.write_text("dataset: mnist\n")
    assert build_config("centralized", config_file=str(p)).dataset == "mnist"        # the file names it: it wins
    with pytest.raises(BadInput, match="differs from --dataset digits"):
        build_config("centralized", "digits", config_file=str(p))
    with pytest.raises(BadInput, match="differs from --dataset digits"):
        build_config("centralized", "digits", overrides=[("dataset", "cifar10")])


def test_cli_dataset_digits_with_paper_preset_trains_digits(tmp_path):
    from click.testing import CliRunner

    from privbench.cli import main

    r = CliRunner().invoke(main, ["train", "--method", "centralized", "--dataset", "digits", "--preset", "paper",
                                  "--set", "dataset=cifar10", "--runs-dir", str(tmp_path)])
    assert r.exit_code == 2 and "differs from --dataset digits" in r.output


@pytest.mark.parametrize("seed", [2 ** 32, 2 ** 40, -1, True, 1.5])
def test_outside_model_runs_take_the_seed_rule_of_privbench_runs(seed):
    """Before: external_config accepted a seed above 2**32 - 1 that build_config refused."""
    from privbench.core.config import build_config
    from privbench.runs.external import external_config

    with pytest.raises(BadInput, match=r"expected an integer in \[0, 4294967295\]"):
        external_config(seed=seed)
    with pytest.raises(BadInput):
        build_config("centralized", seed=seed)


#: the run directories the committed reports name (reports/tiny/results.csv: tiny preset, digits, seed 0)
COMMITTED_RUN_HASHES = {"pfdm": "4fb572d04d16", "local": "7b09dc38e20a", "feddm": "89fd00fb68c0",
                        "centralized": "e6102f83fbfe"}


@pytest.mark.parametrize("method", sorted(COMMITTED_RUN_HASHES))
def test_the_committed_runs_keep_their_hash(method):
    cfg = build_config(method, "digits", "tiny", 0)
    assert cfg.training_hash() == COMMITTED_RUN_HASHES[method]
    if method in ("pfdm", "local", "feddm"):  # the client split is hashed inside the pfdm mapping
        assert cfg.training_dict()["pfdm"]["n_clients"] == 4 and "clients" not in cfg.training_dict()
        new = build_config(method, "digits", "tiny", 0, parse_set_args(["clients.n_clients=3"]))
        assert new.training_hash() != cfg.training_hash()
    # train.precision enters the hash off its default only
    fp32 = build_config(method, "digits", "tiny", 0, parse_set_args(["train.precision=fp32"]))
    bf16 = build_config(method, "digits", "tiny", 0, parse_set_args(["train.precision=bf16"]))
    assert fp32.training_hash() == cfg.training_hash() != bf16.training_hash()


def test_a_key_of_another_layout_is_refused_in_one_line():
    import privbench.core.config as C

    with pytest.raises(BadInput, match="unknown key; pfdm has"):
        build_config("pfdm", "digits", "tiny", 0, parse_set_args(["pfdm.n_clients=3"]))
    stored = build_config("pfdm", "digits", "tiny", 0).to_dict()
    stored["pfdm"]["n_clients"] = stored.pop("clients")["n_clients"]
    with pytest.raises(BadInput) as e:
        C.config_from_dict(stored)
    assert "unknown config key(s) pfdm.n_clients" in str(e.value) and "\n" not in str(e.value)
    with pytest.raises(BadInput, match="unknown config key"):
        C.config_from_dict({**build_config("pfdm").to_dict(), "a_section": {}})
