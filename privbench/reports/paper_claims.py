"""The paper-claims table of a bench whose suite declares ``claims:``: each claim's numbers on both sides, read
from the selected cells' own files, and the verdict of :mod:`privbench.reports.claim_rule`. The files and their
columns: docs/benchmarks.md, "Reports".
"""
from __future__ import annotations

import html as _html
import math
from pathlib import Path

import pandas as pd

from ..bench.cell_schema import BenchCell, cells_of
from ..bench.paper_claims import SIDES, PaperClaim, claims_of_bench, select
from ..core.errors import BadInput
from ..core.io import atomic_path, atomic_write_text
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from .cells import metric_value, num, resolvable
from .claim_rule import CONFIDENCE, MAGNITUDE_FACTOR, paired, summarize, verdict
from .collect import cell_file, read_result
from .latex import escape

#: decimals a metric is shown with (FIDs are tens, rates are in [0, 1])
DECIMALS = {"fid": 1, "fid_heldout": 1}
#: a metric's name in the LaTeX table's narrow column
SHORT = {"auc": "AUC", "asr": "ASR", "tpr_at_1pct_fpr": "TPR@1%", "tpr_at_0_1pct_fpr": "TPR@0.1%", "fid": "FID",
         "kid": "KID", "fid_heldout": "FID (held-out)", "kid_heldout": "KID (held-out)", "downstream_accuracy": "acc.",
         "class_fidelity": "fidelity", "precision": "precision", "recall": "recall"}
#: the LaTeX columns: the claim and the two sides wrap inside a table* of a two-column page (469 pt wide)
_COLUMNS = r"p{0.24\linewidth}lp{0.1\linewidth}p{0.13\linewidth}p{0.13\linewidth}lp{0.1\linewidth}"
KEY = "paper_claims"
CAPTION = (f"Paper claims against privbench's numbers. Each side: the mean over seeds and its "
           f"{CONFIDENCE:.0%} t-interval over seeds (one seed: the result's own bootstrap CI, if it has one). "
           f"Reproduced: the subject beats the baseline in the paper's direction, the intervals do not overlap, and "
           f"the relative gap (subject - baseline)/baseline is within a factor {MAGNITUDE_FACTOR:g} of the paper's; "
           f"direction reproduced: the same without the magnitude (outside the factor, or no paper numbers); not "
           f"reproduced: intervals apart and the baseline wins; inconclusive at this n: the intervals overlap, or a "
           f"side is missing or has one seed and no CI. The paired per-seed difference (CSV and HTML) informs, it "
           f"does not decide.")


def _json(path: Path | None) -> dict:
    if path is None:
        return {}
    try:
        d = read_json(path, "", MAX_RECORD_BYTES)
    except BadInput as e:
        raise BadInput(f"{e} (a paper claim reads it)") from None
    return d if isinstance(d, dict) else {}


def _attack(claim: PaperClaim, c: BenchCell, base) -> dict:
    path = cell_file(c.result_path, base)
    if path is None:
        return {}
    r = read_result(path)
    n_non = r.n_nonmembers
    ci = (r.metrics.get("ci95") or {}).get(claim.metric) if resolvable(claim.metric, n_non) else None
    return {"value": metric_value(r.metrics, claim.metric, n_non), "ci": ci,
            "n": f"{r.n_members} members / {n_non} non-members",
            "why": None if resolvable(claim.metric, n_non) else f"{claim.metric} not resolvable with {n_non} "
                                                                   f"non-members"}


def _fid_value(rec: dict, classes: str, metric: str = "fid") -> dict:
    """The FID (or KID, or either against held-out records) of ``classes`` with its image counts."""
    gen = rec.get("n_generated")
    if metric.endswith("_heldout"):
        rec = {**(rec.get("heldout") or {}), "n_generated": gen}
    key = classes if metric.startswith("fid") else f"{classes}_kid"
    if key not in rec:
        return {"value": None, "ci": None, "n": None,
                "why": f"the FID record has no {metric} (the suite's fid: needs "
                       f"{'heldout: true' if metric.endswith('_heldout') else 'kid: true'})"}
    if classes == "overall":
        n_gen, n_real = rec.get("n_overall"), rec.get("n_real_overall")
    else:
        groups = ("majority", "minority") if classes == "average" else (classes,)
        gen, real = rec.get("n_generated") or {}, rec.get("n_real") or {}
        n_gen = sum(gen[g] for g in groups if g in gen) if gen else None
        n_real = sum(real[g] for g in groups if g in real) if real else None
    n = f"{n_gen} generated / {n_real} real" if n_gen is not None or n_real is not None else None
    return {"value": rec.get(key), "ci": None, "n": n}


#: utility metric → (section of the utility record, its key, the key of its CI or None)
UTILITY_FIELDS = {"downstream_accuracy": ("downstream", "accuracy", "ci"),
            "class_fidelity": ("class_fidelity", "class_fidelity", "ci"),
            "precision": ("precision_recall", "precision", None), "recall": ("precision_recall", "recall", None)}


def _utility(claim: PaperClaim, c: BenchCell, base) -> dict:
    rec = _json(cell_file(c.result_path, base))
    section, key, ci = UTILITY_FIELDS[claim.metric]
    part = rec.get(section) or {}
    n = (f"{part.get('n_test')} test records" if claim.metric == "downstream_accuracy"
         else f"{rec.get('n_samples')} samples" if rec.get("n_samples") is not None else None)
    return {"value": part.get(key), "ci": part.get(ci) if ci else None, "n": n}


def _observe(claim: PaperClaim, side: str, c: BenchCell, base) -> dict:
    """{value, ci, n, why} of one finished cell of ``claim``'s ``side``."""
    if claim.kind == "attack":
        return _attack(claim, c, base)
    if claim.kind == "fid":
        rec = _json(cell_file(c.result_path, base)) or {"overall": (c.summary or {}).get("overall")}
        return _fid_value(rec, getattr(claim, side).classes, claim.metric)
    return _utility(claim, c, base)


def _side(claim: PaperClaim, side: str, cells: list[BenchCell], base) -> tuple:
    """(Side, sample counts text, {seed: value}) of one side."""
    chosen = select(claim, side, cells)
    done = [c for c in chosen if c.status == "done"]
    obs = [_observe(claim, side, c, base) for c in done]
    by_seed = {c.seed: o.get("value") for c, o in zip(done, obs) if o.get("value") is not None}
    valued = [o for o in obs if o.get("value") is not None]
    why = ("no cell selected" if not chosen else f"{len(done)} of {len(chosen)} cells finished" if not done
           else next((o["why"] for o in obs if o.get("why")), "no value in its results"))
    s = summarize([o.get("value") for o in obs], valued[0].get("ci") if len(valued) == 1 else None, why,
                  (0.0, math.inf) if claim.kind == "fid" else (0.0, 1.0))
    counts = list(dict.fromkeys(o["n"] for o in valued if o.get("n")))
    return s, "; ".join(counts) or None, by_seed


def _paired_columns(pair, better: str) -> dict:
    """The CSV columns of the paired per-seed difference (empty when fewer than two seeds are shared)."""
    if pair is None:
        return {"paired_diff_mean": None, "paired_diff_ci_lo": None, "paired_diff_ci_hi": None, "paired_n_seeds": 0,
                "paired": None}
    return {"paired_diff_mean": pair.mean, "paired_diff_ci_lo": pair.lo, "paired_diff_ci_hi": pair.hi,
            "paired_n_seeds": pair.n_seeds, "paired": pair.text(better)}


def paper_claims_frame(bench: dict | None, base: Path | None = None) -> pd.DataFrame | None:
    """One row per claim of the bench (None when its suite has none)."""
    claims = claims_of_bench(bench)
    if not claims:
        return None
    cells = cells_of(bench)
    rows = []
    for claim in claims:
        sides = {side: _side(claim, side, cells, base) for side in SIDES}
        v = verdict(sides["subject"][0], sides["baseline"][0], claim.better, claim.paper_subject,
                    claim.paper_baseline)
        row = {"id": claim.id, "source": claim.source, "claim": claim.text, "metric": claim.metric,
               "better": claim.better, "subject": claim.subject.text(), "baseline": claim.baseline.text(),
               "paper_subject": claim.paper_subject, "paper_baseline": claim.paper_baseline,
               "paper_relative_gap": v.paper_gap}
        for side in SIDES:
            s, n, _ = sides[side]
            row.update({f"{side}_mean": s.mean, f"{side}_ci_lo": s.lo, f"{side}_ci_hi": s.hi,
                        f"{side}_ci_basis": s.basis, f"{side}_n_seeds": s.n_seeds, f"{side}_n": n})
        pair = paired(sides["subject"][2], sides["baseline"][2])
        row.update({"relative_gap": v.gap, **_paired_columns(pair, claim.better), "scale": claim.scale,
                    "verdict": v.verdict, "reason": v.reason})
        rows.append(row)
    return pd.DataFrame(rows)


def _decimals(metric: str, value) -> int:
    """A metric's decimals; a KID's follow its magnitude (4 significant digits), which depends on the extractor."""
    if metric.startswith("kid") and isinstance(value, (int, float)) and math.isfinite(value) and value != 0:
        return max(0, 3 - math.floor(math.log10(abs(value))))
    return DECIMALS.get(metric, 3)


def _value_text(r, side: str) -> str:
    """``mean [lo, hi]`` of one side (the one cell rule of reports/cells.py for a missing value)."""
    m, lo, hi = r[f"{side}_mean"], r[f"{side}_ci_lo"], r[f"{side}_ci_hi"]
    nd = _decimals(r["metric"], m)
    if pd.isna(m):
        return num(None)
    return num(m, nd) + ("" if pd.isna(lo) else f" [{num(lo, nd)}, {num(hi, nd)}]")


def _paper_text(r) -> str:
    nd = DECIMALS.get(r["metric"], 3)
    return f"{num(r['paper_subject'], nd)} / {num(r['paper_baseline'], nd)}"


def _arrow(better: str) -> str:
    return "↓" if better == "lower" else "↑"


def latex_float(df: pd.DataFrame, style: str = "single") -> str:
    """``tex/paper_claims.tex``: a booktabs float (``table*`` in the twocolumn style) whose caption states the rule."""
    env = "table*" if style == "twocolumn" else "table"
    # a table* of claims fits a two-column page only in \scriptsize, without the scale (kept in the CSV and HTML)
    size = r"\scriptsize" if style == "twocolumn" else r"\small"
    head = ["claim", "metric", "paper (subject / baseline)", "privbench subject", "privbench baseline", "seeds",
            "verdict"]
    lines = ["% privbench paper claims (generated; edit the claims in the suite, not here)",
             f"% privbench latex-style: {style}", rf"\begin{{{env}}}[tbp]", r"\centering", size,
             r"\setlength{\tabcolsep}{2.5pt}", r"\caption{" + escape(CAPTION) + "}",
             r"\label{tab:privbench-paper-claims}", r"\begin{tabular}{" + _COLUMNS + "}",
             r"\toprule", " & ".join(escape(h) for h in head) + r" \\", r"\midrule"]
    for _, r in df.iterrows():
        scale = ", " + escape(r["scale"]) if pd.notna(r["scale"]) and style != "twocolumn" else ""
        claim = (r"\textbf{" + escape(r["id"]) + "} " + escape(r["claim"]) + r" {\scriptsize(" + escape(r["source"])
                 + scale + ")}")
        arrow = r"$\downarrow$" if r["better"] == "lower" else r"$\uparrow$"
        cells = [claim, escape(SHORT[r["metric"]]) + " " + arrow, escape(_paper_text(r)),
                 escape(_value_text(r, "subject")), escape(_value_text(r, "baseline")),
                 f"{r['subject_n_seeds']} / {r['baseline_n_seeds']}", escape(r["verdict"])]
        lines.append(" & ".join(cells) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}", rf"\end{{{env}}}"]
    return "\n".join(lines) + "\n"


def html_section(df: pd.DataFrame, figure: str | None = None) -> str:
    """The HTML section: the rule, one row per claim, then the figure (a path relative to the report) if drawn."""
    head = ["claim", "metric", "paper subject / baseline", "privbench subject", "privbench baseline", "verdict",
            "why"]
    body = ""
    for _, r in df.iterrows():
        claim = (f"<b>{_html.escape(str(r['id']))}</b> {_html.escape(str(r['claim']))}<br><small>"
                 f"{_html.escape(str(r['source']))}"
                 + (f"; {_html.escape(str(r['scale']))}" if pd.notna(r["scale"]) else "") + "</small>")
        sides = []
        for side in SIDES:
            n = r[f"{side}_n"]
            sides.append(f"{_html.escape(str(r[side]))}: {_html.escape(_value_text(r, side))}<br><small>"
                         f"{r[f'{side}_n_seeds']} seed(s)" + (f"; n = {_html.escape(str(n))}" if pd.notna(n) else "")
                         + "</small>")
        cells = [claim, _html.escape(f"{r['metric']} {_arrow(r['better'])}"), _html.escape(_paper_text(r)), *sides,
                 f"<b>{_html.escape(str(r['verdict']))}</b>", _html.escape(str(r["reason"]))
                 + (f"<br><small>{_html.escape(str(r['paired']))}</small>" if pd.notna(r["paired"]) else "")]
        body += "<tr>" + "".join(f"<td>{c}</td>" for c in cells) + "</tr>"
    return (f"<p class=\"note\">{_html.escape(CAPTION)}</p><table><thead><tr>"
            + "".join(f"<th>{_html.escape(h)}</th>" for h in head) + f"</tr></thead><tbody>{body}</tbody></table>"
            + (f'<figure><img src="{_html.escape(figure)}" alt="each claim: subject and baseline with their 95 % '
               f'intervals, and the paired difference" style="max-width:100%"><figcaption class="note">Each claim: '
               f'subject and baseline (mean, 95 % t-interval over seeds) and, below, the paired per-seed difference '
               f'with its interval (dotted: 0).</figcaption></figure>' if figure else ""))


def write_paper_claims(bench: dict | None, out: Path, formats: list[str], latex_style: str = "single",
                       base: Path | None = None) -> tuple[list[Path], str | None]:
    """Write a bench's claims table and figure; returns (files, HTML section or None). ``base``: the bench dir."""
    df = paper_claims_frame(bench, base)
    if df is None:
        return [], None
    written = []
    if "csv" in formats:
        p = out / f"{KEY}.csv"
        with atomic_path(p) as tmp:
            df.to_csv(tmp, index=False, float_format="%.6g")
        written.append(p)
    if "latex" in formats:
        p = out / "tex" / f"{KEY}.tex"
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, latex_float(df, latex_style))
        written.append(p)
    figure = None
    if {"html", "latex", "markdown"} & set(formats):
        from .claims_figure import write_claims_figure  # lazy: matplotlib only when a report draws figures

        files = write_claims_figure(df, out)
        written += files
        figure = next((f.relative_to(out).as_posix() for f in files if f.suffix == ".png"), None)
    return written, html_section(df, figure) if "html" in formats else None
