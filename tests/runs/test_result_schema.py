"""result.json's typed, versioned schema (privbench.runs.result_schema): docs/cli.md §5 names exactly the declared
keys, a real result round-trips unchanged, a writer cannot add an undeclared key, an old file is migrated and a
newer version is refused in one line."""
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
from privbench.runs.result_schema import SCHEMA_VERSION, AttackResult, PrivacyClaim, Timing

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


def _documented() -> tuple[set[str], set[str]]:
    """(result.json keys of §5's key table, privacy keys of its ``privacy`` objects table and paragraph)."""
    sec = _section5()
    top, privacy = sec.split("`privacy` objects:", 1)
    top_rows = [line for line in top.splitlines() if line.startswith("| `")]
    priv_rows = [line for line in privacy.splitlines() if line.startswith("| ") and not line.startswith("| target")
                 and not line.startswith("|---")]
    prose = [line for line in privacy.splitlines() if not line.startswith("|")]
    priv = _table_keys(priv_rows, 1) | set(re.findall(r"`([a-z_0-9]+):", " ".join(prose)))  # `noise_label: "…"`
    return _table_keys(top_rows, 0), priv


def _declared(cls) -> set[str]:
    return {f.name for f in fields(cls)} - BOOKKEEPING


def test_docs_name_exactly_the_declared_keys():
    top, privacy = _documented()
    assert top == _declared(AttackResult), (f"in docs only: {sorted(top - _declared(AttackResult))}; "
                                            f"declared only: {sorted(_declared(AttackResult) - top)}")
    assert privacy == _declared(PrivacyClaim), (f"in docs only: {sorted(privacy - _declared(PrivacyClaim))}; "
                                                f"declared only: {sorted(_declared(PrivacyClaim) - privacy)}")
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
        assert d["schema_version"] == SCHEMA_VERSION
        res = AttackResult.from_json(d)
        again = res.to_json()
        assert again == d and list(again) == list(d)  # values and the key order the file has
        assert json.dumps(again, indent=2) + "\n" == text
        assert isinstance(res.timing, Timing) and res.timing.attack_s is not None
    top = json.loads(real_result[1].read_text())
    assert top["copy_of"] == str(real_result[0]) and "copy_of" not in json.loads(real_result[0].read_text())


def test_a_privacy_object_keeps_its_keys_and_their_order():
    d = {"epsilon": 0.0, "delta": 0.0, "accountant": "none (by construction)", "neighbouring_relation": "replace-one",
         "basis": "b", "public_split": {"mode": "x"}, "a_plugin_key": [1]}
    p = PrivacyClaim.from_json(d)
    assert p.to_json() == d and list(p.to_json()) == list(d) and p.details == {"a_plugin_key": [1]}
    assert p.kind == "formal"
    conditional = {"epsilon": None, "delta": 1e-5, "basis": "b", "conditional_epsilon": 3.0}
    assert PrivacyClaim.from_json(conditional).kind == "conditional"
    made = PrivacyClaim(epsilon=None, delta=1e-5, basis="b", claimed_epsilon=2.0, claim_kind="claimed_by_user")
    assert made.to_json() == {"epsilon": None, "delta": 1e-5, "basis": "b", "claimed_epsilon": 2.0,
                              "claim_kind": "claimed_by_user"}
    with pytest.raises(BadInput, match="privacy.epsilon"):
        PrivacyClaim.from_json({"epsilon": "1.0", "delta": 1e-5, "basis": "b"})


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


def test_a_version_0_file_is_migrated(real_result, tmp_path):
    d = json.loads(real_result[0].read_text())
    old = {k: v for k, v in d.items() if k not in ("schema_version", "label", "kind", "threat_model")}
    old["a_key_of_another_tool"] = 1
    res = AttackResult.from_json(old)
    assert res.label == "loss" and res.kind == "membership" and res.threat_model is None
    assert res.to_json()["schema_version"] == SCHEMA_VERSION and "a_key_of_another_tool" not in res.to_json()
    hand_made = AttackResult.from_json({"method": "fake", "target": "model", "attack": "pia", "dataset": "digits",
                                        "metrics": {"memorized_fraction": 0.0}, "privacy": "none"})
    assert (hand_made.kind, hand_made.label, hand_made.seed, hand_made.preset) == ("other", "pia", 0, "")
    assert hand_made.privacy is None and hand_made.sha256 is None and hand_made.run_dir is None


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
