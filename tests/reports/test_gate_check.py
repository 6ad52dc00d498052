"""`privbench check`: exit 0 when every gate holds, 1 listing every breach, 2 for bad input (docs/cli.md §10)."""
from __future__ import annotations

import subprocess
import sys

import pytest
from click.testing import CliRunner

from privbench.cli import main


def check(*args):
    r = CliRunner().invoke(main, ["check", *map(str, args)])
    return r.exit_code, r.stdout, r.stderr


def gates(tmp_path, *lines, name="g.yaml"):
    p = tmp_path / name
    p.write_text("gates:\n" + "".join(f"  - {ln}\n" for ln in lines))
    return p


def test_gates_hold_exit_0(tmp_path, test_results):
    g = gates(tmp_path, "{method: centralized, target: model, attack: pia, metric: auc, max: 1.0}",
              "{method: pfdm, target: shared, attack: pia, metric: auc, max: 1.0, dataset: digits, preset: test}",
              "{method: pfdm, target: shared, attack: pia, metric: privacy.epsilon, max: 10}",
              "{method: pfdm, target: shared, attack: pia, metric: auc_ci95_high, max: 1.0}",
              "{method: dpdm, target: model, attack: pia, metric: auc, max: 0.6, optional: true}")
    code, out, err = check("--gates", g, *test_results.values())
    assert code == 0, err
    assert "all 4 gate checks hold" in out
    assert "optional" in err  # the optional gate that matched nothing is reported


def test_run_dirs_are_deduplicated(tmp_path, test_results):
    """A run dir holds a top-level copy of its latest result: one gate still makes one check per result."""
    run_dir = test_results[("pfdm", "pia")].parents[2]
    assert (run_dir / "result.json").is_file()
    g = gates(tmp_path, "{method: pfdm, target: shared, attack: pia, metric: auc, max: 1.0}")
    code, out, err = check("--gates", g, run_dir)
    assert code == 0, err
    assert "all 1 gate checks hold" in out


def test_strict_gates_exit_1_listing_every_breach(tmp_path, test_results):
    g = gates(tmp_path, "{method: centralized, target: model, attack: pia, metric: auc, max: 0.01}",
              "{method: pfdm, target: shared, attack: pia, metric: asr, min: 0.99}",
              "{method: pfdm, target: shared, attack: pia, metric: privacy.epsilon, max: 1}",
              "{method: centralized, target: model, attack: loss, metric: privacy.epsilon, max: 100}",
              "{method: centralized, target: model, attack: loss, metric: auc, max: 1.0}")
    code, out, err = check("--gates", g, *test_results.values())
    assert code == 1
    breaches = [ln for ln in err.splitlines() if ln.startswith("BREACH:")]
    assert len(breaches) == 4, err
    assert "gate #1" in breaches[0] and "auc" in breaches[0] and "> max 0.01" in breaches[0]
    assert "< min 0.99" in breaches[1]
    assert "privacy.epsilon" in breaches[2]
    assert "no formal guarantee" in breaches[3]  # a non-private target has no epsilon: infinite
    assert "4 of 5 gate checks breached" in err


def test_strict_gate_subprocess_exit_1(tmp_path, test_results):
    g = gates(tmp_path, "{method: centralized, target: model, attack: pia, metric: auc, max: 0.0}")
    r = subprocess.run([sys.executable, "-m", "privbench.cli", "check", "--gates", str(g),
                        str(test_results[("centralized", "pia")])], capture_output=True, text=True)
    assert r.returncode == 1 and "BREACH" in r.stderr and "Traceback" not in r.stderr


@pytest.mark.parametrize("content,needle", [
    ("gates:\n  - {method: pfdm, target: shared, attack: pia, metric: bogus, max: 1}\n", "unknown metric 'bogus'"),
    ("gates:\n  - {method: pfdm, target: shared, attack: loss, metric: auc, max: 1}\n", "matched none"),
    ("gates:\n  - {method: pfdm, target: shared, attack: pia, metric: auc, max: 1, colour: red}\n", "unknown key"),
    ("gates:\n  - {method: pfdm, target: shared, attack: pia, metric: auc, max: high}\n", "not a number"),
    ("gates:\n  - {method: pfdm, target: shared, attack: pia, metric: auc}\n", "max: or min:"),
    ("gates:\n  - {method: pfdm, target: shared, attack: pia, metric: auc, max: 1\n", "malformed YAML"),
    ("rules: []\n", "gates:"),
])
def test_bad_gates_exit_2(tmp_path, test_results, content, needle):
    p = tmp_path / "g.yaml"
    p.write_text(content)
    code, out, err = check("--gates", p, test_results[("pfdm", "pia")])
    assert code == 2, (out, err)
    assert needle in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_missing_files_exit_2(tmp_path, test_results):
    g = gates(tmp_path, "{method: pfdm, target: shared, attack: pia, metric: auc, max: 1}")
    code, _, err = check("--gates", tmp_path / "nope.yaml", test_results[("pfdm", "pia")])
    assert code == 2 and "not found" in err
    code, _, err = check("--gates", g, tmp_path / "missing_run")
    assert code == 2 and "missing_run" in err
    bad = tmp_path / "result.json"
    bad.write_text("{not json")
    code, _, err = check("--gates", g, bad)
    assert code == 2 and "result.json" in err


def test_shipped_tiny_gates_parse():
    from privbench.reports.gates import load_gates

    g = load_gates("tiny")                      # shipped inside the package: privbench/bench/gates/tiny.yaml
    assert any(x["method"] == "pfdm" and x["target"] == "shared" and x["attack"] == "pia" and x["metric"] == "auc"
               and x["max"] <= 0.6 for x in g)
    assert {x["method"] for x in g} >= {"pfdm", "dpdm", "dpsad"}


def _tiny_external(tmp_path, n=32):
    """A result like the docs' example: an outside model (``--model ./checkpoint``, so its results' target is the
    folder's name) attacked on 32 members and 32 non-members."""
    import numpy as np
    from report_fakes import write_result

    y = np.r_[np.ones(n, int), np.zeros(n, int)]
    return write_result(tmp_path / "ext", y * 0.3 + np.random.default_rng(1).normal(size=2 * n), y,
                        method="external", target="checkpoint", attack="pia")


@pytest.mark.parametrize("metric", ["tpr_at_1pct_fpr", "tpr_at_1pct_fpr_ci95_high", "tpr_at_0_1pct_fpr"])
def test_a_gate_on_an_unresolvable_tpr_is_exit_2(tmp_path, metric):
    """With 32 non-members a TPR at 1 % FPR is the TPR at zero false positives (every report shows n/a); a gate on it
    used to breach or pass on that number."""
    p = _tiny_external(tmp_path)
    g = gates(tmp_path, f"{{method: external, target: checkpoint, attack: pia, metric: {metric}, max: 0.05}}")
    code, out, err = check("--gates", g, p)
    assert code == 2, (out, err)
    assert "smallest resolvable FPR here is 1/32 = 3.12%" in err and "Traceback" not in err
    assert len(err.strip().splitlines()) == 1


def test_the_docs_example_gates_work_on_the_docs_example(tmp_path):
    """docs/external-models.md's gates file, against a result of the size of its own Python example (32 + 32):
    each gate checks (exit 0 or 1), none is bad input."""
    import re
    from pathlib import Path

    doc = (Path(__file__).parents[2] / "docs" / "external-models.md").read_text()
    blocks = re.findall(r"```yaml\n(gates:\n.*?)```", doc, re.S)
    assert blocks, "docs/external-models.md shows a gates file"
    p = _tiny_external(tmp_path)
    for i, block in enumerate(blocks):
        g = tmp_path / f"doc{i}.yaml"
        g.write_text(block)
        code, out, err = check("--gates", g, p)
        assert code in (0, 1), (block, err)


def test_an_inverted_auc_never_passes_a_max_gate(tmp_path):
    """Scores that point the wrong way (members lower) give a low AUC whose CI lies below 0.5: the attack's premise
    fails on that target, so a ceiling on leakage (auc <= 0.6) must breach, not pass, and the table says why."""
    import numpy as np
    from report_fakes import write_result

    from privbench.metrics.roc import membership_metrics
    from privbench.reports.text import format_table

    n = 200
    y = np.r_[np.ones(n, int), np.zeros(n, int)]
    s = -0.8 * y + np.random.default_rng(0).normal(size=2 * n)
    m = membership_metrics(s, y, bootstrap=200, seed=0)
    assert m["ci95"]["auc"][1] < 0.5
    p = write_result(tmp_path / "inv", s, y, method="external", target="model", attack="pia",
                     metrics={k: v for k, v in m.items() if k != "warnings"})
    code, out, err = check("--gates", gates(tmp_path, "{method: external, target: model, attack: pia, metric: auc, "
                                                      "max: 0.6}"), p)
    assert code == 1 and "inverted" in err, (out, err)
    code, _, err = check("--gates", gates(tmp_path, "{method: external, target: model, attack: pia, metric: auc, "
                                                    "min: 0.0}", name="min.yaml"), p)
    assert code == 0, err  # a floor is not a leakage ceiling: an inverted AUC does not breach it
    import json

    table = format_table([json.loads(p.read_text())])
    assert "inverted" in table
