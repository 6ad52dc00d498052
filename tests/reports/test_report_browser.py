"""The HTML report in a real headless browser (Debian's chromium): no console errors, a non-blank screenshot, every
table-of-contents link lands on an element, and nothing is wider than a 1400-px window."""
from __future__ import annotations

import json
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
    return [ln for ln in stderr.splitlines() if re.search(r"CONSOLE\(\d+\)|Uncaught", ln)]


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


# Injected into a copy of the page only (the report itself has no script): resolves every in-page link and
# measures the layout at the window's width.
PROBE = """<script>
const ids = new Set([...document.querySelectorAll('[id]')].map(e => e.id));
const links = [...document.querySelectorAll('a[href^="#"]')].map(a => a.getAttribute('href').slice(1));
const doc = document.documentElement;
const wide = [...document.querySelectorAll('body *')]
  .filter(e => e.getBoundingClientRect().right > doc.clientWidth + 1)
  .map(e => e.tagName + (e.id ? '#' + e.id : '') + (e.className ? '.' + e.className : '')).slice(0, 8);
// per row of the ROC grid: the width its figures leave empty
const grid = document.querySelector('#roc ~ .rocgrid') || document.querySelector('.rocgrid');  // per target
const rows = {};
if (grid) for (const f of grid.children) {
  const r = f.getBoundingClientRect();
  const k = Math.round(r.top);
  rows[k] = rows[k] || [r.left, r.right];
  rows[k] = [Math.min(rows[k][0], r.left), Math.max(rows[k][1], r.right)];
}
const gridBox = grid ? grid.getBoundingClientRect() : null;
const rowGaps = Object.values(rows).map(([l, r]) => gridBox.width - (r - l));
const out = document.createElement('pre');
out.id = 'probe';
out.textContent = JSON.stringify({links: links, missing: links.filter(l => !ids.has(l)),
  scrollWidth: doc.scrollWidth, clientWidth: doc.clientWidth, wide: wide, rocRows: rowGaps});
document.body.appendChild(out);
</script>"""


def probe(page: Path, tmp: Path, width: int = 1400) -> dict:
    probed = tmp / f"probe-{page.parent.name}.html"
    probed.write_text(page.read_text().replace("</body>", PROBE + "</body>"))
    r = chromium(probed, tmp, "--dump-dom", f"--window-size={width},1000")
    assert r.returncode == 0, r.stderr[-2000:]
    assert console_errors(r.stderr) == [], console_errors(r.stderr)
    m = re.search(r'<pre id="probe">(.*?)</pre>', r.stdout, re.S)
    assert m, r.stdout[-2000:]
    return json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&").replace("&lt;", "<").replace("&gt;", ">"))


def test_probe_catches_overflow_and_dead_links(tmp_path):
    """The layout probe is not vacuous: a too-wide element and a link to nowhere are both reported."""
    (tmp_path / "p").mkdir()
    page = tmp_path / "p" / "index.html"
    page.write_text('<!DOCTYPE html><html><body><a href="#here">ok</a><a href="#nowhere">dead</a>'
                    '<h2 id="here">x</h2><div style="width:3000px">wide</div>'
                    '<div class="rocgrid" style="display:flex;width:900px"><figure style="width:300px;margin:0">'
                    '</figure></div></body></html>')
    p = probe(page, tmp_path)
    assert p["missing"] == ["nowhere"] and p["scrollWidth"] > 1400 and p["wide"]
    assert p["rocRows"] == [600]                                     # a row with two thirds left empty


@pytest.mark.usefixtures("test_results")
def test_contents_links_resolve_and_nothing_overflows_1400px(tmp_path, report_runs_dir):
    """The whole test run store (two methods, several attacks, samples): the widest page the tests make."""
    from privbench.reports import render_report

    render_report(report_runs_dir, tmp_path / "rep", ["html"])
    p = probe(tmp_path / "rep" / "index.html", tmp_path)
    assert len(p["links"]) >= 8 and p["missing"] == [], p
    assert p["scrollWidth"] <= p["clientWidth"] == 1400, p
    assert p["wide"] == [], p
    assert p["rocRows"] and max(p["rocRows"]) < 4, p              # every row of the ROC grid is full


def test_a_short_last_row_of_the_roc_grid_is_filled(tmp_path):
    """Five targets: three ROC figures in the first row, two that grow to fill the second."""
    from report_fakes import write_result

    from privbench.reports import render_report
    from privbench.reports.figures import grid_columns

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(60), np.zeros(60)]
    for i in range(5):
        write_result(tmp_path / "runs" / f"t{i}", y * i * 0.3 + rng.normal(size=120), y, target=f"target{i}")
    assert grid_columns(5) == 3
    render_report(tmp_path / "runs", tmp_path / "rep", ["html"])
    p = probe(tmp_path / "rep" / "index.html", tmp_path)
    assert len(p["rocRows"]) == 2 and max(p["rocRows"]) < 4, p
    assert p["scrollWidth"] <= 1400 and p["missing"] == [], p


# Injected into a copy of the page: the by-attack figures (count, drawn vs natural aspect) and the columns of the
# side-by-side table in which no cell has a value ("–" or blank everywhere).
FIGURE_PROBE = """<script>
const sec = document.getElementById('roc-attacks');
let figs = [];
for (let e = sec && sec.nextElementSibling; e && e.tagName !== 'H2'; e = e.nextElementSibling)
  figs = figs.concat([...e.querySelectorAll('img')]);
const imgs = figs.map(i => { const r = i.getBoundingClientRect();
  return {drawn: r.height / r.width, natural: i.naturalHeight / i.naturalWidth, width: r.width,
          svg: i.src.startsWith('data:image/svg+xml')}; });
const empty = [];
for (const t of [document.querySelector('#table ~ table')]) {  // the side-by-side table
  const head = [...t.querySelectorAll('thead th')].map(th => th.textContent.trim());
  const rows = [...t.querySelectorAll('tbody tr')].filter(r => r.children.length === head.length);
  head.forEach((h, j) => { if (rows.length && rows.every(r => ['', '–'].includes(r.children[j].textContent.trim())))
    empty.push(h); });
}
const out = document.createElement('pre');
out.id = 'figprobe';
out.textContent = JSON.stringify({imgs: imgs, empty: empty});
document.body.appendChild(out);
</script>"""


def test_single_panel_figures_and_no_empty_columns(tmp_path):
    """The HTML shows one figure per attack (each at its own aspect, not a stretched grid), the
    side-by-side table has no always-empty column (no FID, memorization, re-id or conditional ε here), and the
    screenshot is the window's size."""
    import numpy as np
    from report_fakes import write_result

    from privbench.reports import render_report

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(100), np.zeros(100)]
    same = y * 1.5 + rng.normal(size=200)
    for target in ("pipeline:0", "client:0"):
        for attack in ("loss", "pia", "sima"):
            write_result(tmp_path / "runs" / target.replace(":", "") / attack, same, y, method="pfdm",
                         target=target, attack=attack)
    render_report(tmp_path / "runs", tmp_path / "rep", ["html"], attacks=["pia", "sima"])
    page = tmp_path / "rep" / "index.html"
    probed = tmp_path / "rep" / "figprobe.html"
    probed.write_text(page.read_text().replace("</body>", FIGURE_PROBE + "</body>"))
    r = chromium(probed, tmp_path, "--dump-dom", "--window-size=1400,1000")
    assert r.returncode == 0 and console_errors(r.stderr) == [], r.stderr[-2000:]
    m = re.search(r'<pre id="figprobe">(.*?)</pre>', r.stdout, re.S)
    p = json.loads(m.group(1).replace("&quot;", '"').replace("&amp;", "&"))
    assert len(p["imgs"]) == 2, p                            # pia and sima: one single-panel figure each
    for im in p["imgs"]:
        assert im["svg"] and 0.8 < im["natural"] < 1.6, im    # one panel, not a 2 × 6 strip
        assert abs(im["drawn"] - im["natural"]) < 0.01, im    # drawn at its own aspect
    assert p["empty"] == [], p
    html = page.read_text()
    assert "FID overall" not in html and "memorized" not in html and "conditional ε<br>" not in html
    assert ">loss<" not in html                               # --attacks pia,sima: loss is left out

    shot = tmp_path / "shot.png"
    r = chromium(page, tmp_path, f"--screenshot={shot}", "--window-size=1400,2400")
    from PIL import Image

    px = np.asarray(Image.open(shot).convert("L"), dtype=np.float64)
    assert px.shape == (2400, 1400) and px.var() > 0
