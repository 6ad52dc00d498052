"""Suite files of ``privbench bench``: finding, reading and validating them (docs/cli.md §9)."""
from __future__ import annotations

import os
import re
from pathlib import Path
from typing import Any

from ..core.config import check_seed
from ..core.constants import MAX_SAMPLES
from ..core.errors import BadInput
from ..core.yamlio import read_yaml
from ..privacy.claims import user_claim
from .paper_claims import parse_claims

SUITE_KEYS = {"name", "description", "preset", "device", "datasets", "seeds", "set", "attacks", "methods", "fid",
              "samples", "external", "epsilons", "seeds_by_epsilon", "utility", "claims"}
#: ``method``: the registered method of an entry whose key is a variant's name (``dpdm-lora: {method: dpdm}``)
METHOD_KEYS = {"targets", "attacks", "set", "datasets", "role", "fid", "samples", "method", "epsilons", "utility",
               "seeds"}
#: an external target (a model privbench did not train): the options of ``privbench attack --model``
EXTERNAL_KEYS = {"model", "members", "nonmembers", "split", "dataset", "data_root", "arch", "scheduler_config", "ema",
                 "attacks", "set", "claimed_epsilon", "claimed_delta", "claim_basis", "records_range", "lora",
                 "caption", "reference_recipe", "reference_data"}
#: the user's privacy claim for an external model (privbench.privacy.claims.user_claim)
CLAIM_KEYS = ("claimed_epsilon", "claimed_delta", "claim_basis")
#: an external target's path keys: relative ones are resolved against the suite file's folder
EXTERNAL_PATHS = ("model", "members", "nonmembers", "split", "scheduler_config", "data_root", "lora",
                  "reference_recipe", "reference_data")
FID_KEYS = {"client", "n_per_class", "n_overall", "target", "sampler", "inception_weights", "kid", "heldout"}
DEFAULT_FID = {"client": 0, "n_per_class": 20, "n_overall": 256, "target": "auto", "sampler": None,
               "inception_weights": None, "kid": False, "heldout": False}


# ---------------------------------------------------------------------------------------------- suite files

SHIPPED = Path(__file__).resolve().parent  # {suites,gates}/*.yaml: package data


def suite_dirs() -> list[Path]:
    """Where a suite NAME is looked up: ``./benchmarks/suites`` (a user's own suites), then the shipped ones."""
    return [Path.cwd() / "benchmarks" / "suites", SHIPPED / "suites"]


def gate_dirs() -> list[Path]:
    """Where a gates NAME is looked up: ``./benchmarks/gates``, then the shipped ones."""
    return [Path.cwd() / "benchmarks" / "gates", SHIPPED / "gates"]


def _find_yaml(name: str, dirs: list[Path], option: str, what: str) -> Path:
    if not isinstance(name, (str, os.PathLike)) or not str(name):
        raise BadInput(f"{option}: expected a {what} name or a YAML path, got {type(name).__name__}")
    p = Path(name)
    if p.suffix in (".yaml", ".yml") or p.exists():
        if not p.is_file():
            raise BadInput(f"{option} {name}: {'not a regular file' if p.exists() else 'file not found'}")
        return p
    for d in dirs:
        for ext in (".yaml", ".yml"):
            c = d / f"{name}{ext}"
            if c.is_file():
                return c
    names = sorted({f.stem for d in dirs if d.is_dir() for f in d.glob("*.y*ml")})
    raise BadInput(f"{option} {name}: unknown {what}; available: {', '.join(names) or 'none found'} "
                   f"(or give a YAML path)")


def find_suite(suite: str) -> Path:
    return _find_yaml(suite, suite_dirs(), "--suite", "suite")


def find_gates(gates: str) -> Path:
    return _find_yaml(gates, gate_dirs(), "--gates", "gates file")


def as_list(v, what: str) -> list:
    if v is None:
        return []
    if isinstance(v, (str, int)):
        return [v]
    if not isinstance(v, list):
        raise BadInput(f"{what}: expected a list, got {type(v).__name__}")
    return v


def as_sets(v, what: str) -> list[tuple[str, Any]]:
    if v is None:
        return []
    if not isinstance(v, dict):
        raise BadInput(f"{what}: expected a mapping of key: value (e.g. train.steps: 2000)")
    return [(str(k), val) for k, val in v.items()]


#: a suite name becomes a folder name (``<runs-dir>/bench-<name>``): one path component, no traversal
NAME_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.-]{0,99}")


def check_name(name, what: str) -> str:
    """A name that becomes a file or folder name: letters, digits, ``_ . -``, not starting with a dot."""
    if not isinstance(name, (str, int)) or isinstance(name, bool) or not NAME_RE.fullmatch(str(name)):
        raise BadInput(f"{what}: {name!r} is not a valid name (letters, digits, _ . -, starting with a letter or "
                       f"digit, at most 100 characters): it names a folder")
    return str(name)


def load_suite(suite: str) -> tuple[dict, Path]:
    path = find_suite(suite)
    data = read_yaml(path, f"--suite {path}")
    if not isinstance(data, dict):
        raise BadInput(f"--suite {path}: expected a mapping (name, preset, datasets, seeds, methods, ...)")
    unknown = sorted(set(data) - SUITE_KEYS)
    if unknown:
        raise BadInput(f"--suite {path}: unknown key(s) {', '.join(unknown)}; allowed: {', '.join(sorted(SUITE_KEYS))}")
    if data.get("datasets") is not None:
        data["datasets"] = _record_paths(data["datasets"], path)
    ext = external_targets(data.get("external"), path)
    if "external" in data:  # (only then: the suite hash of a suite without the key is unchanged)
        data["external"] = ext
    if data.get("methods") is None and ext:
        data["methods"] = {}
    if not isinstance(data.get("methods"), dict) or not (data["methods"] or ext):
        raise BadInput(f"--suite {path}: 'methods' must map method names to their settings (or 'external' name "
                       f"external models)")
    for m, spec in data["methods"].items():
        if spec is not None and not isinstance(spec, dict):
            raise BadInput(f"--suite {path}: methods.{m}: expected a mapping (targets, attacks, set, ...)")
        bad = sorted(set(spec or {}) - METHOD_KEYS)
        if bad:
            raise BadInput(f"--suite {path}: methods.{m}: unknown key(s) {', '.join(bad)}; allowed: "
                           f"{', '.join(sorted(METHOD_KEYS))}")
    data.setdefault("name", path.stem)
    data["name"] = check_name(data["name"], f"--suite {path}: name")
    try:
        check_values(data)
        parse_claims(data.get("claims"))  # their grammar now; what they select once the grid is planned
    except BadInput as e:
        raise BadInput(f"--suite {path}: {e}") from None
    return data, path


#: per-method switches: ``false`` turns the suite's FID, sample grid or utility off for that entry
METHOD_SWITCHES = ("fid", "samples", "utility")


def check_values(data: dict) -> None:
    """The suite's values that no later step would check before training starts: the seeds, the sample grid, the
    per-method switches and the ε axis with its ``seeds_by_epsilon`` (one BadInput line naming the key)."""
    if "description" in data and data["description"] is not None and not isinstance(data["description"], str):
        raise BadInput(f"description: expected text, got {type(data['description']).__name__}")
    seeds = as_list(data.get("seeds", [0]), "seeds")
    seeds = [_seed(s, "seeds") for s in seeds]
    if not seeds or len(set(seeds)) != len(seeds):
        raise BadInput(f"seeds: expected a non-empty list of distinct seeds, got {data.get('seeds')!r}")
    samples_n(data)
    if data.get("fid") not in (None, False):
        fid_settings(data)
    utility_settings(data)
    axis = set(_epsilons(data["epsilons"], "epsilons")) if "epsilons" in data else set()
    for m, spec in (data.get("methods") or {}).items():
        spec = spec or {}
        for k in METHOD_SWITCHES:
            if k in spec and not isinstance(spec[k], bool):
                raise BadInput(f"methods.{m}.{k}: {spec[k]!r}; expected false (the suite's {k} off for this entry) "
                               f"or true")
        if "epsilons" in spec:
            axis |= set(_epsilons(spec["epsilons"], f"methods.{m}.epsilons"))
    by = data.get("seeds_by_epsilon")
    if by is None:
        return
    if not isinstance(by, dict):
        raise BadInput("seeds_by_epsilon: expected a mapping epsilon -> list of seeds")
    for k, v in by.items():
        e = _epsilon(k, "seeds_by_epsilon")
        if e not in axis:
            on = ", ".join(f"{x:g}" for x in sorted(axis)) or "none: the suite has no epsilons"
            raise BadInput(f"seeds_by_epsilon: epsilon {e:g} is not on the epsilons axis ({on}); its seeds would "
                           f"never run")
        own = [_seed(s, f"seeds_by_epsilon.{e:g}") for s in as_list(v, f"seeds_by_epsilon.{e:g}")]
        if not own or len(set(own)) != len(own):
            raise BadInput(f"seeds_by_epsilon.{e:g}: expected a non-empty list of distinct seeds, got {v!r}")


def _epsilons(v, where: str) -> list[float]:
    """A non-empty list of distinct finite ε > 0 (an empty one would silently drop every private method's cells)."""
    values = [_epsilon(e, where) for e in as_list(v, where)]
    if not values:
        raise BadInput(f"{where}: empty; give at least one epsilon, or leave the key out")
    if len(set(values)) != len(values):
        raise BadInput(f"{where}: {values} repeats a value")
    return values


def _record_paths(datasets, path: Path):
    """``datasets:`` entries, a path to the user's records resolved against the suite's folder."""
    from ..data.user_records import is_records_path  # lazy: data.user_records imports torch; bench.suite does not

    def resolve(name):
        name = str(name)
        if not is_records_path(name):
            return name
        p = Path(name).expanduser()
        p = p if p.is_absolute() else path.resolve().parent / p
        if not p.exists():
            raise BadInput(f"--suite {path}: datasets: {name}: no such file or folder (relative paths are read "
                           f"from the suite's folder, {path.resolve().parent})")
        return str(p)

    items = datasets if isinstance(datasets, list) else [datasets]
    out = [resolve(i) if isinstance(i, (str, Path)) else
           {resolve(k): v for k, v in i.items()} if isinstance(i, dict) else i for i in items]
    return out if isinstance(datasets, list) else out[0]


def external_targets(ext, path: Path) -> dict[str, dict]:
    """The suite's ``external:`` entries, checked, their paths resolved against the suite file's folder."""
    if ext is None:
        return {}
    where = f"--suite {path}: external"
    if not isinstance(ext, dict):
        raise BadInput(f"{where}: expected a mapping of target name -> {{model, members, nonmembers, ...}}")
    out = {}
    for name, spec in ext.items():
        name = check_name(name, where)
        if not isinstance(spec, dict):
            raise BadInput(f"{where}.{name}: expected a mapping (model, members, nonmembers, arch, attacks, ...)")
        bad = sorted(set(spec) - EXTERNAL_KEYS)
        if bad:
            raise BadInput(f"{where}.{name}: unknown key(s) {', '.join(map(str, bad))}; allowed: "
                           f"{', '.join(sorted(EXTERNAL_KEYS))}")
        spec = dict(spec)
        if not spec.get("model"):
            raise BadInput(f"{where}.{name}: 'model' (a diffusers folder or a pytorch-ddpm ckpt.pt) is required")
        if spec.get("split") is None and (not spec.get("members") or not spec.get("nonmembers")):
            raise BadInput(f"{where}.{name}: give 'members' and 'nonmembers' (or 'split' with 'dataset')")
        for k in EXTERNAL_PATHS:
            v = spec.get(k)
            if v is None:
                continue
            if not isinstance(v, str) or not v:
                raise BadInput(f"{where}.{name}.{k}: expected a path, got {v!r}")
            p = Path(v).expanduser()
            spec[k] = str(p if p.is_absolute() else path.resolve().parent / p)
            if k != "data_root" and not Path(spec[k]).exists():
                raise BadInput(f"{where}.{name}.{k}: {spec[k]}: no such file or directory")
        if spec.get("arch") not in (None, "diffusers", "pytorch-ddpm"):
            raise BadInput(f"{where}.{name}.arch: {spec['arch']!r}; choose diffusers or pytorch-ddpm")
        if not isinstance(spec.get("ema", True), bool):
            raise BadInput(f"{where}.{name}.ema: expected true or false")
        try:
            user_claim(*(spec.get(k) for k in CLAIM_KEYS))
        except BadInput as e:
            raise BadInput(f"{where}.{name}: {str(e).replace('--claimed-', 'claimed_').replace('--claim-', 'claim_')}"
                           ) from None
        out[name] = spec
    return out


def epsilon_axis(suite: dict, spec: dict, seeds: list[int], private: bool, where: str) -> list[tuple[float | None, list]]:
    """[(ε, seeds)] of one method entry, by the rules of ``epsilons``, ``seeds_by_epsilon`` and an entry's
    ``seeds`` (docs/cli.md §9); ε None: no axis, or a non-private method (ε = ∞), which runs every seed the axis
    uses so that its horizontal reference gets the CI of all of them."""
    eps = spec.get("epsilons", suite.get("epsilons"))
    own = None
    if "seeds" in spec:
        own = [_seed(s, f"{where}.seeds") for s in as_list(spec["seeds"], f"{where}.seeds")]
        if not own or len(set(own)) != len(own):
            raise BadInput(f"{where}.seeds: expected a non-empty list of distinct seeds, got {spec['seeds']!r}")
    by = suite.get("seeds_by_epsilon") or {}
    if not isinstance(by, dict):
        raise BadInput("seeds_by_epsilon: expected a mapping epsilon -> list of seeds")
    by = {_epsilon(k, "seeds_by_epsilon"): [_seed(s, "seeds_by_epsilon") for s in as_list(v, "seeds_by_epsilon")]
          for k, v in by.items()}
    if eps is None:
        return [(None, own or seeds)]
    values = _epsilons(eps, f"{where}.epsilons")
    if not private:
        return [(None, own or sorted(set(seeds).union(*[by.get(e, seeds) for e in values])))]
    return [(e, own or by.get(e, seeds)) for e in values]


def _epsilon(v, where: str) -> float:
    if isinstance(v, bool) or not isinstance(v, (int, float)) or not 0 < float(v) < float("inf"):
        raise BadInput(f"{where}: {v!r} is not a finite epsilon > 0")
    return float(v)


def _seed(v, where: str) -> int:
    return check_seed(v, where)


def fid_settings(suite: dict) -> dict:
    f = suite.get("fid")
    f = {} if f in (True, None) else f
    if not isinstance(f, dict):
        raise BadInput("fid: expected false or a mapping (client, n_per_class, n_overall, target)")
    bad = sorted(set(f) - FID_KEYS)
    if bad:
        raise BadInput(f"fid: unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(FID_KEYS))}")
    out = {**DEFAULT_FID, **f}
    if out["sampler"] not in (None, "ddpm", "ddim"):
        raise BadInput(f"fid.sampler: {out['sampler']!r}; choose ddpm or ddim (default: sample.sampler)")
    for k in ("kid", "heldout"):
        if not isinstance(out[k], bool):
            raise BadInput(f"fid.{k}: expected true or false, got {out[k]!r}")
    for k in ("client", "n_per_class", "n_overall"):
        if isinstance(out[k], bool) or not isinstance(out[k], int) or not 0 <= out[k] <= MAX_SAMPLES:
            raise BadInput(f"fid.{k}: expected an integer in [0, {MAX_SAMPLES}], got {out[k]!r}")
    w = out["inception_weights"]
    if w is not None and not (isinstance(w, str) and Path(w).is_file()):
        raise BadInput(f"--inception-weights {w}: file not found")
    return out


UTILITY_KEYS = {"n_per_class", "epochs", "target"}
#: the downstream classifier's epochs at most (30 by default; a small CNN on a few thousand samples)
MAX_UTILITY_EPOCHS = 10_000


def utility_settings(suite: dict) -> dict | None:
    """The suite's ``utility:`` settings, checked (None when absent or false)."""
    u = suite.get("utility")
    if u in (None, False):
        return None
    u = {} if u is True else u
    if not isinstance(u, dict) or set(u) - UTILITY_KEYS:
        raise BadInput(f"utility: expected true or a mapping with keys {', '.join(sorted(UTILITY_KEYS))}")
    out = {"n_per_class": 50, "epochs": 30, "target": "auto", **u}
    for k, top in (("n_per_class", MAX_SAMPLES), ("epochs", MAX_UTILITY_EPOCHS)):
        if isinstance(out[k], bool) or not isinstance(out[k], int) or not 1 <= out[k] <= top:
            raise BadInput(f"utility.{k}: expected an integer in [1, {top}], got {out[k]!r}")
    if not isinstance(out["target"], str):
        raise BadInput(f"utility.target: expected a target name or auto, got {out['target']!r}")
    return out


SAMPLES_KEYS = {"n"}


def samples_n(suite: dict) -> int:
    """Samples per grid of ``samples: {n: N}`` (32 when ``n`` is not given): BadInput for anything else."""
    sp = suite.get("samples")
    if sp in (None, False, True):
        return 32
    if not isinstance(sp, dict):
        raise BadInput(f"samples: {sp!r}; expected false, true or {{n: N}}")
    bad = sorted(map(str, set(sp) - SAMPLES_KEYS))
    if bad:
        raise BadInput(f"samples: unknown key(s) {', '.join(bad)}; allowed: {', '.join(sorted(SAMPLES_KEYS))}")
    n = sp.get("n", 32)
    if isinstance(n, bool) or not isinstance(n, int) or not 1 <= n <= MAX_SAMPLES:
        raise BadInput(f"samples.n: {n!r}; expected an integer in [1, {MAX_SAMPLES}]")
    return n
