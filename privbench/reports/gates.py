"""``privbench check``: the CI privacy gate (docs/cli.md §10). Each (gate, matched result) pair is one check; a
non-optional gate that matches nothing is bad input, so a renamed target or a skipped cell cannot keep CI green.
"""
from __future__ import annotations

import math
from pathlib import Path

from ..core.constants import MEMBERSHIP
from ..core.errors import BadInput
from ..core.yamlio import read_yaml
from ..metrics.roc import FPR_LABEL, FPR_OF, is_inverted, resolvable
from ..privacy.claims import KIND_LABEL, compared_claim, no_formal_reason
from .collect import Result, load_results

GATE_KEYS = {"method", "target", "attack", "metric", "max", "min", "dataset", "preset", "seed", "optional", "note"}
MATCH_KEYS = ("method", "target", "attack", "dataset", "preset", "seed")
_CI_SUFFIXES = {"_ci95_low": 0, "_ci95_high": 1}


def load_gates(path: str | Path) -> list[dict]:
    """A gates file: a YAML path, or the NAME of a shipped one (``tiny``: privbench/bench/gates/tiny.yaml)."""
    from ..bench.suite import find_gates  # lazy: bench.suite loads scipy; reports.gates does not

    data = read_yaml(find_gates(path), f"--gates {path}")  # no anchors/aliases, size-capped (core/yamlio.py)
    if not isinstance(data, dict) or not isinstance(data.get("gates"), list):
        raise BadInput(f"--gates {path}: expected a mapping with a list under 'gates:' (see docs/cli.md §10)")
    if not data["gates"]:
        raise BadInput(f"--gates {path}: the 'gates' list is empty")
    gates = []
    for i, g in enumerate(data["gates"], 1):
        where = f"--gates {path}: gate #{i}"
        if not isinstance(g, dict):
            raise BadInput(f"{where}: expected a mapping like {{method: pfdm, target: shared, attack: pia, "
                           f"metric: auc, max: 0.6}}")
        unknown = sorted(set(g) - GATE_KEYS)
        if unknown:
            raise BadInput(f"{where}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(GATE_KEYS))}")
        missing = [k for k in ("method", "target", "attack", "metric") if g.get(k) in (None, "")]
        if missing:
            raise BadInput(f"{where}: missing {', '.join(missing)}")
        if "max" not in g and "min" not in g:
            raise BadInput(f"{where}: needs a threshold, max: or min:")
        for k in ("max", "min"):
            if k in g:
                v = g[k]
                if isinstance(v, bool) or not isinstance(v, (int, float)) or math.isnan(float(v)):
                    raise BadInput(f"{where}: {k}: {v!r} is not a number")
        if "optional" in g and not isinstance(g["optional"], bool):
            raise BadInput(f"{where}: optional: expected true or false")
        gg = dict(g)
        gg["_index"] = i
        gates.append(gg)
    return gates


def describe(g: dict) -> str:
    sel = f"{g['method']}/{g['target']} {g['attack']}"
    extra = [f"{k}={g[k]}" for k in ("dataset", "preset", "seed") if k in g]
    if extra:
        sel += f" ({', '.join(extra)})"
    bounds = " and ".join(f"{g['metric']} {'<=' if k == 'max' else '>='} {g[k]:g}" for k in ("max", "min") if k in g)
    return f"gate #{g['_index']} {sel}: {bounds}"


def _matches(g: dict, r: Result) -> bool:
    """Whether gate ``g`` selects result ``r``; ``attack`` is compared with the result's label (``secmi@paper``)."""
    for k in MATCH_KEYS:
        have = getattr(r, k)
        if k == "method" and r.variant is not None and str(g.get(k)) == r.variant:
            continue  # a variant by its entry name; the registered name matches every variant
        if k in g and str(g[k]) != str(have):
            return False
    return True


def _tpr_metric(metric: str) -> str | None:
    """The TPR-at-fixed-FPR key a gate metric reads (``tpr_at_1pct_fpr`` or one of its CI ends), else None."""
    for suf in ("", *_CI_SUFFIXES):
        base = metric[: len(metric) - len(suf)] if suf else metric
        if (not suf or metric.endswith(suf)) and base in FPR_OF:
            return base
    return None


def _check_resolvable(g: dict, r: Result) -> None:
    """BadInput for a gate on a TPR at an FPR the result's non-member count cannot resolve (reports show n/a)."""
    base = _tpr_metric(g["metric"])
    n = r.n_nonmembers
    if base is None or resolvable(base, n):
        return
    raise BadInput(f"{describe(g)}: {base} cannot be resolved with {int(n)} non-members in {r.label()} (a TPR at "
                   f"{FPR_LABEL[base]} FPR needs at least {math.ceil(1 / _fpr(base) - 1e-9)}; the smallest "
                   f"resolvable FPR here is 1/{int(n)} = {100 / int(n):.3g}%); gate on auc, asr or a CI of them, "
                   f"or attack with more non-members")


def _fpr(metric: str) -> float:
    return FPR_OF[metric]


AUDIT_EXCEEDS = "audit.exceeds_claim"


def audit_exceeds(g: dict, r: Result, results: list[Result]) -> tuple[float, str]:
    """``audit.exceeds_claim``: (1 when ``privbench audit`` flags the result else 0, the audit's reason). A result
    with no formal or claimed ε is bad input: the gate could never breach."""
    from .audit import audit_result  # lazy: reports.audit loads scipy; reports.gates does not

    claim = compared_claim(r.privacy)
    if r.kind != MEMBERSHIP or claim is None:
        raise BadInput(f"{describe(g)}: {r.label()} has no formal or claimed epsilon to audit against (give an "
                       f"outside model's claim with attack --model --claimed-epsilon E --claimed-delta D "
                       f"--claim-basis TEXT)" if r.kind == MEMBERSHIP else
                       f"{describe(g)}: {r.label()} is not a membership result; {AUDIT_EXCEEDS} needs one")
    family = sum(1 for x in results if x.kind == MEMBERSHIP and x.target_key() == r.target_key())
    a = audit_result(r, n_attacks=family)
    bounds = a.get("flag_bounds") or {}
    why = (f"an empirical lower bound (max {max(bounds.values()):.4g} at {a['flag_family']['bound_confidence']:.4g}) "
           f"exceeds the {KIND_LABEL[claim['kind']]} {claim['epsilon']:.4g} (comparable "
           f"{a['neighbouring_relation']['comparable_epsilon']:.4g})" if a["exceeds_claim"] and bounds
           else "the upload-mechanism audit exceeds the analytic epsilon" if a["exceeds_claim"] else "")
    return (1.0 if a["exceeds_claim"] else 0.0), why


def metric_value(r: Result, metric: str) -> tuple[float | None, bool]:
    """(value, known): known=False when the metric name is not available for this result."""
    m = r.metrics
    if metric == AUDIT_EXCEEDS:
        return None, True  # computed by check_gates (it needs the other results of the target)
    if metric == "privacy.epsilon":
        e = r.formal_epsilon
        return (math.inf if e is None else e), True
    if metric in m:
        v = m[metric]
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            return None, False
        return float(v), True
    for suf, i in _CI_SUFFIXES.items():
        if metric.endswith(suf):
            base = metric[: -len(suf)]
            ci = (m.get("ci95") or {})
            if base in ci:
                v = ci[base]
                return (float(v[i]) if v is not None else None), True
    return None, False


def _why_infinite(r: Result) -> str:
    return no_formal_reason(r.privacy, r.is_outside)


def _available(r: Result) -> list[str]:
    m = r.metrics
    keys = [k for k, v in m.items() if isinstance(v, (int, float)) and not isinstance(v, bool)]
    keys += [f"{k}{s}" for k in (m.get("ci95") or {}) for s in _CI_SUFFIXES]
    return keys + ["privacy.epsilon", AUDIT_EXCEEDS]


def check_gates(gates_path: str | Path, results: list[str]) -> tuple[list[str], int]:
    """Check every gate against every result it matches → (breach messages, number of checks made)."""
    gates = load_gates(gates_path)
    res = load_results(results)
    breaches: list[str] = []
    n_checked = 0
    for g in gates:
        matched = [r for r in res if _matches(g, r)]
        if not matched:
            if g.get("optional"):
                continue
            raise BadInput(f"{describe(g)} matched none of the {len(res)} results given ({present_pairs(res)}); a "
                           f"gate that checks nothing would pass silently (mark it optional: true to allow this)")
        for r in matched:
            _check_resolvable(g, r)
            v, known = metric_value(r, g["metric"])
            if not known:
                raise BadInput(f"{describe(g)}: unknown metric {g['metric']!r} for {r.attack} results; available: "
                               f"{', '.join(_available(r))}")
            why = ""
            if g["metric"] == AUDIT_EXCEEDS:
                v, why = audit_exceeds(g, r, res)
            n_checked += 1
            where = f"{r.label()} [{r.path}]"
            note = f"; note: {' '.join(str(g['note']).split())}" if g.get("note") not in (None, "") else ""
            if v is None or (isinstance(v, float) and math.isnan(v)):
                breaches.append(f"{describe(g)}: {g['metric']} is missing/NaN in {where}{note}")
                continue
            bad = []
            if "max" in g and r.kind == MEMBERSHIP and is_inverted(r.metrics.get("auc"),
                                                                   (r.metrics.get("ci95") or {}).get("auc")):
                # a ceiling on leakage must not pass because the attack's scores point the wrong way
                bad.append(f"AUC {r.metrics['auc']:.4g} is inverted (its 95 % CI lies below 0.5): the attack's "
                           f"premise fails on this target, so a max gate cannot pass on it")
            if "max" in g and not v <= float(g["max"]):
                bad.append(f"{v:.4g} > max {g['max']:g}")
            if "min" in g and not v >= float(g["min"]):
                bad.append(f"{v:.4g} < min {g['min']:g}")
            if bad:
                shown = f"inf ({_why_infinite(r)})" if math.isinf(v) else f"{v:.4g}" + (f" ({why})" if why else "")
                breaches.append(f"{describe(g)}: {g['metric']} = {shown} ({'; '.join(bad)}) in {where}{note}")
    return breaches, n_checked


def present_pairs(res: list[Result]) -> str:
    """What the results hold, for a gate that matched none: each method/target with its attacks."""
    pairs: dict[str, list[str]] = {}
    for r in res:
        attacks = pairs.setdefault(f"{r.method}/{r.target}", [])
        if r.attack not in attacks:
            attacks.append(r.attack)
    if not pairs:
        return "none"
    return "they hold " + "; ".join(f"{k} ({', '.join(v)})" for k, v in sorted(pairs.items()))


def skipped_optional(gates_path: str | Path, results: list[str]) -> list[str]:
    """Descriptions of optional gates that matched nothing (for the CLI's summary line)."""
    gates = load_gates(gates_path)
    res = load_results(results)
    return [describe(g) for g in gates if g.get("optional") and not any(_matches(g, r) for r in res)]
