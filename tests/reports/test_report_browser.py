"""The HTML report in a real headless browser (Debian's chromium): no console errors, a non-blank screenshot."""
from __future__ import annotations

import re
import subprocess
from pathlib import Path

import numpy as np
import pytest

CHROMIUM = Path("/usr/bin/chromium")
pytestmark = [pytest.mark.browser,
              pytest.mark.skipif(not CHROMIUM.exists(), reason="needs /usr/bin/chromium (apt-get install chromium)")]

FLAGS = ["--headless", "--no-sandbox", "--disable-gpu", "--disable-quic", "--no-first-run",
         "--disable-background-networking", "--disable-component-update", "--disable-sync",
         "--enable-logging=stderr", "--v=0", "--hide-scrollbars"]


def chromium(page: Path, tmp: Path, *extra: str) -> subprocess.CompletedProcess:
    profile = tmp / f"profile-{len(list(tmp.glob('profile-*')))}"
    return subprocess.run([str(CHROMIUM), *FLAGS, f"--user-data-dir={profile}", *extra, page.as_uri()],
                          capture_output=True, text=True, timeout=120)


def console_errors(stderr: str) -> list[str]:
    """Console messages of the page (chromium logs them as ...:CONSOLE(line)] "text") and uncaught errors."""
    return [l for l in stderr.splitlines() if re.search(r"CONSOLE\(\d+\)|Uncaught", l)]


def test_console_error_detection_works(tmp_path):
    """The check below is not vacuous: a page with a script error is caught by it."""
    bad = tmp_path / "bad.html"
    bad.write_text("<!DOCTYPE html><html><body><p>x</p><script>undefinedFunction();</script></body></html>")
    r = chromium(bad, tmp_path, "--dump-dom")
    assert console_errors(r.stderr), r.stderr[-2000:]


def test_report_loads_without_console_errors_and_renders(tmp_path, test_results):
    from privbench.reports import render_report

    run_dir = test_results[("pfdm", "pia")].parents[2]
    render_report(run_dir, tmp_path / "rep", ["html"])
    page = tmp_path / "rep" / "index.html"

    r = chromium(page, tmp_path, "--dump-dom")
    assert r.returncode == 0, r.stderr[-2000:]
    assert console_errors(r.stderr) == [], console_errors(r.stderr)
    dom = r.stdout
    assert "Side by side" in dom and "pfdm" in dom and "<img" in dom

    shot = tmp_path / "shot.png"
    r = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1280,2000")
    assert r.returncode == 0 and shot.is_file(), r.stderr[-2000:]
    assert console_errors(r.stderr) == []
    from PIL import Image

    px = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert px.shape == (2000, 1280)
    assert px.var() > 0                                 # not blank
    assert (px < 128).mean() > 0.005                    # some dark ink: text, tables, plots
