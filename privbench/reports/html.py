"""One self-contained HTML page (jinja2, autoescaped; inline CSS, embedded figures, no script, no external URL),
so the file can be mailed, committed or opened offline; its sections: docs/benchmarks.md, "Reports"."""
from __future__ import annotations

import base64
import datetime as _dt
import platform
import re
import tempfile
from pathlib import Path

import jinja2
import numpy as np
import pandas as pd

from ..core.constants import DEFAULT_DELTA, MEMORIZATION, RECONSTRUCTION
from ..core.io import atomic_write_text, safe_name
from ..core.provenance import git_info, package_version, version
from ..core.registry import entry_attribute, has_entry
from ..metrics.roc import INVERTED_NOTE, is_inverted
from ..privacy.compare import KIND_TEXT
from ..runs.result_schema import OUTSIDE
from .audit import upload_audit_for, upload_mechanism_of
from .cells import text as cell_text
from .coincide import coinciding
from .collect import Result, released_start_weight
from .figures import grid_columns, write_roc_figures
from .headline import RULE
from .order import target_rank
from .present import (
    FPR_OF,
    TPR_RULE_LT,
    Footnotes,
    audit_verdict,
    basis_text,
    resolvable,
    seeds_table,
    tpr_header,
    unresolvable_reason,
)
from .tables import Tables, fmt, fmt_ci, rel

TEMPLATES = Path(__file__).parent / "templates"
#: what a target is, in the side-by-side table's pill: a model privbench did not train is never a baseline
ROLE_LABELS = {"private": "private", "baseline": "non-private baseline",
               OUTSIDE: "external model (trained outside privbench)"}


def png_data_uri(path: str | Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def figure_data_uri(files: list[Path]) -> str:
    """The SVG of a figure when it was written (it scales to any width without blur or distortion), else its PNG."""
    svg = next((Path(f) for f in files if Path(f).suffix == ".svg"), None)
    if svg is not None and svg.is_file():
        return "data:image/svg+xml;base64," + base64.b64encode(svg.read_bytes()).decode("ascii")
    return png_data_uri(next(Path(f) for f in files if Path(f).suffix == ".png"))


def _roc_entries(figures: dict | None) -> tuple[list[dict], list[dict], list[dict]]:
    """The per-target ROC figures, the by-attack grids and each attack's single panel as embeddable entries."""
    if not figures:
        return [], [], []
    per = [{"title": f["title"], "role": f["role"], "src": figure_data_uri(f["files"]),
            "files": [p.name for p in f["files"]]} for f in figures["per_target"]]
    by = [{"title": f["title"], "files": [p.name for p in f["files"]], "attacks": f["attacks"]}
          for f in figures["by_attack"]]
    single = [{"title": f["title"], "src": figure_data_uri(f["files"]), "files": [p.name for p in f["files"]]}
              for f in figures.get("per_attack", [])]
    return per, by, single


def side_by_side_columns(targets: list[dict]) -> dict[str, bool]:
    """Which optional columns of the side-by-side table have a value in some row (the others are left out)."""
    # the claimed / conditional ε column: any claim that is not formal (conditional, by a paper, by the user)
    return {"conditional": any((b.get("claim") or {}).get("kind") not in (None, "formal") for b in targets),
            "memorized": any(b.get(MEMORIZATION) for b in targets),
            "reid": any(b.get(RECONSTRUCTION) for b in targets),
            "fid": any(b.get("fid") for b in targets)}


def _annotate(targets: list[dict]) -> Footnotes:
    """Footnote marks of the side-by-side table: each target's ε basis, each unresolvable TPR's reason, and why two
    rows of one attack have identical scores."""
    notes = Footnotes()
    same = {(a, m, t): note for a, rows, note in coinciding(
        [(a["attack"], b["method"], b["target"], (b["dataset"], b["seed"]), a["result"].scores_file)
         for b in targets for a in b["attacks"]]) for m, t in rows}
    for b in targets:
        b["eps_mark"] = notes.mark(basis_text(b.get("privacy"), b["role"]))
        for a in b["attacks"]:
            n = a["result"].n_nonmembers
            a["na"] = {m: notes.mark(unresolvable_reason(m, n)) for m in FPR_OF if not resolvable(m, n)}
            a["rule_mark"] = notes.mark(TPR_RULE_LT) if a["result"].tpr_rule == "lt" else None
            why = same.get((a["attack"], b["method"], b["target"]))
            a["same_mark"] = notes.mark(why) if why else None
    return notes


def _sample_grids(tables: Tables) -> list[dict]:
    """samples*.png in every run directory, labelled with the target they were drawn from."""
    out, seen = [], set()
    for b in tables.targets():
        rd = Path(b["run_dir"])
        if rd in seen:
            continue
        seen.add(rd)
        names = {safe_name(t["target"]): t["target"] for t in tables.targets() if t["run_dir"] == b["run_dir"]}
        found = []
        for f in sorted(rd.glob("samples*.png")):
            stem = f.stem[len("samples"):].lstrip("-_")
            tgt = names.get(stem, stem or "default target")
            found.append({"method": b["method"], "target": tgt, "dataset": b["dataset"], "seed": b["seed"],
                          "src": png_data_uri(f), "file": f.name, "role": b["role"]})
        out += sorted(found, key=lambda s: target_rank(b["registered_method"], s["target"]))
    return out


def _attack_grids(tables: Tables, kind: str) -> list[dict]:
    out = []
    for b in tables.targets():
        entry = b.get(kind)
        if not entry:
            continue
        r: Result = entry["result"]
        imgs = []
        for name in sorted(r.artifacts):
            if name == "roc":
                continue
            p = r.artifact(name)
            if p is not None and p.suffix == ".png":
                imgs.append({"name": name, "src": png_data_uri(p)})
        fig = r.figures or {}
        out.append({"method": b["method"], "target": b["target"], "dataset": b["dataset"], "seed": b["seed"],
                    "metrics": r.metrics, "figures": fig, "images": imgs, "notes": r.notes,
                    "caption": fig.get("grid", "")})
    return out


def _upload_audits(tables: Tables) -> list[dict]:
    out, seen = [], set()
    for r in tables.results:
        if r.formal_epsilon is not None and upload_mechanism_of(r) is not None:
            key = str(r.run_dir)
            if key in seen:
                continue
            seen.add(key)
            d = float(r.privacy.delta or DEFAULT_DELTA)
            ua = upload_audit_for(r, delta=d, confidence=0.95)
            if ua:
                out.append({"run": r.run_dir.name, "dataset": r.dataset, "seed": r.seed, **ua})
    return out


def render_html(tables: Tables, out_path: Path, *, title: str, source: str, bench: dict | None = None,
                targets: list[dict] | None = None, figures: dict | None = None, banner: str | None = None,
                files: list[str] = (), lead_sections=()) -> Path:
    """The page; ``lead_sections`` ((id, title, HTML) each: paper claims, privacy–utility) come first."""
    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["f"] = fmt
    env.filters["ci"] = fmt_ci
    env.filters["v"] = cell_text  # names, hashes, counts: "–" when missing, never "None"
    env.filters["inverted"] = is_inverted
    env.globals["inverted_note"] = INVERTED_NOTE
    targets = tables.targets() if targets is None else targets
    if figures is None:
        with tempfile.TemporaryDirectory() as tmp:
            figures = write_roc_figures(targets, Path(tmp), formats=("svg",))
            rocs, rocs_by_attack, rocs_per_attack = _roc_entries(figures)
    else:
        rocs, rocs_by_attack, rocs_per_attack = _roc_entries(figures)
    sbs_notes = _annotate(targets)
    show = side_by_side_columns(targets)
    seeds = seeds_table(targets)
    audit = tables.audit_frame()
    prov = tables.provenance_frame()
    fids = tables.fid_frame()
    extractors = sorted({str(x) for x in fids["extractor"].dropna()}) if len(fids) else []
    git = git_info()
    flags = [b for b in targets if b["exceeds_claim"]]
    ups = _upload_audits(tables)
    flags_up = [u for u in ups if u["exceeds_analytic"]]
    cp_example = next((a["audit"]["cp"] for b in targets for a in b["attacks"] if a["audit"]), None)
    one_example = next((a["audit"]["one_run"] for b in targets for a in b["attacks"] if a["audit"]), None)
    recon = _attack_grids(tables, RECONSTRUCTION)
    toc = [(i, n) for i, n, _ in lead_sections] + [("table", "Side by side")] + ([("seeds", "Across seeds")] if seeds else []) + [
        ("audit", "Empirical ε audit")] + ([("roc-attacks", "ROC by attack, across targets")] if rocs_by_attack
                                           else []) + [
        ("roc", "ROC per target"), ("samples", "Samples"), (MEMORIZATION, "Memorization")] + (
        [(RECONSTRUCTION, "Reconstruction from uploads")] if recon else []) + [
        ("accountant", "Accountant summary")] + ([("fid", "FID")] if len(fids) else []) + (
        [("files", "Files: LaTeX, Markdown, figures")] if files else []) + [
        ("provenance", "Provenance"), ("warnings", "Warnings and notes")]
    ctx = {
        "title": title, "source": source, "bench": bench or {}, "toc": toc, "lead_sections": list(lead_sections),
        "suite_file": Path(str((bench or {}).get("suite_path") or "")).name,
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "version": version(), "git": git, "python": platform.python_version(), "torch": package_version("torch"),
        "numpy": np.__version__,
        "targets": targets, "n_results": len(tables.results), "show": show,
        "only_outside": bool(targets) and all(b.get("model") for b in targets),
        "methods": sorted({b["method"] for b in targets}),
        "audit_rows": [dict(r, verdict=audit_verdict(r)) for r in _records(audit)],
        "role_labels": ROLE_LABELS, "split_rows": _records(tables.split_check_frame()),
        "cp_example": cp_example, "one_example": one_example, "kind_text": KIND_TEXT, "headline_rule": RULE,
        "headlines": list({id(b["headline"]): b["headline"] for b in targets if b.get("headline")}.values()),
        "upload_audits": ups, "flags": flags, "flags_up": flags_up,
        "rocs": rocs, "rocs_by_attack": rocs_by_attack, "roc_columns": grid_columns(len(rocs)),
        "rocs_per_attack": rocs_per_attack, "attack_columns": grid_columns(len(rocs_per_attack)),
        "sbs_notes": sbs_notes.items(), "tpr_headers": [tpr_header(targets, "1%"), tpr_header(targets, "0.1%")],
        "seeds": seeds, "banner": banner, "files": list(files),
        "samples": _sample_grids(tables),
        MEMORIZATION: _attack_grids(tables, MEMORIZATION),
        RECONSTRUCTION: recon,
        "accountant": _records(tables.accountant_frame()),
        "fids": _records(fids), "extractors": extractors,
        "provenance": _records(prov),
        "runs": _runs(tables),
        "warnings": [(r.label(), portable(w, tables.base)) for r in tables.sorted_results()
                     for w in r.warnings],
        "notes": [(r.label(), portable(n, tables.base)) for r in tables.sorted_results()
                  for n in r.notes],
    }
    html = env.get_template("report.html").render(**ctx)
    atomic_write_text(out_path, html)
    return out_path


_ABSOLUTE = re.compile(r"(?<![\w.])/[^\s:;,()'\"]+")


def portable(text, base) -> str:
    """A note or warning with every absolute path that exists on this machine rewritten relative to ``base``."""
    def sub(m):
        return rel(m.group(0), base) if Path(m.group(0)).exists() else m.group(0)

    return _ABSOLUTE.sub(sub, str(text))


def _records(df) -> list[dict]:
    """DataFrame rows as dicts with NaN → None (so the template shows "–", not "nan")."""
    if df is None or not len(df):
        return []
    return df.astype(object).where(pd.notna(df), None).to_dict("records")


def _start_weights(run_dir, targets: list[str]) -> str | None:
    """The start weight of each target's networks ("0.0100", or "student 0.0100 · teacher 0.0183" where the
    run's targets differ: a DP-SAD teacher is never released)."""
    w = {t: released_start_weight(run_dir, t) for t in dict.fromkeys(targets)}
    vals = {v for v in w.values() if v is not None}
    if not vals:
        return None
    if len(vals) == 1:
        return f"{vals.pop():.4f}"
    return " · ".join(f"{t} {v:.4f}" for t, v in w.items() if v is not None)


def _runs(tables: Tables) -> list[dict]:
    out, seen = [], set()
    targets: dict[str, list[str]] = {}
    for r in tables.sorted_results():
        targets.setdefault(str(r.run_dir), []).append(r.target)
    for r in tables.sorted_results():
        if str(r.run_dir) in seen:
            continue
        seen.add(str(r.run_dir))
        cfg = r.config or {}
        tr = cfg.get("train") or {}
        out.append({"run": r.run_dir.name, "method": r.method_label, "dataset": r.dataset, "preset": r.preset,
                    "seed": r.seed, "config_hash": r.config_hash, "train_steps": tr.get("steps"),
                    "n_members": (cfg.get("data") or {}).get("n_members"),
                    "ema_start_weight": _start_weights(r.run_dir, targets[str(r.run_dir)]),
                    "settings": _provenance_settings(r.method, cfg)})
    return out


def _provenance_settings(method: str, cfg: dict) -> dict | None:
    """The config keys a method asks to show beside its runs (``provenance_keys``)."""
    if not has_entry("METHODS", method):
        return None
    keys = entry_attribute("METHODS", method, "provenance_keys")
    out = {}
    for key in keys:
        sec, _, name = key.partition(".")
        out[key] = (cfg.get(sec) or {}).get(name)
    return out or None
