"""The attack contract: settings are the constructor's keyword arguments (dataclass fields with their ranges),
the runner asks the attack for its population, and the docs' threat-model tables are generated from
``Attack.threat_model``."""
from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

from privbench.attacks.loss import LossAttack
from privbench.attacks.pia import PIA
from privbench.attacks.rmia import RMIA
from privbench.core.config import build_config
from privbench.core.errors import BadInput
from privbench.core.registry import ATTACKS

ROOT = Path(__file__).resolve().parents[2]


def _generator():
    spec = importlib.util.spec_from_file_location("docs_generate", ROOT / "docs" / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_settings_are_constructor_arguments_and_read_from_the_config():
    a = PIA(t=100, p=2.0)
    assert (a.t, a.p, a.batch_size) == (100, 2.0, 256) and a.settings["p"] == 2.0
    cfg = build_config("centralized", preset="test", overrides=[("attack.t", "150")])
    b = PIA.from_config(cfg.attack, p=3.0)
    assert (b.t, b.p, b.bootstrap) == (150, 3.0, 50)
    with pytest.raises(TypeError):
        PIA(not_a_setting=1)


@pytest.mark.parametrize("attack, what", [(LossAttack(n_draws=0), "attack.n_draws=0: must be >= 1"),
                                          (PIA(p=0.0), "attack.p=0.0: must be > 0"),
                                          (PIA(batch_size=0), "attack.batch_size=0: must be >= 1"),
                                          (RMIA(rmia_gamma=0.0), "attack.rmia_gamma=0.0: must be > 0"),
                                          (RMIA(n_reference=1), "rmia needs at least 2 reference models"),
                                          (PIA(precision="fp16"), "choose one of fp32, bf16")])
def test_validate_enforces_each_settings_declared_range(attack, what):
    with pytest.raises(BadInput, match=what):
        attack.validate(1000)


def test_the_population_an_attack_needs_is_its_own_answer():
    assert RMIA(rmia_population=17).population_size() == 17
    assert {e.name for e in ATTACKS if e.factory().population_size()} == {"rmia"}


@pytest.mark.parametrize("page, block", [("attacks.md", "attack-threat-models"),
                                         ("attacks-threat-models.md", "attack-sources")])
def test_the_threat_model_tables_are_generated_from_each_attacks_threat_model(page, block):
    gen = _generator()
    text = (ROOT / "docs" / page).read_text()
    assert f"<!-- generated: {block} -->" in text and gen.render_blocks(text) == text
    rows = gen.GENERATORS[block]().splitlines()[2:]
    assert [r.split("`")[1] for r in rows] == gen._names("attacks")
    for row, name in zip(rows, gen._names("attacks")):
        assert str(ATTACKS.get(name).factory.threat_model["queries_per_record"]) in row
    stale = f"<!-- generated: {block} -->\n| `loss` |\n<!-- end generated: {block} -->\n"
    assert "`qmia`" in gen.render_blocks(stale) and "`extract`" in gen.render_blocks(stale)
