"""Text output: the result tables ``attack``/``run``/``bench`` print, a run's ``report.md``, and the bench's CSV
tables (docs/cli.md)."""
from __future__ import annotations

import io
from pathlib import Path

from ..bench.cell_schema import cells_of
from ..core.constants import MEMBERSHIP, MEMORIZATION, RECONSTRUCTION
from ..core.io import atomic_path, atomic_write_json, atomic_write_text
from ..core.jsonio import MAX_RECORD_BYTES, read_json
from ..metrics.roc import INVERTED_NOTE, is_inverted
from ..privacy.claims import KIND_LABEL, claim_of, formal_epsilon
from ..runs.result_schema import AttackResult, PrivacyClaim, Provenance
from . import render_report
from .cells import NA_TEXT, NONE_TEXT, ci, metric_text, num, resolvable
from .coincide import coinciding
from .collect import read_cell_result

ORACLE = "oracle (chosen on evaluation labels)"


def write_run_report(result: dict) -> dict:
    """``privbench run``'s per-run report: report.md beside the result and in the run directory, and the HTML/CSV
    report under ``<run_dir>/report``. Returns the paths written (and a rendering error, if any)."""
    run_dir = Path(result["run_dir"])
    out_dir = Path(result["scores_path"]).parent
    text = report_markdown(result)
    paths: dict = {}
    for d in (out_dir, run_dir):
        try:
            atomic_write_text(d / "report.md", text)
            paths.setdefault("markdown", str(d / "report.md"))
        except OSError:
            pass
    try:
        produced = render_report(str(run_dir), str(run_dir / "report"), ["html", "csv"])
        paths["rendered"] = [str(p) for p in (produced or [])]
    except Exception as e:  # noqa: BLE001 — the report is a convenience; the attack result stands
        paths["rendered_error"] = f"{type(e).__name__}: {e}"
    return paths


def report_markdown(result: dict) -> str:
    r = result
    lines = [f"# {r['attack']} on {r['method']}/{r['target']} ({r['dataset']}, preset {r['preset']}, seed {r['seed']})",
             "", f"Run directory: `{r['run_dir']}`  ", f"Scores: `{r['scores_path']}`", ""]
    lines += ["```", format_table([r], detailed=True), "```", ""]
    res = AttackResult.from_json(result)
    c = claim_of(res.privacy)
    if c and c["kind"] == "formal":
        lines.append(f"Formal guarantee: epsilon = {c['epsilon']:.4g} at delta = {c['delta']} ({c['basis']}).")
    elif c:
        lines.append(f"Formal guarantee: none. {KIND_LABEL[c['kind']].replace('ε', 'epsilon')}: {c['epsilon']:.4g} "
                     f"at delta = {c['delta']} ({c['basis']}); not a guarantee.")
    elif res.is_outside:
        lines.append("Formal guarantee: none claimed (a model trained outside privbench; its training's own "
                     "accounting, if any, is not known here).")
    else:
        lines.append("Formal guarantee: none (non-private target).")
    lines.append("")
    lines.append("Convention: members are the positive class; a higher score means more likely a member. "
                 "ASR and TPR@FPR pick thresholds on the evaluation labels (oracle); the calibrated figures pick "
                 "direction and thresholds on one half and report the other.")
    for k, v in (r.get("artifacts") or {}).items():
        lines.append(f"- {k}: `{v}`")
    return "\n".join(lines) + "\n"


# ---------------------------------------------------------------------- table

def _f(v, nd=3) -> str:
    return num(v, nd)


def _ci(c) -> str:
    """`` [lo,hi]`` after a value (the one rule of :mod:`.cells`), or "" without an interval."""
    text = ci(c, 2)
    return f" {text}" if text else ""


def _eps(r: dict) -> str:
    """The formal ε only; a claimed or conditional ε is never shown as one (privbench.privacy.claims)."""
    e = formal_epsilon(_privacy(r))
    return "none" if e is None else f"{e:.3g}"


def _privacy(r: dict) -> PrivacyClaim | None:
    """A printed result's ``privacy`` object, typed (as privbench.privacy.claims reads it)."""
    return None if r.get("privacy") is None else PrivacyClaim.from_json(r["privacy"], "privacy")


def _tpr(m: dict, key: str, n_nonmembers) -> str:
    """A TPR at a fixed FPR, or "n/a" when the non-member count cannot resolve that FPR (FPR < 1/n)."""
    return metric_text(m, key, n_nonmembers)


def _tpr_ci(m: dict, key: str, n_nonmembers) -> str:
    """A TPR with its interval, or "n/a" alone."""
    if not resolvable(key, n_nonmembers):
        return NA_TEXT
    return _f(m.get(key)) + _ci((m.get("ci95") or {}).get(key))


def _one_line(r: dict) -> str:
    m = r.get("metrics") or {}
    if r.get("kind", MEMBERSHIP) == MEMBERSHIP:
        return (f"AUC {_f(m.get('auc'))}{_ci((m.get('ci95') or {}).get('auc'))} ASR {_f(m.get('asr'))} "
                f"TPR@1% {_tpr(m, 'tpr_at_1pct_fpr', r.get('n_nonmembers'))} "
                f"TPR@0.1% {_tpr(m, 'tpr_at_0_1pct_fpr', r.get('n_nonmembers'))}")
    if r.get("kind") == MEMORIZATION:
        return f"memorized {_f(m.get('memorized_fraction'))} of {m.get('n_generated')} samples"
    if r.get("kind") == "extraction":
        return (f"extracted {m.get('n_extracted')} training records from {m.get('n_generated')} samples (clique "
                f"filter: {m.get('n_extracted_clique', NA_TEXT)} records, {m.get('n_candidates')} candidates, "
                f"precision {_f(m.get('filter_precision'))})")
    return (f"best {m.get('best_attacker')}: re-id {_f(m.get('reid_rate'))} (chance {_f(m.get('reid_chance'), 4)}) "
            f"PSNR {_f(m.get('psnr'), 2)} dB SSIM {_f(m.get('ssim'))}")


def _label(r: dict) -> str:
    """The attack as run: its name with the variant (``clid@vec``), so two variants' rows read apart."""
    return r.get("label") or r["attack"]


def _membership_rows(mem: list[dict], out: io.StringIO) -> None:
    lt = all(r.get("tpr_rule") == "lt" for r in mem)  # FPR < x: the label says so (mixed: the footnotes)
    width = max([7] + [len(_label(r)) for r in mem])
    hdr = (f"{'target':24s} {'attack':{width}s} {'AUC [95% CI]':19s} {'ASR':>5s}  "
           f"{'TPR@<1% [95% CI]' if lt else 'TPR@1% [95% CI]':19s} "
           f"{'TPR@<.1%' if lt else 'TPR@.1%':>7s}  {'calib AUC':>9s}  {'epsilon':>7s}")
    out.write(hdr + "\n" + "-" * len(hdr) + "\n")
    for r in mem:
        m = r["metrics"]
        cis = m.get("ci95") or {}
        cal = r.get("calibrated") or {}
        cal_s = f"{_f(cal.get('auc'), 2)}({'+' if cal.get('direction', 1) > 0 else '-'})" if cal else NONE_TEXT
        out.write(f"{(r['method'] + '/' + r['target'])[:24]:24s} {_label(r):{width}s} "
                  f"{_f(m['auc']) + _ci(cis.get('auc')):19s} {_f(m['asr'], 2):>5s}  "
                  f"{_tpr_ci(m, 'tpr_at_1pct_fpr', r.get('n_nonmembers')):19s} "
                  f"{_tpr(m, 'tpr_at_0_1pct_fpr', r.get('n_nonmembers')):>7s}  {cal_s:>9s}  {_eps(r):>7s}\n")


def _notes(results: list[dict]) -> list[str]:
    """The lines under the table: claims, ranges, TPR rules, inverted AUCs, each warning once with its attacks."""
    lines = []
    for r in results:
        c = claim_of(_privacy(r))
        if c:
            lines.append(f"  {KIND_LABEL[c['kind']].replace('ε', 'epsilon')} of {r['method']}/{r['target']}: "
                         f"{c['epsilon']:.3g} at delta {c['delta']} ({c['basis']})")
    for r in results:
        rr = r.get("records_range") or {}
        if rr.get("range"):  # an outside target's records: the pixel range decides its scores
            lines.append(f"  records of {r['method']}/{r['target']}: range {rr['range']} "
                         f"({rr.get('encoding', '?')}; --records-range {rr.get('requested', 'auto')})")
    lines += [f"  TPR of {_label(r)}: at FPR < x (metrics.tpr_rule=lt, Carlini et al.'s LiRA code), not <= x"
              for r in results if r.get("tpr_rule") == "lt"]
    for r in results:
        m = r.get("metrics") or {}
        if r.get("kind", MEMBERSHIP) == MEMBERSHIP and is_inverted(m.get("auc"), (m.get("ci95") or {}).get("auc")):
            lines.append(f"  ! {_label(r)} on {r['method']}/{r['target']}: AUC {_f(m.get('auc'))}: {INVERTED_NOTE}")
    raised: dict[str, list[str]] = {}
    for r in results:
        for w in r.get("warnings") or []:
            who = raised.setdefault(w, [])
            if _label(r) not in who:
                who.append(_label(r))
    lines += [f"  ! {', '.join(who)}: {w}" for w, who in raised.items()]
    return list(dict.fromkeys(lines))  # one line once: several attacks on one target share its claim and records


def format_table(results: list[dict], detailed: bool = False) -> str:
    """One screen: target, attack, AUC [CI], ASR, TPR@1% [CI], TPR@0.1%, calibrated AUC/direction, ε; warnings.
    Memorization and reconstruction show their own figures. ``detailed`` adds sweeps, calibration, notes."""
    out = io.StringIO()
    mem = [r for r in results if r.get("kind", MEMBERSHIP) == MEMBERSHIP]
    if mem:
        _membership_rows(mem, out)
    for r in results:
        if r.get("kind", MEMBERSHIP) != MEMBERSHIP:
            out.write(f"{(r['method'] + '/' + r['target'])[:24]:24s} {_label(r):14s} {_one_line(r)}"
                      f"   epsilon {_eps(r)}\n")
    for line in _notes(results):
        out.write(line + "\n")
    for _attack, _rows, note in coinciding([(r["attack"], r["method"], r["target"], (r.get("dataset"), r.get("seed")),
                                             r.get("scores_path")) for r in mem]):
        out.write(f"  note: {note}\n")
    if detailed:
        for r in results:
            out.write(_details(r))
    return out.getvalue().rstrip("\n")


def _details(r: dict) -> str:
    out = io.StringIO()
    out.write(f"\n{r['attack']} on {r['method']}/{r['target']} ({r['dataset']}, preset {r['preset']}, seed {r['seed']}): "
              f"{r['n_members']} members / {r['n_nonmembers']} non-members\n")
    cfg = r.get("attack_config") or {}
    if cfg:
        out.write("  settings: " + ", ".join(f"{k}={v}" for k, v in cfg.items()) + "\n")
    cal = r.get("calibrated")
    if cal:
        t1 = cal.get("tpr_at_1pct_fpr") or {}
        out.write(f"  calibrated (threshold and direction chosen on half the records, reported on the other half): "
                  f"AUC {_f(cal.get('auc'))}, direction {cal.get('direction'):+d}, balanced accuracy "
                  f"{_f(cal.get('accuracy'))}, TPR {_f(t1.get('tpr'))} at realised FPR {_f(t1.get('fpr'))} "
                  f"(target 1%)\n")
    sw = r.get("sweep")
    if sw:
        out.write(f"  timestep sweep — {ORACLE}:\n")
        out.write(f"    {'t':>5s} {'AUC':>6s} {'ASR':>6s} {'TPR@1%':>7s} {'TPR@.1%':>7s}\n")
        for row in sw["per_t"]:
            out.write(f"    {row['t']:5d} {row['auc']:6.3f} {row['asr']:6.3f} {row['tpr_at_1pct_fpr']:7.3f} "
                      f"{row['tpr_at_0_1pct_fpr']:7.3f}\n")
        b = sw["best"]
        out.write(f"    best t = {b['t']} ({b['selection']}): AUC {_f(b['metrics']['auc'])}"
                  f"{_ci((b['metrics'].get('ci95') or {}).get('auc'))}\n")
    fig = r.get("figures") or {}
    if r.get("kind") == RECONSTRUCTION and fig.get("attackers"):
        out.write(f"  uploads: {fig.get('uploads')} at t0={fig.get('t0')}, C={fig.get('clip')}, sigma={fig.get('sigma'):.2f}; "
                  f"pool {fig.get('pool')}; chance {fig.get('reid_chance'):.4f} "
                  f"(same label: {fig.get('reid_chance_label'):.4f})\n")
        out.write(f"    {'attacker':18s} {'re-id':>6s} {'re-id|label':>11s} {'PSNR':>6s} {'SSIM':>6s} {'NFE':>5s}\n")
        for name, a in fig["attackers"].items():
            out.write(f"    {name:18s} {a['reid_rate']:6.3f} {a['reid_rate_label']:11.3f} {a['psnr']:6.2f} "
                      f"{a['ssim']:6.3f} {a['nfe']:5d}\n")
    if r.get("kind") == MEMORIZATION:
        out.write(f"  {fig.get('n_memorized')} of {r['metrics'].get('n_generated')} samples memorized "
                  f"({fig.get('threshold')}); {fig.get('n_unique_training_records')} unique training records\n")
    t = r.get("timing") or {}
    if t:
        out.write("  timing: " + ", ".join(f"{k}={v}" for k, v in t.items() if v is not None) + "\n")
    for n in r.get("notes") or []:
        out.write(f"  note: {n}\n")
    for k, v in (r.get("artifacts") or {}).items():
        out.write(f"  {k}: {v}\n")
    out.write(f"  result: {r.get('copy_of') or str(Path(r['scores_path']).parent / 'result.json')}\n")
    return out.getvalue()


def format_bench(res: dict) -> str:
    """The side-by-side table in text, then the cell counts and where everything was written."""
    from .tables import fmt  # lazy: reports.tables loads pandas; reports.text (privbench attack) does not

    lines = []
    rows = res.get("_rows") or []
    if rows:
        aw = max([7] + [len(a["attack"]) for b in rows for a in (b["attacks"] or [])])  # labels: secmi-nn@paper
        hdr = (f"{'method/target':24s} {'role':8s} {'formal eps':>10s} {'eps lb':>6s}  {'attack':{aw}s} {'AUC [95% CI]':19s} "
               f"{'TPR@1%':>6s} {'TPR@.1%':>7s} {'memorized':>9s} {'re-id':>6s} {'FID all/maj/min':>17s}")
        lines += [hdr, "-" * len(hdr)]
        for b in rows:
            p = b["privacy"]
            mem = (b[MEMORIZATION] or {}).get("metrics") or {}
            rec = (b[RECONSTRUCTION] or {}).get("metrics") or {}
            f = b["fid"] or {}
            fid = (f"{fmt(f.get('overall'), 1)}/{fmt(f.get('majority'), 1)}/{fmt(f.get('minority'), 1)}" if f else NONE_TEXT)
            atts = b["attacks"] or [None]
            for i, a in enumerate(atts):
                head = (f"{(b['method'] + '/' + b['target'])[:24]:24s} {b['role'][:8]:8s} "
                        f"{fmt(formal_epsilon(p), 2) if formal_epsilon(p) is not None else 'none':>10s} "
                        f"{fmt(b['eps_lb'], 2):>6s}{'!' if b['exceeds_claim'] else ' '}" if i == 0 else " " * 52)
                if a:
                    m = a["metrics"]
                    auc = f"{fmt(m.get('auc'))}{_ci(a['ci'].get('auc'))}"
                    n_non = a["result"].n_nonmembers
                    body = (f" {a['attack']:{aw}s} {auc:19s} {_tpr(m, 'tpr_at_1pct_fpr', n_non):>6s} "
                            f"{_tpr(m, 'tpr_at_0_1pct_fpr', n_non):>7s}")
                else:
                    body = f" {NONE_TEXT:{aw}s} {NONE_TEXT:19s} {NONE_TEXT:>6s} {NONE_TEXT:>7s}"
                tail = (f" {fmt(mem.get('memorized_fraction')) if mem else NONE_TEXT:>9s} "
                        f"{fmt(rec.get('reid_rate')) if rec else NONE_TEXT:>6s} {fid:>17s}") if i == 0 else ""
                lines.append(head + body + tail)
        lines.append("eps lb: the target's headline lower bound, the largest of the Clopper-Pearson and one-run bounds "
                     "of all its membership attacks, each at 1 - 0.05/(2k) (Bonferroni), so 95% family-wise; '!' = exceeds the formal or claimed epsilon; TPR n/a: fewer "
                     "non-members than 1/FPR, so that FPR cannot be resolved")
    c = res.get("counts", {})
    lines.append(f"bench {res.get('suite')}: {c.get('done', 0)} done, {c.get('skipped', 0)} skipped, "
                 f"{c.get('failed', 0)} failed, {c.get('pending', 0)} pending in {res.get('elapsed_s')} s")
    for cell in cells_of(res):
        if cell.status in ("failed", "skipped"):
            what = cell.attack if cell.kind == "attack" else cell.kind
            lines.append(f"  {cell.status}: {cell.variant or cell.method}/{cell.target} {what} ({cell.dataset}, seed "
                         f"{cell.seed}): {cell.reason}")
    lines.append(f"wrote {res.get('bench_json')}" + "".join(f", {p}" for p in (res.get("tables") or {}).values()))
    lines.append(f"render the HTML report with: privbench report {res.get('out')} --out <dir>")
    return "\n".join(lines)


def write_bench_tables(res: dict) -> dict:
    """The bench's ``side_by_side.csv`` and ``results.csv`` from its finished attack cells; their paths are added
    to ``bench.json`` (key ``tables``) and to ``res``; ``res["_rows"]`` gets the side-by-side rows for
    :func:`format_bench`."""
    # lazy: reports.tables loads pandas; reports.text (privbench attack) does not
    from .tables import Tables

    out_dir = Path(res["out"])
    results = [read_cell_result(c, c.result_path) for c in cells_of(res) if c.kind == "attack" and c.status == "done"]
    paths: dict = {}
    rows: list = []
    if results:
        tables = Tables.build(results, {"roles": res.get("roles") or {}, "cells": res["cells"]}, base=out_dir)
        for fname, df in (("side_by_side.csv", tables.side_by_side_frame()), ("results.csv", tables.results_frame())):
            with atomic_path(out_dir / fname) as tmp:
                df.to_csv(tmp, index=False, float_format="%.6g")
            paths[fname] = str(out_dir / fname)
        rows = tables.targets()
        bench_json = Path(res["bench_json"])
        d = read_json(bench_json, "bench", MAX_RECORD_BYTES)
        d["tables"] = paths
        atomic_write_json(bench_json, d)
    res["tables"] = paths
    res["_rows"] = rows
    return res


def result_summary(res: dict | list[dict]) -> str:
    """One table of an outside model's results, then the model and its schedule once, and each attack's run."""
    results = res if isinstance(res, list) else [res]
    lines = [format_table(results).rstrip("\n")]
    shown: set[str] = set()
    for one in results:
        r = AttackResult.from_json(one)
        prov = r.provenance or Provenance()
        model = prov.model or {}  # the model loader's own object: its keys depend on the format (models/external.py)
        text = (f"model: {model.get('path', '?')} ({model.get('format')}; {model.get('weights')}; "
                f"{model.get('prediction_type')} prediction; sha256 {str(prov.weights_sha256)[:12]})\n"
                f"schedule: {(model.get('scheduler') or {}).get('source')}")
        if text not in shown:
            shown.add(text)
            lines.append(text)
        lines.append(f"run: {r.run_dir}" + (f" ({r.label or r.attack})" if len(results) > 1 else ""))
    return "\n".join(lines)
