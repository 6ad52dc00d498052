"""--attack a,b,c: one run per attack and one combined report; the list is checked before anything runs."""
from __future__ import annotations

import json
from pathlib import Path

from click.testing import CliRunner

from privbench.cli import main


def test_run_with_several_attacks_writes_each_result_and_one_combined_report(tmp_path):
    r = CliRunner().invoke(main, ["run", "--method", "centralized", "--attack", "pia,sima@mc", "--preset", "test",
                                  "--runs-dir", str(tmp_path), "--device", "cpu", "--set", "attack.sima_draws=2",
                                  "--json"])
    assert r.exit_code == 0, r.output
    out = json.loads(next(line for line in r.output.splitlines() if line.startswith('{"results"')))
    labels = [x["label"] for x in out["results"]]
    assert labels == ["pia", "sima@mc"]
    assert out["results"][1]["attack_config"]["sima_draws"] == 2     # a setting of one of the attacks applies to it
    for x in out["results"]:
        assert Path(x["scores_path"]).is_file()
    page = next(p for p in out["report"]["rendered"] if p.endswith("index.html"))
    html = Path(page).read_text()
    assert "sima@mc" in html and "pia" in html
    assert Path(out["report"]["markdown"]).read_text().count("centralized") >= 2


def test_a_bad_name_or_setting_in_the_list_is_one_line_and_nothing_is_written(tmp_path):
    for args, msg in [(["--attack", "pia,nope"], "unknown attack 'nope'"),
                      (["--attack", "pia,pia"], "named twice"),
                      (["--attack", "pia,sima", "--set", "attack.lira_draws=2"], "not a setting of any")]:
        r = CliRunner().invoke(main, ["attack", "--method", "centralized", "--preset", "test", "--runs-dir",
                                      str(tmp_path), "--device", "cpu", *args])
        assert r.exit_code == 2 and msg in r.output, r.output
        assert not any(tmp_path.iterdir())
