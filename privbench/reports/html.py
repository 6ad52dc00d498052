"""One self-contained HTML page (jinja2, autoescaped): every figure is an embedded base64 PNG, the CSS is inline,
there is no script and no external URL, so the file can be mailed, committed or opened offline."""
from __future__ import annotations

import base64
import datetime as _dt
import platform
import tempfile
from pathlib import Path

from ..core.io import safe_name
from ..core.provenance import git_info, version
from ..attacks.base import MEMORIZATION, RECONSTRUCTION
from .collect import Result
from .order import target_rank
from .tables import Tables, fmt, fmt_ci

TEMPLATES = Path(__file__).parent / "templates"


def png_data_uri(path: str | Path) -> str:
    return "data:image/png;base64," + base64.b64encode(Path(path).read_bytes()).decode("ascii")


def _roc_figures(tables: Tables, tmp: Path) -> list[dict]:
    """One log-log ROC per target, every membership attack overlaid (from the scores files)."""
    from ..metrics.plots import plot_roc

    figs = []
    for i, b in enumerate(tables.targets()):
        curves = {}
        for a in b["attacks"]:
            r: Result = a["result"]
            try:
                s, y = r.load_scores()
            except Exception:  # noqa: BLE001 - a missing scores file drops the curve, not the report
                continue
            curves[a["attack"]] = (s, y)
        if not curves:
            continue
        title = f"{b['method']}/{b['target']} ({b['dataset']}, seed {b['seed']})"
        p = plot_roc(curves, tmp / f"roc-{i}.png", title=title)
        figs.append({"title": title, "src": png_data_uri(p), "role": b["role"],
                     "n": ", ".join(f"{k}" for k in curves)})
    return figs


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
        out += sorted(found, key=lambda s: target_rank(s["method"], s["target"]))
    return out


def _attack_grids(tables: Tables, kind: str) -> list[dict]:
    out = []
    for b in tables.targets():
        entry = b.get(kind)
        if not entry:
            continue
        r: Result = entry["result"]
        imgs = []
        for name in sorted((r.get("artifacts") or {})):
            if name == "roc":
                continue
            p = r.artifact(name)
            if p is not None and p.suffix == ".png":
                imgs.append({"name": name, "src": png_data_uri(p)})
        fig = r.get("figures") or {}
        out.append({"method": b["method"], "target": b["target"], "dataset": b["dataset"], "seed": b["seed"],
                    "metrics": r.metrics, "figures": fig, "images": imgs, "notes": r.get("notes") or [],
                    "caption": fig.get("grid", "")})
    return out


def _upload_audits(tables: Tables) -> list[dict]:
    from .audit import upload_audit_for, upload_mechanism_of

    out, seen = [], set()
    for r in tables.results:
        if r.formal_epsilon is not None and upload_mechanism_of(r) is not None:
            key = str(r.run_dir)
            if key in seen:
                continue
            seen.add(key)
            d = float((r.privacy or {}).get("delta") or 1e-5)
            ua = upload_audit_for(r, delta=d, confidence=0.95)
            if ua:
                out.append({"run": r.run_dir.name, "dataset": r.dataset, "seed": r.seed, **ua})
    return out


def render_html(tables: Tables, out_path: Path, *, title: str, source: str, bench: dict | None = None) -> Path:
    import jinja2
    import numpy as np
    import torch

    from ..core.io import atomic_write_text

    env = jinja2.Environment(loader=jinja2.FileSystemLoader(str(TEMPLATES)), autoescape=True,
                             undefined=jinja2.ChainableUndefined, trim_blocks=True, lstrip_blocks=True)
    env.filters["f"] = fmt
    env.filters["ci"] = fmt_ci
    with tempfile.TemporaryDirectory() as tmp:
        rocs = _roc_figures(tables, Path(tmp))
    targets = tables.targets()
    audit = tables.audit_frame()
    prov = tables.provenance_frame()
    fids = tables.fid_frame()
    extractors = sorted({str(x) for x in fids["extractor"].dropna()}) if len(fids) else []
    git = git_info()
    flags = [b for b in targets if b["exceeds_formal"]]
    ups = _upload_audits(tables)
    flags_up = [u for u in ups if u["exceeds_analytic"]]
    cp_example = next((a["audit"]["cp"] for b in targets for a in b["attacks"] if a["audit"]), None)
    one_example = next((a["audit"]["one_run"] for b in targets for a in b["attacks"] if a["audit"]), None)
    ctx = {
        "title": title, "source": source, "bench": bench or {},
        "generated": _dt.datetime.now(_dt.timezone.utc).strftime("%Y-%m-%d %H:%M UTC"),
        "version": version(), "git": git, "python": platform.python_version(), "torch": torch.__version__,
        "numpy": np.__version__,
        "targets": targets, "n_results": len(tables.results),
        "methods": sorted({b["method"] for b in targets}),
        "audit_rows": _records(audit),
        "cp_example": cp_example, "one_example": one_example,
        "upload_audits": ups, "flags": flags, "flags_up": flags_up,
        "rocs": rocs, "samples": _sample_grids(tables),
        MEMORIZATION: _attack_grids(tables, MEMORIZATION),  # the template's names for these sections
        RECONSTRUCTION: _attack_grids(tables, RECONSTRUCTION),
        "accountant": _records(tables.accountant_frame()),
        "fids": _records(fids), "extractors": extractors,
        "provenance": _records(prov),
        "runs": _runs(tables),
        "warnings": [(r.label(), w) for r in tables.sorted_results() for w in (r.get("warnings") or [])],
        "notes": [(r.label(), n) for r in tables.sorted_results() for n in (r.get("notes") or [])],
    }
    html = env.get_template("report.html").render(**ctx)
    atomic_write_text(out_path, html)
    return out_path


def _records(df) -> list[dict]:
    """DataFrame rows as dicts with NaN → None (so the template shows "–", not "nan")."""
    import pandas as pd

    if df is None or not len(df):
        return []
    return df.astype(object).where(pd.notna(df), None).to_dict("records")


def _runs(tables: Tables) -> list[dict]:
    out, seen = [], set()
    for r in tables.sorted_results():
        if str(r.run_dir) in seen:
            continue
        seen.add(str(r.run_dir))
        cfg = r.config or {}
        tr = cfg.get("train") or {}
        out.append({"run": r.run_dir.name, "method": r.method, "dataset": r.dataset, "preset": r.preset,
                    "seed": r.seed, "config_hash": r.config_hash, "train_steps": tr.get("steps"),
                    "n_members": (cfg.get("data") or {}).get("n_members"),
                    "settings": _provenance_settings(r.method, cfg)})
    return out


def _provenance_settings(method: str, cfg: dict) -> dict | None:
    """The config keys a method asks to show beside its runs (``provenance_keys``)."""
    from ..core.registry import METHODS

    if method not in METHODS:
        return None
    keys = METHODS.get(method).factory.provenance_keys
    out = {}
    for key in keys:
        sec, _, name = key.partition(".")
        out[key] = (cfg.get(sec) or {}).get(name)
    return out or None
