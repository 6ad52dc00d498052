"""``privbench audit``: empirical ε lower bounds from attack scores, next to the formal ε (docs/accountants.md §3):
per result Clopper–Pearson (split) and one-run; per model the family-wise headline (:mod:`.headline`); per target
the flag, one Bonferroni family compared with the claim in the game's relation (:mod:`privbench.privacy.compare`);
for PFDM's shared model the upload-mechanism audit (§4).
"""
from __future__ import annotations

import io
import json
from pathlib import Path
from typing import Any

from safetensors import safe_open

from ..core.constants import DEFAULT_CONFIDENCE, DEFAULT_DELTA, MEMBERSHIP
from ..core.errors import BadInput
from ..core.registry import METHODS, entry_owners, has_entry
from ..core.validation import confidence as check_confidence
from ..core.validation import open_unit
from ..privacy.claims import COMPARED, FORMAL, KIND_LABEL
from ..privacy.compare import (
    KIND_TEXT,
    bound_confidence,
    comparable_claim,
    exceeds,
    flag_delta,
    formal_relation,
    membership_flag_bounds,
)
from .cells import NONE_TEXT, num
from .collect import Result, load_results, read_result
from .headline import RULE, headlines
from .order import attack_rank, method_rank, target_rank


def _check_delta(delta) -> float | None:
    if delta is None:
        return None
    try:
        return open_unit(float(delta), "--delta")
    except (TypeError, ValueError):
        raise BadInput(f"--delta={delta!r}: must be in (0, 1)") from None


def audit_result(res: Result, *, delta: float | None = None, confidence: float = DEFAULT_CONFIDENCE, seed: int = 0,
                 upload_audit: bool = True, n_attacks: int = 1) -> dict[str, Any]:
    """The audit of one membership result (docs/cli.md §4.6 keys first, then extras).

    ``n_attacks``: how many membership results on the same target are audited together (one flag family)."""
    # lazy: privacy.audit loads scipy.optimize/stats; reports.audit does not
    from ..privacy.audit import clopper_pearson_epsilon, one_run_epsilon

    scores, labels = res.load_scores()
    claim = res.claim
    compared = claim if claim and claim["kind"] in COMPARED else None
    claim_delta = claim["delta"] if claim else None
    d = delta if delta is not None else (float(claim_delta) if claim_delta else DEFAULT_DELTA)
    cp = clopper_pearson_epsilon(scores, labels, delta=d, confidence=confidence, threshold_selection="split",
                                 seed=seed)
    one = one_run_epsilon(scores, labels, delta=d, confidence=confidence, seed=seed)
    formal = res.formal_epsilon
    out: dict[str, Any] = {
        "epsilon_lower_bound": cp["epsilon_lower_bound"],
        "confidence": confidence,
        "delta": d,
        "formal_epsilon": formal,
        "threshold_selection": cp["threshold_selection"],
        "n_members": cp["n_members"],
        "n_nonmembers": cp["n_nonmembers"],
        # extras
        "method": res.method_label, "registered_method": res.method, "target": res.target, "attack": res.attack,
        "dataset": res.dataset,
        "preset": res.preset, "seed": res.seed, "result": str(res.path), "run": res.run_dir.name,
        "formal_delta": claim_delta if formal is not None else None,
        "formal_basis": claim["basis"] if formal is not None else None,
        "claim": claim,
        "claimed_epsilon": claim["epsilon"] if compared and compared["kind"] != FORMAL else None,
        "conditional_epsilon": res.privacy and res.privacy.conditional_epsilon,  # no guarantee: never compared
        "ceiling": cp["ceiling"],
        "clopper_pearson": cp,
        "one_run": one,
        "exceeds_formal": None,
        "exceeds_claim": None,
    }
    if compared is None:
        out["notes"] = [_nothing_to_compare(res, claim)]
        return out
    notes = _flag(res, out, compared, scores, labels, d, confidence, seed, upload_audit, n_attacks)
    if compared["kind"] != FORMAL:
        notes.insert(0, f"no formal epsilon: {compared['epsilon']:.4g} is the {KIND_LABEL[compared['kind']]} "
                        f"({compared['basis']}); compared as a claim, never shown as a guarantee")
    out["notes"] = notes
    return out


def _nothing_to_compare(res: Result, claim: dict | None) -> str:
    """The note of a result whose bounds have nothing to be compared with."""
    if claim is not None:  # conditional: no guarantee, about a model that was not released
        return (f"no formal epsilon to compare with: the conditional epsilon {claim['epsilon']:.4g} "
                f"(conditional on {', '.join(res.privacy.conditional_on or [])}) is not a guarantee")
    if res.is_outside:
        return ("external model: no formal epsilon and no claimed one (attack --model --claimed-epsilon E "
                "--claimed-delta D --claim-basis TEXT states your training's claim); nothing to compare with")
    return "non-private target: no formal epsilon to compare with"


def _flag(res: Result, out: dict, claim: dict, scores, labels, d: float, confidence: float, seed: int,
          upload_audit: bool, n_attacks: int) -> list[str]:
    """The family-wise flag of ``claim``: fills ``out``'s flag keys, returns the notes."""
    notes: list[str] = []
    formal = claim["kind"] == FORMAL
    ua_cfg = formal and upload_audit and upload_mechanism_of(res) is not None  # ε of an LDP upload
    n_attacks = max(int(n_attacks), 1)
    k = 2 * n_attacks + (2 if ua_cfg else 0)
    conf_k = bound_confidence(confidence, k)
    cmp = comparable_claim(float(claim["epsilon"]), claim["delta"] if claim["delta"] is not None else d,
                           formal_relation(res.privacy))
    d_flag = flag_delta(d, cmp)
    bounds = membership_flag_bounds(scores, labels, delta=d_flag, confidence=conf_k, seed=seed) \
        if cmp["testable"] else {}
    family = (f"{k} bounds of {res.method_label}/{res.target}: Clopper-Pearson and one-run for each of its {n_attacks} "
              f"membership result(s) audited together" + (" and the upload-mechanism audit's Clopper-Pearson and "
                                                          "GDP bounds" if ua_cfg else ""))
    hit = exceeds(bounds, cmp)
    out.update({
        "neighbouring_relation": cmp,
        "flag_confidence": confidence,
        "flag_family": {"size": k, "members": family, "bound_confidence": conf_k, "delta": d_flag,
                        "correction": f"Bonferroni: each bound at 1 - {1.0 - confidence:g}/{k}"},
        "flag_bounds": bounds,
        "exceeds_claim": hit,
        "exceeds_formal": hit if formal else None,
    })
    what = KIND_LABEL[claim["kind"]]
    if claim["delta"] is not None and float(claim["delta"]) < d - 1e-15:
        # a guarantee at a smaller δ also holds at the audit's: a fair test
        notes.append(f"the {what} is stated at delta={claim['delta']:g}, below the audit's delta={d:g}; it holds "
                     f"at delta={d:g} too, so the flag compares there")
    elif claim["delta"] is not None and abs(float(claim["delta"]) - d) > 1e-15:
        notes.append(f"audited at delta={d:g} but the {what} is stated at delta={claim['delta']:g}: "
                     f"the two are not directly comparable (the flag uses delta={d_flag:.3g})")
    if cmp["factor"] != 1.0:
        notes.append(f"the {what} is {cmp['formal']}, the membership game {cmp['empirical']}: compared with "
                     f"{cmp['conversion']}")
    cmp_eps = cmp["comparable_epsilon"]
    ceiling = out["clopper_pearson"]["ceiling"]
    if not cmp["testable"]:
        notes.append(f"the {what} implies no bound on the replace-one membership game at this epsilon: "
                     "no audit can contradict it (flag not testable)")
    elif out["epsilon_lower_bound"] <= cmp_eps and cmp_eps > ceiling:
        notes.append(f"the comparable {what} ({cmp_eps:.3g}) is above what "
                     f"{out['clopper_pearson']['n_evaluation']} evaluation records can ever show (ceiling "
                     f"{ceiling:.3g}): this audit cannot test the claim's tightness")
    if hit:
        notes.append(f"FLAG: an empirical lower bound at {conf_k:.4g} ({k} bounds, family-wise {confidence:g}) "
                     f"exceeds the comparable {what} {cmp_eps:.4g}: either the implementation or the privacy "
                     "claim is broken")
    if ua_cfg:
        ua = upload_audit_for(res, delta=d, confidence=confidence, seed=seed, flag_bound_confidence=conf_k)
        if ua is not None:
            out["upload_mechanism"] = ua
            if ua["exceeds_analytic"]:
                out["exceeds_formal"] = out["exceeds_claim"] = True
                notes.append(f"FLAG: the upload-mechanism audit exceeds the analytic epsilon of one upload (bounds "
                             f"at {conf_k:.4g}, family-wise {confidence:g})")
    return notes


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
        # lazy: torch, which `audit` of other results does not import
        from ..core.schedule import alphas_cumprod
        from ..privacy.audit_uploads import audit_upload_mechanism

        _UPLOAD_CACHE[key] = audit_upload_mechanism(
            mech["clip"], mech["t0"], delta=delta, confidence=confidence, n_trials=n_trials, shape=shape,
            alpha_bars=alphas_cumprod(mech["num_timesteps"], mech["beta_start"], mech["beta_end"],
                                      mech["beta_schedule"]), seed=seed, flag_bound_confidence=flag_bound_confidence)
    return _UPLOAD_CACHE[key]


def upload_mechanism_of(res: Result) -> dict | None:
    """The LDP upload mechanism behind a result's formal ε, as its method declares it (None: no such mechanism)."""
    if not res.config or not has_entry("METHODS", res.method):
        return None
    if entry_owners("METHODS", res.method, ("upload_mechanism",)) == {"Method"}:  # read from source, no import
        return None
    return METHODS.get(res.method).factory.upload_mechanism(res.config, res.target)


def _image_shape(res: Result) -> tuple[int, ...]:
    """The image shape of the run's dataset (from its uploads file when present, else the dataset)."""
    up = res.run_dir / "uploads.safetensors"
    if up.is_file():
        try:
            with safe_open(str(up), framework="pt") as f:
                return tuple(f.get_slice("x").get_shape()[1:])
        except Exception:  # noqa: BLE001
            pass
    # lazy: data.base imports torch; only the upload audit needs a dataset's shape
    from ..data.base import dataset_info

    try:
        info = dataset_info(res.dataset)
        res_px = int((res.config.get("data") or {}).get("resolution") or 0)
        size = res_px or info.size
        return (info.channels, size, size)
    except Exception:  # noqa: BLE001
        return (1, 8, 8)


def audit_results(paths: list[str], delta: float | None = None, confidence: float = DEFAULT_CONFIDENCE) -> list[dict]:
    """``privbench audit RESULTS...``: one audit per membership result; BadInput when none can be audited."""
    d = _check_delta(delta)
    conf = check_confidence(confidence, "--confidence")
    explicit = {Path(p).resolve() for p in paths if Path(p).is_file()}
    for p in explicit:
        r = read_result(p)
        if r.kind != MEMBERSHIP:
            raise BadInput(f"{p}: a {r.attack} result has no membership scores to audit "
                           f"(audit takes loss/secmi/pia/pian results)")
    results = load_results(paths)
    results.sort(key=lambda r: (r.dataset, r.seed, method_rank(r.method), r.method, r.method_label,
                                target_rank(r.method, r.target), attack_rank(r.attack), r.attack))
    audited = [r for r in results if r.kind == MEMBERSHIP or r.path.resolve() in explicit]
    # one flag family per target: every membership result on it that is audited together
    per_target: dict[tuple, int] = {}
    for r in audited:
        per_target[_target_key(r)] = per_target.get(_target_key(r), 0) + 1
    heads = headlines(audited, delta=d, confidence=conf)
    out = []
    for r in audited:
        a = audit_result(r, delta=d, confidence=conf, n_attacks=per_target[_target_key(r)])
        a["headline"] = heads.get(_target_key(r))
        out.append(a)
    if not out:
        raise BadInput(f"{' '.join(map(str, paths))}: no membership attack results with scores to audit")
    return out


def _target_key(r: Result) -> tuple:
    return r.target_key()


def _flag_text(a: dict) -> str:
    """The audit row's verdict: only a formal ε is ever "ok"; a claim that is not exceeded is only not refuted."""
    kind = (a.get("claim") or {}).get("kind")
    if a.get("exceeds_claim") is None:
        return "-"
    if kind == FORMAL:
        return "EXCEEDS FORMAL" if a["exceeds_claim"] else "ok"
    who = "paper" if kind == "claimed_by_paper" else "user"
    return f"EXCEEDS CLAIM ({who})" if a["exceeds_claim"] else f"not refuted ({who}'s claim)"


def _claim_cell(a: dict) -> str:
    """The ε column: a formal ε as a number; a claimed one marked as a claim (never mistaken for a guarantee)."""
    if a.get("formal_epsilon") is not None:
        return num(a["formal_epsilon"], 3)
    if a.get("claimed_epsilon") is not None:
        return num(a["claimed_epsilon"], 3) + "*"
    return NONE_TEXT


def format_headlines(audits: list[dict]) -> str:
    """One line per model: its headline bound and the sentence saying what it bounds."""
    out = io.StringIO()
    seen: set = set()
    for a in audits:
        h = a.get("headline")
        if not h or h["statement"] in seen:
            continue
        seen.add(h["statement"])
        src = f"{KIND_TEXT[h['bound']]} of {h['attack']}" if h["bound"] else "no bound above 0"
        out.write(f"HEADLINE {h['model']} (run {h['run']}): eps_lb {num(h['epsilon_lower_bound'], 3)} ({src}), confidence "
                  f"{h['confidence']:g} family-wise over {h['family_size']} bounds, delta {h['delta']:g}\n"
                  f"  {h['statement']}\n")
    return out.getvalue()


def format_audit(audits: list[dict]) -> str:
    out = io.StringIO()
    out.write(format_headlines(audits))
    out.write(f"({RULE}.)\n\nDetails: every bound at confidence {audits[0]['confidence']:g} on its own (not "
              f"family-wise):\n")
    hdr = (f"{'target':24s} {'attack':7s} {'eps_lb CP':>9s} {'(ceil)':>7s} {'eps_lb 1-run':>12s} {'(ceil)':>7s} "
           f"{'formal eps':>10s}  flag")
    out.write(hdr + "\n" + "-" * len(hdr) + "\n")
    for a in audits:
        o = a["one_run"]
        out.write(f"{(a['method'] + '/' + a['target'])[:24]:24s} {a['attack']:7s} "
                  f"{num(a['epsilon_lower_bound'], 3):>9s} {num(a['ceiling'], 2):>7s} "
                  f"{num(o['epsilon_lower_bound'], 3):>12s} {num(o['ceiling'], 2):>7s} "
                  f"{_claim_cell(a):>10s}  {_flag_text(a)}\n")
    a0 = audits[0]
    if any(a.get("claimed_epsilon") is not None for a in audits):
        out.write("* a claimed epsilon (by the method's paper or by the user), not a formal guarantee: compared with "
                  "the bounds as a claim\n")
    out.write(f"\nconfidence {a0['confidence']:g}; delta per row = the target's formal or claimed delta (else "
              f"{DEFAULT_DELTA:g}).\n")
    out.write(f"Clopper-Pearson threshold selection: {a0['threshold_selection']}.\n")
    out.write(f"  assumption: {a0['clopper_pearson']['assumption']}\n")
    out.write(f"One-run: {a0['one_run']['n_guesses_selection']}.\n  assumption: {a0['one_run']['assumption']}\n")
    out.write(f"Flag (EXCEEDS FORMAL), or EXCEEDS CLAIM for a claimed epsilon: family-wise confidence {a0['confidence']:g} per target: each "
              f"of a target's k bounds (Clopper-Pearson and one-run per membership result, plus the upload-mechanism "
              f"audit's two for PFDM's shared model) is recomputed at 1 - {1.0 - a0['confidence']:g}/k (Bonferroni) "
              f"and compared with the formal or claimed epsilon expressed in the membership game's relation.\n")
    out.write(_bases(audits))
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


def _bases(audits: list[dict]) -> str:
    """One line per (run, target): the ε it carries, its kind and basis; runs of one method/target may differ."""
    out = io.StringIO()
    seen: set = set()
    for a in audits:
        c = a.get("claim")
        key = (a.get("run"), a["target"], json.dumps(c, sort_keys=True, default=str))
        if not c or key in seen:
            continue
        seen.add(key)
        where = f"{a['method']}/{a['target']} ({a.get('run') or a['result']})"
        if c["kind"] == "conditional":
            out.write(f"epsilon of {where}: none formal (conditional epsilon {num(c['epsilon'], 4)}, "
                      f"no guarantee) at delta {c['delta']} ({c['basis']})\n")
        else:
            out.write(f"{KIND_LABEL[c['kind']].replace('ε', 'epsilon')} of {where}: {num(c['epsilon'], 4)} "
                      f"at delta {c['delta']} ({c['basis']})\n")
        nr, ff = a.get("neighbouring_relation"), a.get("flag_family")
        if nr and ff:
            out.write(f"  neighbouring relation: formal {nr['formal']}; membership game {nr['empirical']} "
                      f"({nr['empirical_game']}); conversion: {nr['conversion']}; flag: {ff['size']} bounds at "
                      f"{ff['bound_confidence']:.4g} each, delta {ff['delta']:.3g}, compared with "
                      f"{num(nr['comparable_epsilon'], 4)}\n")
    return out.getvalue()


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
