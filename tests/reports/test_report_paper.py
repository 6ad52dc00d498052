"""`privbench report` for papers: LaTeX (booktabs) and Markdown tables, ROC figures as PNG/SVG/PDF, "n/a" for TPRs
the non-member count cannot resolve (with the reason as a footnote), visible ε bases, the test-preset banner, and
mean ± std across seeds with every seed's value in seeds.csv."""
from __future__ import annotations

import math
import re
import shutil
import subprocess

import numpy as np
import pandas as pd
import pytest
from report_fakes import write_result

from privbench.reports import render_report
from privbench.reports.figures import grid_columns
from privbench.reports.present import resolvable

PFDM_BASIS = "analytic-gaussian LDP per record, per single upload (replace-one, Δ=2C); labels_and 5% not covered"
AUCS = {0: 0.61, 1: 0.66, 2: 0.71}          # pfdm/shared pia AUC per seed (centralized: + 0.2)
HOSTILE_TARGET = "model_a%b&c#d"           # LaTeX specials in a name


def make_paper_dir(root):
    """Hand-made results: pfdm/shared (formal ε with a basis) and centralized (no ε), pia and loss, seeds 0–2;
    300 non-members each (TPR@1% resolvable, TPR@0.1% not). One run directory per method and seed."""
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(300), np.zeros(300)].astype(int)
    priv = {"epsilon": 8.77, "delta": 1e-5, "accountant": "analytic-gaussian", "basis": PFDM_BASIS}
    for seed, auc in AUCS.items():
        for method, target, privacy, bump in (("pfdm", "shared", priv, 0.0), ("centralized", HOSTILE_TARGET, None, 0.2)):
            run = root / f"{method}-s{seed}"
            run.mkdir(parents=True)
            (run / "config.yaml").write_text(f"method: {method}\nseed: {seed}\n")
            for attack in ("pia", "loss"):
                write_result(run / "attacks" / attack, y * (1 + bump * 5) + rng.normal(size=600), y,
                             method=method, target=target, attack=attack, privacy=privacy, seed=seed,
                             metrics={"auc": auc + bump, "tpr_at_1pct_fpr": 0.05 + seed / 100,
                                      "tpr_at_0_1pct_fpr": 0.01, "ci95": {"auc": [auc - 0.05, auc + 0.05],
                                                                          "tpr_at_1pct_fpr": [0.0, 0.1]}})
    return root


@pytest.fixture(scope="module")
def paper_dir(tmp_path_factory):
    return make_paper_dir(tmp_path_factory.mktemp("paper") / "runs")


@pytest.fixture(scope="module")
def rendered(paper_dir, tmp_path_factory):
    """The report of paper_dir in every format, rendered once for the module: (out, names of the files)."""
    out = tmp_path_factory.mktemp("paper_report") / "rep"
    paths = render_report(paper_dir, out)
    return out, {p.relative_to(out).as_posix() for p in paths}


def _render(paper_dir, tmp_path, formats=None):
    out = tmp_path / "rep"
    paths = render_report(paper_dir, out, formats)
    return out, {p.relative_to(out).as_posix() for p in paths}


def test_tpr_resolvability_rule():
    assert resolvable("tpr_at_1pct_fpr", 100) and not resolvable("tpr_at_1pct_fpr", 99)
    assert resolvable("tpr_at_0_1pct_fpr", 1000) and not resolvable("tpr_at_0_1pct_fpr", 999)
    assert not resolvable("tpr_at_0_1pct_fpr", 256)        # the case: 256 non-members
    assert resolvable("auc", 2) and resolvable("tpr_at_1pct_fpr", None)


def test_report_writes_every_format_and_figure(tmp_path, paper_dir, rendered):
    out, names = rendered
    assert {"index.html", "side_by_side.csv", "results.csv", "seeds.csv", "tables.tex", "tex/membership.tex",
            "tex/seeds.tex", "tex/audit.tex", "tex/accountant.tex", "tables.md"} <= names
    for seed in AUCS:
        for stem in (f"roc-digits-seed{seed}-pfdm-shared", f"roc-by-attack-digits-seed{seed}"):
            for ext in ("png", "svg", "pdf"):
                assert f"figures/{stem}.{ext}" in names, (stem, ext)
        png = out / f"figures/roc-by-attack-digits-seed{seed}"
        assert png.with_suffix(".png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
        assert b"<svg" in png.with_suffix(".svg").read_bytes()[:2000]
        assert png.with_suffix(".pdf").read_bytes()[:5] == b"%PDF-"
    # --format restricts what is written
    out2, names2 = _render(paper_dir, tmp_path / "only", ["csv"])
    assert "side_by_side.csv" in names2 and not any(n.endswith((".tex", ".html", ".md", ".png")) for n in names2)


def test_unresolvable_tpr_is_na_with_its_reason(rendered):
    out, _ = rendered
    reason = "needs at least 1000 non-members; this target was attacked with 300"
    html = (out / "index.html").read_text()
    assert "n/a" in html and reason in html
    # the reason is a footnote under the table, not only in the collapsed warnings
    fn = html[html.index('id="table"'):html.index('id="audit"')]
    assert re.search(r'<ol class="fn">.*' + re.escape(reason), fn, re.S)
    assert "n/a" in (out / "tables.md").read_text() and reason in (out / "tables.md").read_text()
    tex = (out / "tex/membership.tex").read_text()
    assert "n/a" in tex and "needs at least 1000 non-members" in tex
    sbs = pd.read_csv(out / "side_by_side.csv")
    assert sbs["pia_tpr_0_1pct"].isna().all() and sbs["pia_tpr_0_1pct_ci_hi"].isna().all()
    assert sbs["pia_tpr_1pct"].notna().all()                       # 300 non-members resolve 1 %
    res = pd.read_csv(out / "results.csv")
    assert res["tpr_0_1pct"].isna().all()           # one rule for every table (reports.cells): result.json keeps it


def test_epsilon_basis_is_visible_not_hover_text(rendered):
    out, _ = rendered
    html = (out / "index.html").read_text()
    sbs = html[html.index('id="table"'):html.index('id="audit"')]
    assert "title=" not in sbs
    assert "ε basis: analytic-gaussian LDP per record" in sbs and "no formal ε: a non-private baseline" in sbs
    tex = (out / "tex/membership.tex").read_text()
    assert r"$\varepsilon$ basis: analytic-gaussian LDP per record" in tex and r"$\Delta$=2C" in tex
    assert "ε basis: analytic-gaussian" in (out / "tables.md").read_text()


def test_test_preset_banner(tmp_path, rendered):
    out, _ = rendered
    for f in ("index.html", "tables.md", "tables.tex"):
        assert "results meaningless" in (out / f).read_text(), f
    html = (out / "index.html").read_text()
    assert html.index('class="banner"') < html.index('id="table"')   # above the results
    # a tiny-preset result gets no banner
    y = np.r_[np.ones(50), np.zeros(50)]
    write_result(tmp_path / "tinyruns" / "a", y + np.random.default_rng(1).normal(size=100), y, preset="tiny")
    render_report(tmp_path / "tinyruns", tmp_path / "tinyrep", ["markdown"])
    assert "results meaningless" not in (tmp_path / "tinyrep" / "tables.md").read_text()


def test_mean_std_across_seeds_and_per_seed_values(tmp_path, paper_dir, rendered):
    out, _ = rendered
    seeds = pd.read_csv(out / "seeds.csv")
    row = seeds[(seeds.method == "pfdm") & (seeds.attack == "pia")].iloc[0]
    vals = np.array(list(AUCS.values()))
    assert row["n_seeds"] == 3 and row["seeds"] == "0 1 2"
    assert row["auc_mean"] == pytest.approx(vals.mean()) and row["auc_std"] == pytest.approx(vals.std(ddof=1))
    assert [row[f"auc_seed{s}"] for s in AUCS] == pytest.approx(list(AUCS.values()))
    assert row["tpr_0_1pct_n"] == 0 and math.isnan(row["tpr_0_1pct_mean"])   # unresolvable: not averaged
    assert row["tpr_1pct_mean"] == pytest.approx(np.mean([0.05, 0.06, 0.07]))
    html = (out / "index.html").read_text()
    sec = html[html.index('id="seeds"'):html.index('id="audit"')]
    assert f"{vals.mean():.3f}" in sec and f"± {vals.std(ddof=1):.3f}" in sec
    assert f"{vals.mean():.3f}" in (out / "tex/seeds.tex").read_text()
    # one seed: no across-seeds section or file
    out1 = tmp_path / "one"
    render_report(paper_dir / "pfdm-s0", out1, ["csv", "html"])
    assert not (out1 / "seeds.csv").exists() and 'id="seeds"' not in (out1 / "index.html").read_text()


def test_table_of_contents_links_resolve(rendered):
    out, _ = rendered
    html = (out / "index.html").read_text()
    links = re.findall(r'href="#([^"]+)"', html)
    ids = set(re.findall(r'\bid="([^"]+)"', html))
    assert len(links) >= 8 and not [k for k in links if k not in ids]
    assert "<script" not in html.lower()


# ------------------------------------------------------------------------------------------ LaTeX

def _strip_comments(tex: str) -> str:
    return re.sub(r"(?<!\\)%.*", "", tex)


def check_latex_structure(tex: str) -> None:
    """Balanced environments and braces, booktabs rules in order, one cell per column in every row, ASCII only,
    no unescaped _ % & # outside their roles."""
    assert tex.isascii()
    body = _strip_comments(tex)
    stack = []
    for kind, name in re.findall(r"\\(begin|end)\{([^}]+)\}", body):
        if kind == "begin":
            stack.append(name)
        else:
            assert stack and stack.pop() == name, f"\\end{{{name}}} does not close the open environment"
    assert not stack, f"unclosed: {stack}"
    unesc = lambda ch, s: len(re.findall(r"(?<!\\)" + re.escape(ch), s))  # noqa: E731
    assert unesc("{", body) == unesc("}", body)
    assert unesc("_", body) == 0 and unesc("%", body) == 0 and unesc("#", body) == 0
    assert unesc("$", body) % 2 == 0
    for spec, table in re.findall(r"\\begin\{tabular\}\{([lrc]+)\}(.*?)\\end\{tabular\}", body, re.S):
        rules = re.findall(r"\\(toprule|midrule|bottomrule)", table)
        assert rules[0] == "toprule" and rules[-1] == "bottomrule" and rules.count("toprule") == 1 \
            and rules.count("bottomrule") == 1 and "midrule" in rules
        rows = [r for r in table.split("\\\\") if r.strip() and "bottomrule" not in r]
        for r in rows:
            assert unesc("&", r) == len(spec) - 1, r


def test_latex_structure_and_escaping(rendered):
    out, names = rendered
    texs = [out / n for n in names if n.endswith(".tex")]
    assert len(texs) >= 5
    for f in texs:
        check_latex_structure(f.read_text())
    mem = (out / "tex/membership.tex").read_text()
    assert r"model\_a\%b\&c\#d" in mem                         # the hostile name, escaped
    assert r"labels\_and 5\% not covered" in mem                # the basis footnote, escaped
    assert mem.count(r"\toprule") == 1 and r"\label{tab:privbench-membership}" in mem
    doc = (out / "tables.tex").read_text()
    assert r"\usepackage{booktabs}" in doc and all(rf"\input{{tex/{k}}}" in doc for k in ("membership", "seeds"))


def test_structure_check_catches_broken_latex():
    """check_latex_structure is not vacuous."""
    good = "\\begin{table}\\begin{tabular}{lr}\\toprule a & b \\\\ \\midrule c & d \\\\ \\bottomrule\\end{tabular}\\end{table}"
    check_latex_structure(good)
    for bad in (good.replace("\\end{table}", ""), good.replace("c & d", "c_1 & d"), good.replace("c & d", "c & 5%"),
                good.replace("c & d", "c & d & e"), good.replace("\\toprule", "")):
        with pytest.raises(AssertionError):
            check_latex_structure(bad)


def _tex_engine() -> bool:
    if not shutil.which("pdflatex") or not shutil.which("kpsewhich"):
        return False
    return subprocess.run(["kpsewhich", "booktabs.sty"], capture_output=True, text=True).stdout.strip() != ""


@pytest.mark.skipif(not _tex_engine(), reason="needs pdflatex with booktabs (apt-get install texlive-latex-base "
                                             "texlive-latex-recommended; .ci/run installs them)")
def test_latex_compiles(tmp_path, rendered):
    out = tmp_path / "tex"
    shutil.copytree(rendered[0], out)
    r = subprocess.run(["pdflatex", "-interaction=nonstopmode", "-halt-on-error", "tables.tex"], cwd=out,
                       capture_output=True, text=True, timeout=120)
    assert r.returncode == 0, r.stdout[-3000:]
    assert (out / "tables.pdf").read_bytes()[:5] == b"%PDF-"
    log = (out / "tables.log").read_text(errors="replace")
    assert "Undefined control sequence" not in log and "Missing $ inserted" not in log


# ------------------------------------------------------------------------------------------ Markdown

def test_markdown_tables_are_well_formed(rendered):
    out, _ = rendered
    md = (out / "tables.md").read_text()
    cells = lambda line: len(re.findall(r"(?<!\\)\|", line)) - 1  # noqa: E731
    tables = re.findall(r"((?:^\|.*\|\n)+)", md, re.M)
    assert len(tables) >= 4
    for t in tables:
        lines = t.strip().splitlines()
        assert re.fullmatch(r"\|(:?-{3}:?\|)+", lines[1]), lines[1]
        assert {cells(ln) for ln in lines} == {cells(lines[0])}, t
    assert "model_a%b&c#d" in md and "[figures/" not in md and "](figures/roc-by-attack-digits-seed0.png)" in md


# ------------------------------------------------------------------------------------------ figures

def _overlaps_any_axes(fig) -> list[str]:
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    FigureCanvasAgg(fig)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    legends = list(fig.legends) + [ax.get_legend() for ax in fig.axes if ax.get_legend()]
    assert legends
    bad = []
    for leg in legends:
        lb = leg.get_window_extent(r)
        for ax in fig.axes:
            if lb.overlaps(ax.get_window_extent(r)):
                bad.append(ax.get_title())
    return bad


def test_roc_legends_sit_outside_every_axes():
    from privbench.metrics.plots import roc_figure, roc_panels_figure

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(256), np.zeros(256)]
    curves = {f"method{i}/target:{i}": (y * i * 0.3 + rng.normal(size=512), y) for i in range(9)}
    assert _overlaps_any_axes(roc_figure(dict(list(curves.items())[:4]), "one target")) == []
    fig = roc_panels_figure({a: curves for a in ("loss", "secmi", "pia", "pian", "memorization")}, "by attack",
                            ncols=grid_columns(5))
    assert _overlaps_any_axes(fig) == []
    assert len(fig.axes) == 5                                   # no empty panel


@pytest.mark.parametrize("k, title", [(1, ""), (4, "lira on centralized/model (colored-mnist5k)"), (9, "t")])
def test_a_roc_figure_keeps_every_label_inside_it_and_apart(k, title):
    """The single ROC figure's fixed layout: title, tick and axis labels and legend all inside the figure, the
    legend below the axes' x label."""
    from matplotlib.backends.backend_agg import FigureCanvasAgg

    from privbench.metrics.plots import roc_figure

    rng = np.random.default_rng(0)
    y = np.r_[np.ones(64), np.zeros(64)]
    fig = roc_figure({f"m{i}@v/target:pipeline:{i} t=200 (fixed)": (y * i * 0.3 + rng.normal(size=128), y)
                      for i in range(k)}, title, marks={"m0@v/target:pipeline:0 t=200 (fixed)": "inverted"})
    FigureCanvasAgg(fig)
    fig.canvas.draw()
    r = fig.canvas.get_renderer()
    box = fig.bbox
    ax = fig.axes[0]
    lo, hi = ax.get_xlim()
    shown = [lab for axis in (ax.xaxis, ax.yaxis)   # the tick labels drawn: those of ticks within the limits
             for loc, lab in zip(axis.get_ticklocs(), axis.get_ticklabels()) if lo <= loc <= hi]
    texts = [ax.title, ax.xaxis.label, ax.yaxis.label, *shown, *fig.legends[0].get_texts()]
    for t in texts:
        if t.get_text():
            e = t.get_window_extent(r)
            assert box.x0 <= e.x0 and e.x1 <= box.x1 and box.y0 <= e.y0 and e.y1 <= box.y1, t.get_text()
    assert fig.legends[0].get_window_extent(r).y1 < ax.xaxis.label.get_window_extent(r).y0
    assert not ax.title.get_text() or ax.title.get_window_extent(r).y0 > ax.get_window_extent(r).y1


def test_grid_columns_leave_the_fewest_empty_slots():
    empty = lambda k, c: math.ceil(k / c) * c - k  # noqa: E731
    for k in range(1, 31):
        c = grid_columns(k)
        assert c >= 1 and c <= 4
        if k > 3:
            assert empty(k, c) == min(empty(k, cc) for cc in (2, 3, 4))
        else:
            assert empty(k, c) == 0
    assert grid_columns(9) == 3 and grid_columns(4) == 2
