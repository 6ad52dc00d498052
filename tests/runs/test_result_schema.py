"""result.json's typed, versioned schema (privbench.runs.result_schema): docs/cli.md §5 names exactly the declared
keys, a real result round-trips unchanged, a writer cannot add an undeclared key, and a
file of another version (or none) is refused in one line."""
from __future__ import annotations

import json
import re
import subprocess
import sys
from dataclasses import fields
from pathlib import Path

import pytest
from helpers import train_cfg

from privbench.core.errors import BadInput
from privbench.core.version import STORE_VERSION
from privbench.privacy.claims import claim_of
from privbench.runs.result_schema import AttackResult, PrivacyClaim, Provenance, ThreatModel, Timing

ROOT = Path(__file__).resolve().parents[2]
BOOKKEEPING = {"details", "key_order"}


def _section5() -> str:
    text = (ROOT / "docs" / "cli.md").read_text()
    start = text.index("## 5. `result.json`")
    return text[start:text.index("\n## 6.", start)]


def _table_keys(rows: list[str], column: int) -> set[str]:
    keys: set[str] = set()
    for row in rows:
        cell = row.strip().strip("|").split(" | ")[column]
        keys |= set(re.findall(r"`([a-z_0-9]+)[`:]", cell))
    return keys


def _documented() -> dict[str, set[str]]:
    """§5's documented keys: "result" (its key table), "privacy" (the ``privacy`` objects table and paragraph) and
    each further "``name`` objects:" table (column 0)."""
    sec = _section5()
    top, *blocks = re.split(r"^`([a-z_]+)` objects", sec, flags=re.M)
    out = {"result": _table_keys([line for line in top.splitlines() if line.startswith("| `")], 0)}
    for name, body in zip(blocks[::2], blocks[1::2]):
        if name == "privacy":
            rows = [line for line in body.splitlines() if line.startswith("| ") and not line.startswith("| target")
                    and not line.startswith("|---")]
            prose = [line for line in body.splitlines() if not line.startswith("|")]
            out[name] = _table_keys(rows, 1) | set(re.findall(r"`([a-z_0-9]+):", " ".join(prose)))  # `noise_label: "…"`
        else:
            out[name] = _table_keys([line for line in body.splitlines() if line.startswith("| `")], 0)
    return out


def _declared(cls) -> set[str]:
    return {f.name for f in fields(cls)} - BOOKKEEPING


@pytest.mark.parametrize("name, cls", [("result", AttackResult), ("privacy", PrivacyClaim),
                                       ("threat_model", ThreatModel), ("provenance", Provenance)])
def test_docs_name_exactly_the_declared_keys(name, cls):
    documented = _documented()[name]
    assert documented == _declared(cls), (f"{name}: in docs only: {sorted(documented - _declared(cls))}; "
                                          f"declared only: {sorted(_declared(cls) - documented)}")


def test_docs_name_the_timing_keys():
    timing = set(re.findall(r"`timing` \| `\{([^}]*)\}", _section5())[0].replace(",", " ").split())
    assert _declared(Timing) <= timing


@pytest.fixture(scope="module")
def real_result(tmp_path_factory):
    """A loss attack on the test preset's centralized target: (attack folder's result.json, the run's copy)."""
    from privbench.runs.attack import run_attack

    runs = tmp_path_factory.mktemp("schema_runs")
    res = run_attack(train_cfg("centralized", "test"), "loss", None, runs_dir=runs, device="cpu")
    f = Path(res.scores_path).parent / "result.json"
    return f, Path(res.run_dir) / "result.json"


def test_a_real_result_round_trips_unchanged(real_result):
    for f in real_result:
        text = f.read_text()
        d = json.loads(text)
        assert d["schema_version"] == STORE_VERSION
        res = AttackResult.from_json(d)
        again = res.to_json()
        assert again == d and list(again) == list(d)  # values and the key order the file has
        assert json.dumps(again, indent=2) + "\n" == text
        assert isinstance(res.timing, Timing) and res.timing.attack_s is not None
        assert isinstance(res.threat_model, ThreatModel) and res.threat_model.reference_models == 0
    top = json.loads(real_result[1].read_text())
    assert top["copy_of"] == str(real_result[0]) and "copy_of" not in json.loads(real_result[0].read_text())


def test_a_privacy_object_keeps_its_keys_and_their_order():
    d = {"epsilon": 0.0, "delta": 0.0, "accountant": "none (by construction)", "neighbouring_relation": "replace-one",
         "basis": "b", "public_split": {"mode": "x"}, "a_plugin_key": [1]}
    p = PrivacyClaim.from_json(d)
    assert p.to_json() == d and list(p.to_json()) == list(d) and p.details == {"a_plugin_key": [1]}
    assert claim_of(p)["kind"] == "formal"
    conditional = {"epsilon": None, "delta": 1e-5, "basis": "b", "conditional_epsilon": 3.0}
    assert claim_of(PrivacyClaim.from_json(conditional))["kind"] == "conditional"
    made = PrivacyClaim(epsilon=None, delta=1e-5, basis="b", claimed_epsilon=2.0, claim_kind="claimed_by_user")
    assert made.to_json() == {"epsilon": None, "delta": 1e-5, "basis": "b", "claimed_epsilon": 2.0,
                              "claim_kind": "claimed_by_user"}
    with pytest.raises(BadInput, match="privacy.epsilon"):
        PrivacyClaim.from_json({"epsilon": "1.0", "delta": 1e-5, "basis": "b"}, "privacy")


def test_the_writer_cannot_write_an_undeclared_key(real_result):
    d = json.loads(real_result[0].read_text())
    with pytest.raises(TypeError):  # the writers construct the dataclass: no field, no key
        AttackResult(**{k: v for k, v in d.items()}, epsilon_estimate=1.0)
    with pytest.raises(BadInput, match="timing: undeclared key"):
        AttackResult.from_json({**d, "timing": {**d["timing"], "sample_s": 1.0}})
    with pytest.raises(BadInput, match="undeclared key.*'epsilon_estimate'"):
        AttackResult.from_json({**d, "epsilon_estimate": 1.0})


def test_a_current_file_with_a_missing_or_mistyped_key_is_refused(real_result):
    d = json.loads(real_result[0].read_text())
    with pytest.raises(BadInput, match="missing keys: label"):
        AttackResult.from_json({k: v for k, v in d.items() if k != "label"})
    with pytest.raises(BadInput, match="seed: expected int"):
        AttackResult.from_json({**d, "seed": "0"})


def test_a_file_without_schema_version_is_refused_in_one_line(real_result):
    d = json.loads(real_result[0].read_text())
    with pytest.raises(BadInput) as e:
        AttackResult.from_json({k: v for k, v in d.items() if k != "schema_version"})
    assert "schema_version None is not one privbench" in str(e.value) and "\n" not in str(e.value)
    assert AttackResult.from_json(d).to_json()["schema_version"] == STORE_VERSION


def test_a_newer_version_is_refused_in_one_line(real_result, tmp_path):
    from privbench.reports.collect import read_result

    d = json.loads(real_result[0].read_text())
    f = tmp_path / "result.json"
    f.write_text(json.dumps({**d, "schema_version": 99}))
    with pytest.raises(BadInput) as e:
        read_result(f)
    assert str(f) in str(e.value) and "schema_version 99" in str(e.value) and "\n" not in str(e.value)
    r = subprocess.run([sys.executable, "-c", "from privbench.cli import main; main()", "audit", str(f)],
                       capture_output=True, text=True, cwd=ROOT)
    errors = [line for line in r.stderr.splitlines() if line.startswith("privbench: error: ")]
    assert r.returncode == 2 and len(errors) == 1 and "schema_version 99" in errors[0], r.stderr
    assert "Traceback" not in r.stderr


#: an external run's provenance with every declared key (the loaders' objects abridged), in the writer's order
PROVENANCE = {"model": {"format": "diffusers-unet", "path": "/m", "weights_sha256": "ab" * 32},
              "members": {"spec": "mem.npz", "n": 2}, "nonmembers": {"spec": "non.npz", "n": 2},
              "records_sha256": "cd" * 32, "captions_sha256": "ef" * 32,
              "references": {"recipe": None, "n_reference": 0, "note": "n"}}
#: a threat model with every declared key, in an attack's own order, plus a plug-in attack's key
THREAT = {"queries": "eps-prediction", "reference_models": 4, "reference_training": "the target's own method",
          "auxiliary_data": "the reference pool", "queries_per_record": "attack.n_draws", "reference_pool": "offline",
          "a_plugin_key": {"x": 1}}


def test_every_nested_key_round_trips(real_result):
    d = json.loads(real_result[0].read_text())
    external = {**d, "method": "external", "threat_model": THREAT, "provenance": PROVENANCE,
                "records_range": {"requested": "auto"}, "split_check": None}
    res = AttackResult.from_json(external)
    assert res.to_json() == external and list(res.to_json()) == list(external)
    assert [list(res.to_json()[k]) for k in ("threat_model", "provenance")] == [list(THREAT), list(PROVENANCE)]
    tm, prov = res.threat_model, res.provenance
    assert isinstance(tm, ThreatModel) and isinstance(prov, Provenance)
    assert (tm.reference_models, tm.reference_pool, tm.details) == (4, "offline", {"a_plugin_key": {"x": 1}})
    assert prov.weights_sha256 == "ab" * 32 and prov.references["n_reference"] == 0
    assert prov.members == {"spec": "mem.npz", "n": 2} and prov.captions_sha256 == "ef" * 32
    # a writer builds them typed: keys in the declared order, the unset ones absent
    made = Provenance(model={}, members={}, nonmembers={}, records_sha256="00")
    assert made.to_json() == {"model": {}, "members": {}, "nonmembers": {}, "records_sha256": "00"}
    assert ThreatModel().to_json() == {}  # an attack that declares no threat model writes {}
    assert list(ThreatModel(queries_per_record=1, queries="q").to_json()) == ["queries", "queries_per_record"]


@pytest.mark.parametrize("key, value, needle", [
    ("provenance", {**PROVENANCE, "weights_note": "x"}, "provenance: undeclared key(s) 'weights_note'"),
    ("provenance", {**PROVENANCE, "records_sha256": 1}, "provenance.records_sha256: expected str or null"),
    ("provenance", [], "provenance: expected dict or null"),
    ("threat_model", {**THREAT, "reference_models": "4"}, "threat_model.reference_models: expected int or null"),
    ("threat_model", {**THREAT, "queries_per_record": True}, "threat_model.queries_per_record: expected"),
])
def test_an_undeclared_or_mistyped_nested_key_is_refused_in_one_line(real_result, key, value, needle):
    d = json.loads(real_result[0].read_text())
    with pytest.raises(BadInput) as e:
        AttackResult.from_json({**d, key: value})
    assert needle in str(e.value) and "\n" not in str(e.value)


def _made(**kw) -> dict:
    """A result as a writer builds it (no run needed), as JSON."""
    return AttackResult(**{"method": "centralized", "target": "model", "attack": "loss", "dataset": "digits",
                           "preset": "test", "seed": 0, "run_dir": None, "n_members": 2, "n_nonmembers": 2,
                           "metrics": {}, "privacy": {"epsilon": 1.0, "delta": 1e-5, "basis": "b"},
                           "scores_path": None, "timing": {"train_s": None, "attack_s": 1.0, "device": "cpu"},
                           **kw}).to_json()


@pytest.mark.parametrize("key, value, needle", [
    ("privacy", {"epsilon": 1.0, "delta": 1e-5}, "privacy: missing keys: basis"),
    ("privacy", {"epsilon": True, "delta": 1e-5, "basis": "b"}, "privacy.epsilon: expected float or null, got bool"),
    ("privacy", {"epsilon": 1.0, "delta": 1e-5, "basis": "b", "steps": "10"}, "privacy.steps: expected int or null"),
    ("timing", {"train_s": None, "device": "cpu"}, "timing: missing keys: attack_s"),
    ("timing", {"train_s": None, "attack_s": "1", "device": "cpu"}, "timing.attack_s: expected float or null"),
])
def test_a_nested_object_is_checked_as_its_fields_declare(key, value, needle):
    with pytest.raises(BadInput) as e:
        AttackResult.from_json({**_made(), key: value})
    assert needle in str(e.value) and "\n" not in str(e.value)


def test_numbers_and_bools_as_the_type_hints_say():
    privacy = {"epsilon": 0, "delta": 0, "basis": "b", "noise_calibrated": True, "steps": 10, "fallback": {"x": 1}}
    res = AttackResult.from_json({**_made(), "privacy": privacy})  # an int is a number; a bool where declared
    assert res.privacy.noise_calibrated is True and res.privacy.epsilon == 0 and res.to_json()["privacy"] == privacy


def test_a_result_is_read_by_attribute_and_knows_an_outside_model():
    res = AttackResult.from_json(_made())
    assert res.metrics == {} and res.privacy.basis == "b" and not res.is_outside
    with pytest.raises(TypeError):
        res["metrics"]  # no mapping access: the fields are attributes
    assert AttackResult.from_json(_made(method="external")).is_outside
