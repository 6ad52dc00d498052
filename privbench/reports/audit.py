"""``privbench audit``: empirical ε lower bounds from attack scores, next to the formal ε (docs/accountants.md §3).

For every membership result (its ``scores.npz``):

* **Clopper–Pearson** (Jagielski et al. 2020): one-sided CP upper bounds on FPR and FNR (α/2 each), plugged into
  the (ε, δ)-DP hypothesis-testing constraints; the threshold (and score direction) is chosen on a seeded
  stratified half of the records and the bound is computed once on the other half — never on the records it was
  chosen on. This is ``epsilon_lower_bound``.
* **One-run** (Steinke, Nasr & Jagielski 2023): guesses on the top/bottom scores, bounded by the theorem's
  binomial tail; reported with its ``ceiling`` (the bound if every guess were right) and the gap between
  privbench's member split (exact counts from a random permutation) and the theorem's independent fair coins.

Both are lower bounds at the stated confidence under the stated assumptions; a bound of 0 never shows privacy.
Next to them: the target's formal ε and its basis. A target whose lower bound EXCEEDS its formal ε is flagged: either
the implementation or the claim is broken.

δ: by default each result is audited at its own formal δ (so the two ε are comparable), else at 1e-5.

PFDM's shared model: its guarantee is per upload, so the upload mechanism itself is audited too
(:func:`privbench.privacy.audit_uploads.audit_upload_mechanism`, key ``upload_mechanism``).
"""
from __future__ import annotations

import io
import math
from pathlib import Path
from typing import Any

from ..core.errors import BadInput
from ..attacks.base import MEMBERSHIP
from .collect import Result, load_results, read_result
from .order import attack_rank, method_rank, target_rank

DEFAULT_DELTA = 1e-5


def _check_delta(delta) -> float | None:
    if delta is None:
        return None
    try:
        d = float(delta)
    except (TypeError, ValueError):
        raise BadInput(f"--delta {delta!r}: expected a number in (0, 1)") from None
    if not 0.0 < d < 1.0:
        raise BadInput(f"--delta {delta!r}: expected a number in (0, 1)")
    return d


def _check_confidence(c) -> float:
    try:
        c = float(c)
    except (TypeError, ValueError):
        raise BadInput(f"--confidence {c!r}: expected a number strictly between 0 and 1 (e.g. 0.95)") from None
    if not 0.0 < c < 1.0:
        raise BadInput(f"--confidence {c!r}: expected a number strictly between 0 and 1 (e.g. 0.95)")
    return c


def audit_result(res: Result, *, delta: float | None = None, confidence: float = 0.95, seed: int = 0,
                 upload_audit: bool = True) -> dict[str, Any]:
    """The audit of one membership result (docs/cli.md §4.6 keys first, then extras)."""
    from ..privacy.audit import clopper_pearson_epsilon, one_run_epsilon

    scores, labels = res.load_scores()
    p = res.privacy or {}
    formal = res.formal_epsilon
    formal_delta = p.get("delta")
    d = delta if delta is not None else (float(formal_delta) if formal_delta else DEFAULT_DELTA)
    cp = clopper_pearson_epsilon(scores, labels, delta=d, confidence=confidence, threshold_selection="split",
                                 seed=seed)
    one = one_run_epsilon(scores, labels, delta=d, confidence=confidence, seed=seed)
    lb = cp["epsilon_lower_bound"]
    out: dict[str, Any] = {
        "epsilon_lower_bound": lb,
        "confidence": confidence,
        "delta": d,
        "formal_epsilon": formal,
        "threshold_selection": cp["threshold_selection"],
        "n_members": cp["n_members"],
        "n_nonmembers": cp["n_nonmembers"],
        # extras
        "method": res.method, "target": res.target, "attack": res.attack, "dataset": res.dataset,
        "preset": res.preset, "seed": res.seed, "result": str(res.path),
        "formal_delta": formal_delta, "formal_basis": p.get("basis"),
        "conditional_epsilon": p.get("conditional_epsilon"),  # no guarantee: never compared, never flagged
        "ceiling": cp["ceiling"],
        "clopper_pearson": cp,
        "one_run": one,
        "exceeds_formal": None if formal is None else bool(lb > formal or one["epsilon_lower_bound"] > formal),
    }
    notes = []
    if formal is None and p.get("conditional_epsilon") is not None:
        notes.append(f"no formal epsilon to compare with: the conditional epsilon {p['conditional_epsilon']:.4g} "
                     f"(conditional on {', '.join(p.get('conditional_on') or [])}) is not a guarantee")
    elif formal is None:
        notes.append("non-private target: no formal epsilon to compare with")
    if formal_delta is not None and abs(float(formal_delta) - d) > 1e-15:
        notes.append(f"audited at delta={d:g} but the formal epsilon is stated at delta={formal_delta:g}: "
                     "the two are not directly comparable")
    if formal is not None and lb <= formal and formal > cp["ceiling"]:
        notes.append(f"the formal epsilon ({formal:.3g}) is above what {cp['n_evaluation']} evaluation records can "
                     f"ever show (ceiling {cp['ceiling']:.3g}): this audit cannot test the claim's tightness")
    if out["exceeds_formal"]:
        notes.append(f"FLAG: the empirical lower bound exceeds the claimed epsilon {formal:.4g}: either the "
                     "implementation or the privacy claim is broken")
    out["notes"] = notes
    if upload_audit and formal is not None and upload_mechanism_of(res) is not None:
        ua = upload_audit_for(res, delta=d, confidence=confidence, seed=seed)
        if ua is not None:
            out["upload_mechanism"] = ua
            if ua["exceeds_analytic"]:
                out["exceeds_formal"] = True
                notes.append("FLAG: the upload-mechanism audit exceeds the analytic epsilon of one upload")
    return out


_UPLOAD_CACHE: dict[tuple, dict] = {}


def upload_audit_for(res: Result, *, delta: float, confidence: float, seed: int = 0,
                     n_trials: int = 20000) -> dict | None:
    """The upload-mechanism audit with the run's own C, t0, schedule and image shape (None without a config)."""
    mech = upload_mechanism_of(res)
    if mech is None:
        return None
    shape = _image_shape(res)
    key = (mech["clip"], mech["t0"], delta, confidence, seed, n_trials, shape, mech["num_timesteps"],
           mech["beta_start"], mech["beta_end"], mech["beta_schedule"])
    if key not in _UPLOAD_CACHE:
        from ..privacy.audit_uploads import audit_upload_mechanism

        _UPLOAD_CACHE[key] = audit_upload_mechanism(
            mech["clip"], mech["t0"], delta=delta, confidence=confidence, n_trials=n_trials, shape=shape,
            num_timesteps=mech["num_timesteps"], beta_start=mech["beta_start"], beta_end=mech["beta_end"],
            beta_schedule=mech["beta_schedule"], seed=seed)
    return _UPLOAD_CACHE[key]


def upload_mechanism_of(res: Result) -> dict | None:
    """The LDP upload mechanism behind a result's formal ε, as its method declares it (None: no such mechanism)."""
    from ..core.registry import METHODS

    if res.method not in METHODS or not res.config:
        return None
    return METHODS.get(res.method).factory.upload_mechanism(res.config, res.target)


def _image_shape(res: Result) -> tuple[int, ...]:
    """The image shape of the run's dataset (from its uploads file when present, else the dataset)."""
    up = res.run_dir / "uploads.safetensors"
    if up.is_file():
        try:
            from safetensors import safe_open

            with safe_open(str(up), framework="pt") as f:
                return tuple(f.get_slice("x").get_shape()[1:])
        except Exception:  # noqa: BLE001
            pass
    from ..data.base import dataset_info

    try:
        info = dataset_info(res.dataset)
        res_px = int((res.config.get("data") or {}).get("resolution") or 0)
        size = res_px or info.size
        return (info.channels, size, size)
    except Exception:  # noqa: BLE001
        return (1, 8, 8)


def audit_results(paths: list[str], delta: float | None = None, confidence: float = 0.95) -> list[dict]:
    """``privbench audit RESULTS...``: one audit per membership result.

    A result.json named explicitly must have membership scores (else BadInput); inside directories, results of
    non-membership attacks (memorization, reconstruction) are skipped. No auditable result at all → BadInput.
    """
    d = _check_delta(delta)
    conf = _check_confidence(confidence)
    explicit = {Path(p).resolve() for p in paths if Path(p).is_file()}
    for p in explicit:
        r = read_result(p)
        if r.kind != MEMBERSHIP:
            raise BadInput(f"{p}: a {r.attack} result has no membership scores to audit "
                           f"(audit takes loss/secmi/pia/pian results)")
    results = load_results(paths)
    results.sort(key=lambda r: (r.dataset, r.seed, method_rank(r.method), r.method, target_rank(r.method, r.target),
                                attack_rank(r.attack), r.attack))
    out = []
    for r in results:
        if r.kind != MEMBERSHIP and r.path.resolve() not in explicit:
            continue
        out.append(audit_result(r, delta=d, confidence=conf))
    if not out:
        raise BadInput(f"{' '.join(map(str, paths))}: no membership attack results with scores to audit")
    return out


def _f(v, nd=3) -> str:
    if v is None:
        return "-"
    if isinstance(v, float) and math.isinf(v):
        return "inf"
    return f"{v:.{nd}f}"


def format_audit(audits: list[dict]) -> str:
    out = io.StringIO()
    hdr = (f"{'target':24s} {'attack':7s} {'eps_lb CP':>9s} {'(ceil)':>7s} {'eps_lb 1-run':>12s} {'(ceil)':>7s} "
           f"{'formal eps':>10s}  flag")
    out.write(hdr + "\n" + "-" * len(hdr) + "\n")
    for a in audits:
        o = a["one_run"]
        flag = "EXCEEDS FORMAL" if a["exceeds_formal"] else ("ok" if a["exceeds_formal"] is False else "-")
        out.write(f"{(a['method'] + '/' + a['target'])[:24]:24s} {a['attack']:7s} {_f(a['epsilon_lower_bound']):>9s} "
                  f"{_f(a['ceiling'], 2):>7s} {_f(o['epsilon_lower_bound']):>12s} {_f(o['ceiling'], 2):>7s} "
                  f"{_f(a['formal_epsilon']):>10s}  {flag}\n")
    a0 = audits[0]
    out.write(f"\nconfidence {a0['confidence']:g}; delta per row = the target's formal delta (else {DEFAULT_DELTA:g}).\n")
    out.write(f"Clopper-Pearson threshold selection: {a0['threshold_selection']}.\n")
    out.write(f"  assumption: {a0['clopper_pearson']['assumption']}\n")
    out.write(f"One-run: {a0['one_run']['n_guesses_selection']}.\n  assumption: {a0['one_run']['assumption']}\n")
    bases = {(a["method"], a["target"]): a for a in audits if a.get("formal_basis")}
    for (m, t), a in bases.items():
        cond = a.get("conditional_epsilon")
        out.write(f"formal epsilon of {m}/{t}: {_f(a['formal_epsilon'], 4)} at delta {a['formal_delta']} "
                  + (f"(conditional epsilon {_f(cond, 4)}, no guarantee) " if cond is not None else "")
                  + f"({a['formal_basis']})\n")
    seen = set()
    for a in audits:
        ua = a.get("upload_mechanism")
        if ua and id(ua) not in seen:
            seen.add(id(ua))
            out.write(format_upload_audit(ua, prefix=f"{a['method']}/{a['target']}: "))
    for a in audits:
        for n in a.get("notes", []):
            out.write(f"  ! {a['method']}/{a['target']} {a['attack']}: {n}\n")
    return out.getvalue().rstrip("\n")


def format_upload_audit(ua: dict, prefix: str = "") -> str:
    return (f"{prefix}upload mechanism (C={ua['clip']:g}, t0={ua['t0']}, sigma={ua['sigma']:.3f}), "
            f"{ua['n_trials']} uploads per candidate, {ua['candidates']}:\n"
            f"    likelihood-ratio attack: Clopper-Pearson eps_lb {ua['epsilon_lower_bound']:.3f} "
            f"(ceiling {ua['ceiling']:.2f}); GDP estimate {ua['gdp']['epsilon']:.3f} (mu_lb "
            f"{ua['gdp']['mu_lower_bound']:.3f}; assumes a Gaussian trade-off curve)\n"
            f"    analytic eps {ua['analytic_epsilon']:.3f} (paper bound {ua['paper_bound']:.3f}); at this pair's "
            f"distance {ua['pair_distance']:.2f}: {ua['analytic_epsilon_pair']:.3f}"
            f"{'   FLAG: exceeds the analytic epsilon' if ua['exceeds_analytic'] else ''}\n")
