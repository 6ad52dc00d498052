"""The privacy-utility figure and table (reports/privacy_utility.py) from an ε-axis bench, without training."""
from __future__ import annotations

import json
import math

import pandas as pd

from privbench.reports.privacy_utility import privacy_utility_frame, summary_frame, write_privacy_utility

DPSGD = ("DP-SGD, PRV accountant, Poisson-subsampled Gaussian, add/remove-one record, δ=1e-05, covers the released "
         "model's training (all steps); scope: the released model; noise source: seeded")
LDP = "analytic-gaussian LDP per record, per single upload (replace-one, Δ=2C); labels are not covered"
PUBLIC = "by construction: the released model never read a member — ε = 0, δ = 0; the public records are not protected"


def _bench(tmp_path):
    """An ε-axis bench without training: centralized (ε = ∞, two seeds), public-only (ε = 0), dpdm-lora at ε 1
    (one seed) and 10 (two seeds: its line mixes interval kinds), pfdm at ε 1 and 10 (one seed each: bands)."""
    cells, rows = [], []
    runs = [("centralized", None, None, s, 0.9, None, None) for s in (0, 1)] + \
           [("public-only", None, None, 0, 0.85, 0.0, PUBLIC)] + \
           [("dpdm", "dpdm-lora", e, 0, 0.2 + e / 100, e, DPSGD) for e in (1.0, 10.0)] + \
           [("dpdm", "dpdm-lora", 10.0, 1, 0.31, 10.0, DPSGD)] + \
           [("pfdm", None, e, 0, 0.15 + e / 100, e * 0.99, LDP) for e in (1.0, 10.0)]
    for i, (method, variant, eps, seed, acc, formal, basis) in enumerate(runs):
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
                         "formal_epsilon": formal if formal is not None else float("nan"), "epsilon_basis": basis,
                         "claim_kind": None, "conditional_epsilon": float("nan"), "eps_lb_cp": 0.1,
                         "eps_lb_one_run": 0.3 if attack == "pia" else float("nan"), "eps_lb": 0.2})
    return {"cells": cells}, pd.DataFrame(rows)


def test_frame_summary_and_files(tmp_path):
    bench, results = _bench(tmp_path)
    df = privacy_utility_frame(results, bench)
    assert len(df) == 8 and set(df["method"]) == {"centralized", "public-only", "dpdm-lora", "pfdm"}
    base = df[df["method"] == "centralized"].iloc[0]
    assert math.isinf(base["epsilon"]) and base["best_attack"] == "loss" and base["best_auc"] == 0.8
    assert pd.isna(base["epsilon_kind"]) and df[df["method"] == "public-only"].iloc[0]["epsilon"] == 0
    one = df[(df["method"] == "dpdm-lora") & (df["epsilon"] == 1.0)].iloc[0]
    assert one["best_attack"] == "pia" and one["eps_lower_bound"] == 0.2 and one["fid"] == 100.0
    assert one["epsilon_kind"] == "formal" and one["epsilon_basis"] == DPSGD
    s = summary_frame(df)
    ten = s[(s["method"] == "dpdm-lora") & (s["epsilon"] == 10.0)].iloc[0]
    assert ten["n_seeds"] == 2 and abs(ten["downstream_accuracy"] - (0.3 + 0.31) / 2) < 1e-12
    assert ten["downstream_accuracy_lo"] < ten["downstream_accuracy"] < ten["downstream_accuracy_hi"]  # over seeds
    assert ten["downstream_accuracy_interval"] == "seeds"
    single = s[(s["method"] == "dpdm-lora") & (s["epsilon"] == 1.0)].iloc[0]
    assert abs(single["downstream_accuracy_lo"] - 0.16) < 1e-12 and abs(single["downstream_accuracy_hi"] - 0.26) < 1e-12
    assert single["downstream_accuracy_interval"] == "bootstrap" and single["fid_interval"] == ""
    files, section = write_privacy_utility(results, bench, tmp_path / "out", ["csv", "latex", "html"])
    names = sorted(p.name for p in files)
    stems = ["privacy_utility"] + [f"privacy_utility-{c}" for c in
                                   ("fid", "downstream_accuracy", "best_auc", "best_tpr_1pct", "eps_lower_bound")]
    assert names == sorted(["privacy_utility.csv", "privacy_utility.tex"]
                           + [f"{s}.{e}" for s in stems for e in ("png", "svg", "pdf")])
    tex = (tmp_path / "out" / "tex" / "privacy_utility.tex").read_text()
    assert tex.count("\\\\") == 7 and "$\\infty$" in tex and "dpdm-lora" in tex  # header + 6 rows
    assert "data:image/svg+xml;base64," in section and "<td>∞<sup" in section
    assert section.index("<figcaption>") < section.index("<table>")


def test_the_table_has_a_label_and_an_epsilon_basis_per_kind_of_row(tmp_path):
    from privbench.reports.privacy_utility import LABEL, latex_float

    bench, results = _bench(tmp_path)
    s = summary_frame(privacy_utility_frame(results, bench))
    tex = latex_float(s, "twocolumn")
    assert "\\label{tab:privbench-privacy_utility}" in tex and LABEL == "tab:privbench-privacy_utility"
    notes = [line for line in tex.splitlines() if line.startswith("\\textsuperscript{")]
    assert len(notes) == 4, notes  # DP-SGD, LDP per upload, ε = ∞, ε = 0: one footnote each
    text = "\n".join(notes)
    assert "formal $\\varepsilon$: DP-SGD, PRV accountant" in text and "scope" not in text  # up to the first ";"
    assert "formal $\\varepsilon$: analytic-gaussian LDP per record, per single upload" in text
    assert "$\\varepsilon$ = $\\infty$: a non-private baseline" in text
    assert "$\\varepsilon$ = 0, formal $\\varepsilon$: by construction" in text
    rows = [line for line in tex.splitlines() if line.startswith(("dpdm-lora &", "pfdm &", "centralized &"))]
    assert all("\\textsuperscript{" in r.split("&")[1] for r in rows), rows  # the mark sits on the ε cell
    assert "privacy_utility.csv" not in tex and "privacy\\_utility.csv" in tex  # escaped for pdflatex


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


def test_the_html_report_of_an_epsilon_bench_leads_with_privacy_utility(tmp_path):
    """What an ε-axis bench was run for comes first: in the contents and on the page, before the side-by-side
    table; a report without an ε axis has no such section."""
    from test_figure_curves import _epsilon_bench

    from privbench.reports import render_report

    bench = _epsilon_bench(tmp_path)
    files = render_report(bench, tmp_path / "out", ["html"])
    html = (tmp_path / "out" / "index.html").read_text()
    toc = html[html.index('<nav class="toc"'):html.index("</nav>")]
    assert toc.index('href="#privacy-utility"') < toc.index('href="#table"') < toc.index('href="#audit"')
    assert html.index('<h2 id="privacy-utility"') < html.index('<h2 id="table"')
    assert "<figcaption>Utility and leakage against ε" in html
    assert {"privacy_utility.svg", "privacy_utility-fid.svg"} <= {p.name for p in files}
    plain = json.loads((bench / "bench.json").read_text())
    (bench / "bench.json").write_text(json.dumps({**plain, "cells": [dict(c, epsilon=None) for c in plain["cells"]]}))
    render_report(bench, tmp_path / "plain", ["html"])
    assert 'id="privacy-utility"' not in (tmp_path / "plain" / "index.html").read_text()
