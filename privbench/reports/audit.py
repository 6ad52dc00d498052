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

Like with like (:mod:`privbench.privacy.compare`, key ``neighbouring_relation``): privbench's membership game is a
replace-one game (fixed-size member split), so the formal ε is expressed in replace-one before the comparison —
PFDM's LDP ε is replace-one already (factor 1); an add/remove ε (DP-SGD) becomes (2ε, (1+e^ε)δ) by group privacy.

Family-wise flag: all the bounds whose excess would flag a target — Clopper–Pearson and one-run for each of its
membership results audited together, plus the upload-mechanism audit's two for PFDM's shared model — form one
family of k; for the flag each is recomputed at 1 − α/k (Bonferroni) at the comparison's δ, so the flag holds at
``flag_confidence`` = 1 − α for the target. The per-bound numbers shown stay at 1 − α each.

δ: by default each result is audited at its own formal δ (so the two ε are comparable), else at 1e-5; the flag's
bounds use the δ of the comparable claim (or the audit's δ if larger).

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
from ..core.validation import confidence as check_confidence
from ..core.validation import open_unit
from .collect import Result, load_results, read_result
from .order import attack_rank, method_rank, target_rank

DEFAULT_DELTA = 1e-5


def _check_delta(delta) -> float | None:
    if delta is None:
        return None
    try:
        return open_unit(float(delta), "--delta")
    except (TypeError, ValueError):
        raise BadInput(f"--delta={delta!r}: must be in (0, 1)") from None


def audit_result(res: Result, *, delta: float | None = None, confidence: float = 0.95, seed: int = 0,
                 upload_audit: bool = True, n_attacks: int = 1) -> dict[str, Any]:
    """The audit of one membership result (docs/cli.md §4.6 keys first, then extras).

    ``n_attacks``: how many membership results on the same target are audited together (their bounds share one
    flag family; :func:`audit_results` passes it)."""
    from ..privacy.audit import clopper_pearson_epsilon, one_run_epsilon
    from ..privacy.compare import (bound_confidence, comparable_claim, exceeds, flag_delta, formal_relation,
                                   membership_flag_bounds)

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
        "exceeds_formal": None,
    }
    notes = []
    if formal is None:  # nothing to flag: a conditional epsilon is no guarantee and is never compared
        if p.get("conditional_epsilon") is not None:
            notes.append(f"no formal epsilon to compare with: the conditional epsilon {p['conditional_epsilon']:.4g}"
                         f" (conditional on {', '.join(p.get('conditional_on') or [])}) is not a guarantee")
        elif res.get("method") == "external":
            notes.append("external model: privbench claims no formal epsilon for it; nothing to compare with")
        else:
            notes.append("non-private target: no formal epsilon to compare with")
        out["notes"] = notes
        return out

    ua_cfg = upload_audit and upload_mechanism_of(res) is not None  # the target's ε is that of an LDP upload
    n_attacks = max(int(n_attacks), 1)
    k = 2 * n_attacks + (2 if ua_cfg else 0)
    conf_k = bound_confidence(confidence, k)
    claim = comparable_claim(float(formal), float(formal_delta) if formal_delta is not None else d,
                             formal_relation(p))
    d_flag = flag_delta(d, claim)
    bounds = membership_flag_bounds(scores, labels, delta=d_flag, confidence=conf_k, seed=seed) \
        if claim["testable"] else {}
    family = (f"{k} bounds of {res.method}/{res.target}: Clopper-Pearson and one-run for each of its {n_attacks} "
              f"membership result(s) audited together" + (" and the upload-mechanism audit's Clopper-Pearson and "
                                                          "GDP bounds" if ua_cfg else ""))
    out.update({
        "neighbouring_relation": claim,
        "flag_confidence": confidence,
        "flag_family": {"size": k, "members": family, "bound_confidence": conf_k, "delta": d_flag,
                        "correction": f"Bonferroni: each bound at 1 - {1.0 - confidence:g}/{k}"},
        "flag_bounds": bounds,
        "exceeds_formal": exceeds(bounds, claim),
    })
    if formal_delta is not None and abs(float(formal_delta) - d) > 1e-15:
        notes.append(f"audited at delta={d:g} but the formal epsilon is stated at delta={formal_delta:g}: "
                     f"the two are not directly comparable (the flag uses delta={d_flag:.3g})")
    if claim["factor"] != 1.0:
        notes.append(f"formal epsilon is {claim['formal']}, the membership game {claim['empirical']}: compared with "
                     f"{claim['conversion']}")
    cmp_eps = claim["comparable_epsilon"]
    if not claim["testable"]:
        notes.append("the formal claim implies no bound on the replace-one membership game at this epsilon: "
                     "no audit can contradict it (flag not testable)")
    elif lb <= cmp_eps and cmp_eps > cp["ceiling"]:
        notes.append(f"the comparable formal epsilon ({cmp_eps:.3g}) is above what {cp['n_evaluation']} evaluation "
                     f"records can ever show (ceiling {cp['ceiling']:.3g}): this audit cannot test the claim's "
                     "tightness")
    if out["exceeds_formal"]:
        notes.append(f"FLAG: an empirical lower bound at {conf_k:.4g} ({k} bounds, family-wise {confidence:g}) "
                     f"exceeds the comparable claimed epsilon {cmp_eps:.4g}: either the implementation or the "
                     "privacy claim is broken")
    out["notes"] = notes
    if ua_cfg:
        ua = upload_audit_for(res, delta=d, confidence=confidence, seed=seed, flag_bound_confidence=conf_k)
        if ua is not None:
            out["upload_mechanism"] = ua
            if ua["exceeds_analytic"]:
                out["exceeds_formal"] = True
                notes.append(f"FLAG: the upload-mechanism audit exceeds the analytic epsilon of one upload (bounds "
                             f"at {conf_k:.4g}, family-wise {confidence:g})")
    return out


_UPLOAD_CACHE: dict[tuple, dict] = {}


def upload_audit_for(res: Result, *, delta: float, confidence: float, seed: int = 0,
                     n_trials: int = 20000, flag_bound_confidence: float | None = None) -> dict | None:
    """The upload-mechanism audit with the run's own C, t0, schedule and image shape (None without a config)."""
    mech = upload_mechanism_of(res)
    if mech is None:
        return None
    shape = _image_shape(res)
    key = (mech["clip"], mech["t0"], delta, confidence, seed, n_trials, shape, mech["num_timesteps"],
           mech["beta_start"], mech["beta_end"], mech["beta_schedule"], flag_bound_confidence)
    if key not in _UPLOAD_CACHE:
        from ..privacy.audit_uploads import audit_upload_mechanism

        _UPLOAD_CACHE[key] = audit_upload_mechanism(
            mech["clip"], mech["t0"], delta=delta, confidence=confidence, n_trials=n_trials, shape=shape,
            num_timesteps=mech["num_timesteps"], beta_start=mech["beta_start"], beta_end=mech["beta_end"],
            beta_schedule=mech["beta_schedule"], seed=seed, flag_bound_confidence=flag_bound_confidence)
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
    conf = check_confidence(confidence, "--confidence")
    explicit = {Path(p).resolve() for p in paths if Path(p).is_file()}
    for p in explicit:
        r = read_result(p)
        if r.kind != MEMBERSHIP:
            raise BadInput(f"{p}: a {r.attack} result has no membership scores to audit "
                           f"(audit takes loss/secmi/pia/pian results)")
    results = load_results(paths)
    results.sort(key=lambda r: (r.dataset, r.seed, method_rank(r.method), r.method, target_rank(r.method, r.target),
                                attack_rank(r.attack), r.attack))
    audited = [r for r in results if r.kind == MEMBERSHIP or r.path.resolve() in explicit]
    # one flag family per target: every membership result on it that is audited together
    per_target: dict[tuple, int] = {}
    for r in audited:
        per_target[_target_key(r)] = per_target.get(_target_key(r), 0) + 1
    out = []
    for r in audited:
        out.append(audit_result(r, delta=d, confidence=conf, n_attacks=per_target[_target_key(r)]))
    if not out:
        raise BadInput(f"{' '.join(map(str, paths))}: no membership attack results with scores to audit")
    return out


def _target_key(r: Result) -> tuple:
    return r.target_key()


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
    out.write(f"Flag (EXCEEDS FORMAL): family-wise confidence {a0['confidence']:g} per target: each of a target's k "
              f"bounds (Clopper-Pearson and one-run per membership result, plus the upload-mechanism audit's two "
              f"for PFDM's shared model) is recomputed at 1 - {1.0 - a0['confidence']:g}/k (Bonferroni) and "
              f"compared with the formal epsilon expressed in the membership game's relation.\n")
    bases = {(a["method"], a["target"]): a for a in audits if a.get("formal_basis")}
    for (m, t), a in bases.items():
        cond = a.get("conditional_epsilon")
        out.write(f"formal epsilon of {m}/{t}: {_f(a['formal_epsilon'], 4)} at delta {a['formal_delta']} "
                  + (f"(conditional epsilon {_f(cond, 4)}, no guarantee) " if cond is not None else "")
                  + f"({a['formal_basis']})\n")
        nr, ff = a.get("neighbouring_relation"), a.get("flag_family")
        if nr and ff:
            out.write(f"  neighbouring relation: formal {nr['formal']}; membership game {nr['empirical']} "
                      f"({nr['empirical_game']}); conversion: {nr['conversion']}; flag: {ff['size']} bounds at "
                      f"{ff['bound_confidence']:.4g} each, delta {ff['delta']:.3g}, compared with "
                      f"{_f(nr['comparable_epsilon'], 4)}\n")
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
            f"{'   FLAG: exceeds the analytic epsilon' if ua['exceeds_analytic'] else ''}\n"
            + (f"    relation: replace-one game (two candidate inputs) vs replace-one LDP epsilon, compared directly; "
               f"flag bounds at {ua['flag_bound_confidence']:.4g} each: Clopper-Pearson "
               f"{ua['flag_bounds']['clopper_pearson']:.3f}, GDP {ua['flag_bounds']['gdp']:.3f}\n"
               if "flag_bounds" in ua else ""))
