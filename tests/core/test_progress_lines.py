"""Progress where stderr is no terminal (CI logs, pipes): one plain line per interval, never carriage returns."""
from __future__ import annotations

import io
import os
import subprocess
import sys
from pathlib import Path

from privbench.core import progress

ROOT = Path(__file__).resolve().parents[2]


def test_line_progress_writes_plain_lines_with_postfix_and_a_final_line(monkeypatch):
    monkeypatch.setenv("PRIVBENCH_PROGRESS", "1")
    monkeypatch.delenv("RANK", raising=False)
    out = io.StringIO()
    b = progress.bar(total=4, desc="train dpdm", unit="step", file=out)
    assert isinstance(b, progress.LineProgress)
    b.interval = 0.0
    b.update(1)
    b.set_postfix(loss=0.0431234)
    b.update(2)
    b.interval = 1e9
    b.update(1)  # within the interval: no line until close
    b.close()
    lines = out.getvalue().splitlines()
    assert lines[0].startswith("train dpdm: step 1/4, ") and lines[0].endswith(" s")
    assert lines[1].startswith("train dpdm: step 3/4, loss 0.04312, ")
    assert lines[-1].startswith("train dpdm: step 4/4, loss 0.04312, ") and len(lines) == 3
    assert "\r" not in out.getvalue()
    monkeypatch.setenv("PRIVBENCH_PROGRESS", "0")
    quiet = io.StringIO()
    q = progress.bar(total=2, file=quiet)
    q.update(2)
    q.close()
    assert quiet.getvalue() == ""


def test_a_piped_dp_training_prints_progress_lines(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1", "PRIVBENCH_PROGRESS": "1",
           "PRIVBENCH_PROGRESS_INTERVAL": "0"}
    r = subprocess.run([sys.executable, "-m", "privbench", "train", "--method", "dpdm", "--preset", "test",
                        "--runs-dir", str(tmp_path / "runs"), "--device", "cpu"],
                       capture_output=True, text=True, env=env, timeout=600, check=False)
    assert r.returncode == 0, r.stderr[-2000:]
    lines = [x for x in r.stderr.splitlines() if x.startswith("train dpdm")]
    assert any(x.startswith("train dpdm: step 20/20") for x in lines), r.stderr[-2000:]
    assert "\r" not in r.stderr
