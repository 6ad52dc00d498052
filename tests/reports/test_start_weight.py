"""The start weight a report shows is the released target's own, not the largest of the run: a DP-SAD run's
teacher (trained without the cap, never released) must not stand for its student."""
from __future__ import annotations

import json

from privbench.reports.collect import released_start_weight


def _run(tmp_path, weights: dict):
    ck = tmp_path / "run" / "checkpoints"
    ck.mkdir(parents=True)
    for name, w in weights.items():
        (ck / f"{name}.state.json").write_text(json.dumps({"ema_start_weight": w}))
    return tmp_path / "run"


def test_each_target_reads_its_own_networks(tmp_path):
    run = _run(tmp_path / "a", {"student": 0.01, "teacher": 0.0183})
    assert released_start_weight(run, "student") == 0.01 and released_start_weight(run, "teacher") == 0.0183
    assert released_start_weight(run) == 0.0183                      # the run as a whole: its largest
    pf = _run(tmp_path / "b", {"client0": 0.01, "client1": 0.02, "shared": 0.05})
    assert released_start_weight(pf, "client:0") == 0.01
    assert released_start_weight(pf, "pipeline:0") == 0.05           # client 0 below t0, the shared model above
    assert released_start_weight(pf, "model") == 0.05                # no checkpoint of that name: the run's largest
