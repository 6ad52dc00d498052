"""privbench infer-dataset: one p-value with its method, on a real model trained outside privbench."""
from __future__ import annotations

import json

from ext_helpers import cli


def test_infer_dataset_finds_the_training_set_and_reports_the_shift_check(memorized):
    code, out, err = cli("infer-dataset", "--model", memorized["pipeline"], "--suspect", memorized["members"],
                         "--reference", memorized["nonmembers"], "--device", "cpu", "--json")
    assert code == 0, err
    res = json.loads(out)
    assert res["p_value"] < 0.01 and "Welch" in res["method"]
    # the gate is check-split's; this random 32 + 32 split of digits is one it flags (an i.i.d. split is flagged
    # at p <= 0.05 once in 20), so the p-value is reported as not evidence of training
    sc = res["shift_check"]
    assert sc["shift"] and res["valid"] is False and sc["p_value"] <= 0.05 and sc["permutations"] == 1000
    assert "differ WITHOUT the model" in sc["verdict"] and "members" not in sc
    assert res["n_suspect"] == 32 and res["statistics"] == ["loss", "pia", "sima"]
    # the same sets on the untrained twin: nothing to find
    code, out, err = cli("infer-dataset", "--model", memorized["random"], "--suspect", memorized["members"],
                         "--reference", memorized["nonmembers"], "--device", "cpu", "--json")
    assert code == 0, err
    assert json.loads(out)["p_value"] >= 0.05


def test_infer_dataset_bad_statistic_is_one_line(memorized):
    code, out, err = cli("infer-dataset", "--model", memorized["pipeline"], "--suspect", memorized["members"],
                         "--reference", memorized["nonmembers"], "--statistics", "loss,gsa")
    assert code == 2 and "not a per-record statistic" in err and len(err.strip().splitlines()) == 1
    code, out, err = cli("infer-dataset", "--model", memorized["pipeline"], "--suspect", memorized["members"],
                         "--reference", memorized["nonmembers"], "--statistics", "loss,pia,loss")
    assert code == 2 and "--statistics: loss named twice" in err and len(err.strip().splitlines()) == 1
