"""The privacy-utility figure and table (reports/privacy_utility.py) from an ε-axis bench, without training."""
from __future__ import annotations

import json
import math

import pandas as pd

from privbench.reports.privacy_utility import privacy_utility_frame, summary_frame, write_privacy_utility


def _bench(tmp_path):
    cells, rows = [], []
    runs = [("centralized", None, None, s, 0.9) for s in (0, 1)] + \
           [("dpdm", "dpdm-lora", e, 0, 0.2 + e / 100) for e in (1.0, 10.0)] + [("dpdm", "dpdm-lora", 10.0, 1, 0.31)]
    for i, (method, variant, eps, seed, acc) in enumerate(runs):
        rd = str(tmp_path / f"run{i}")
        u = tmp_path / f"u{i}.json"
        u.write_text(json.dumps({"downstream": {"accuracy": acc, "ci": [acc - 0.05, acc + 0.05], "chance": 0.1},
                                 "class_fidelity": {"class_fidelity": acc}, "precision_recall": {"precision": 0.5,
                                                                                                "recall": 0.4}}))
        common = {"method": method, "variant": variant, "epsilon": eps, "dataset": "digits", "seed": seed,
                  "target": "model", "run_dir": rd,
                  "role": "baseline" if eps is None else "private", "status": "done"}
        cells += [{**common, "kind": "utility", "result_path": str(u)},
                  {**common, "kind": "fid", "summary": {"overall": 10.0 if eps is None else 100.0 / eps}}]
        for attack, auc in (("loss", 0.5 + (0.3 if eps is None else 0.01 * eps)), ("pia", 0.52)):
            cells.append({**common, "kind": "attack", "attack": attack})
            rows.append({"run_dir": rd, "kind": "membership", "attack": attack, "auc": auc, "auc_ci_lo": auc - 0.02,
                         "auc_ci_hi": auc + 0.02, "tpr_1pct": 0.01, "tpr_1pct_ci_lo": 0.0, "tpr_1pct_ci_hi": 0.03,
                         "formal_epsilon": eps if eps is not None else float("nan"), "eps_lb_cp": 0.1,
                         "eps_lb_one_run": 0.2 if attack == "pia" else float("nan")})
    return {"cells": cells}, pd.DataFrame(rows)


def test_frame_summary_and_files(tmp_path):
    bench, results = _bench(tmp_path)
    df = privacy_utility_frame(results, bench)
    assert len(df) == 5 and set(df["method"]) == {"centralized", "dpdm-lora"}
    base = df[df["method"] == "centralized"].iloc[0]
    assert math.isinf(base["epsilon"]) and base["best_attack"] == "loss" and base["best_auc"] == 0.8
    one = df[(df["method"] == "dpdm-lora") & (df["epsilon"] == 1.0)].iloc[0]
    assert one["best_attack"] == "pia" and one["eps_lower_bound"] == 0.2 and one["fid"] == 100.0
    s = summary_frame(df)
    ten = s[(s["method"] == "dpdm-lora") & (s["epsilon"] == 10.0)].iloc[0]
    assert ten["n_seeds"] == 2 and abs(ten["downstream_accuracy"] - (0.3 + 0.31) / 2) < 1e-12
    assert ten["downstream_accuracy_lo"] < ten["downstream_accuracy"] < ten["downstream_accuracy_hi"]  # over seeds
    single = s[(s["method"] == "dpdm-lora") & (s["epsilon"] == 1.0)].iloc[0]
    assert abs(single["downstream_accuracy_lo"] - 0.16) < 1e-12 and abs(single["downstream_accuracy_hi"] - 0.26) < 1e-12
    files, section = write_privacy_utility(results, bench, tmp_path / "out", ["csv", "latex", "html"])
    names = sorted(p.name for p in files)
    assert names == ["privacy_utility.csv", "privacy_utility.pdf", "privacy_utility.png", "privacy_utility.svg",
                     "privacy_utility.tex"]
    tex = (tmp_path / "out" / "tex" / "privacy_utility.tex").read_text()
    assert tex.count("\\\\") == 4 and "$\\infty$" in tex and "dpdm-lora" in tex
    assert "data:image/png;base64," in section and "<td>∞</td>" in section


def test_no_epsilon_axis_no_section_and_panels_without_data(tmp_path):
    bench, results = _bench(tmp_path)
    assert write_privacy_utility(results, {"cells": [dict(c, epsilon=None) for c in bench["cells"]]}, tmp_path,
                                 ["csv"]) == ([], None)
    no_fid = {"cells": [c for c in bench["cells"] if c["kind"] != "fid"]}
    files, _ = write_privacy_utility(results, no_fid, tmp_path / "o2", ["html"])  # FID panel: "not computed", no error
    assert any(p.suffix == ".png" for p in files)


def test_a_missing_value_in_the_privacy_utility_table_is_a_dash_not_n_a():
    """"n/a" is kept for a TPR the non-member count cannot resolve; a value that was not computed (no FID) is "–",
    as in every other table (reports/cells.py)."""
    from privbench.reports.cells import NONE_TEXT
    from privbench.reports.privacy_utility import _fmt

    assert _fmt(None, None, None) == NONE_TEXT and _fmt(float("nan"), float("nan"), float("nan")) == NONE_TEXT
    assert _fmt(0.5, 0.4, 0.6) == "0.500 [0.40, 0.60]" and _fmt(0.5, 0.5, 0.5) == "0.500"


def test_a_band_over_seeds_stays_inside_the_panels_range():
    """mean ± 1.96·sd/√n of three TPRs near 0 would reach below 0 (the committed report read "[-0.00, 0.03]"):
    a rate's band is clipped to [0, 1], an ε lower bound's and an FID's to [0, ∞)."""
    import pandas as pd

    from privbench.reports.privacy_utility import _band

    g = pd.DataFrame({"best_tpr_1pct": [0.027, 0.003, 0.003], "downstream_accuracy": [0.99, 1.0, 0.97],
                      "eps_lower_bound": [0.0, 0.0, 0.4], "fid": [1.0, 9.0, 2.0]})
    m, lo, hi = _band(g, "best_tpr_1pct", None)
    assert abs(m - 0.011) < 1e-12 and lo == 0.0 and 0.011 < hi < 1
    assert _band(g, "downstream_accuracy", None)[2] == 1.0
    assert _band(g, "eps_lower_bound", None)[1] == 0.0 and _band(g, "fid", None)[1] == 0.0
