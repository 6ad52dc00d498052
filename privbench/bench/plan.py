"""The grid of a bench: every (method, dataset, seed, target, attack) cell, planned and validated before anything
runs; each cell keeps the hashes that say whether its cached result is still valid."""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from ..attacks.base import split_label
from ..core.config import build_config, check_seed, config_hash, preset_dataset, refuse_unread_keys
from ..core.constants import OUTSIDE
from ..core.errors import BadInput
from ..core.io import safe_name
from ..core.registry import ATTACKS, METHODS
from ..core.schema import not_a_key
from ..data.splits import CLIENT_SECTION
from ..data.user_records import is_records_path, register_records
from ..privacy.claims import user_claim
from ..runs.attack import attack_dir, attack_hash, make_attack
from ..runs.external import SETTING_SECTIONS, OutsideSpec, load_external_target
from ..runs.store import run_dir_for
from ..runs.train import make_method
from ..runs.utility import utility_path
from .cell_schema import BenchCell
from .suite import CLAIM_KEYS, as_list, as_sets, epsilon_axis, fid_settings, samples_n, utility_settings


@dataclass
class Cell(BenchCell):
    """A planned cell: what bench.json records of it (:class:`~privbench.bench.cell_schema.BenchCell`, its
    ``to_json``) plus what only this process needs to run it."""
    cfg: Any = not_a_key()
    shared: tuple = not_a_key(())  # cached trainings the run's training shares (Method.shared_trainings)

    def label(self) -> str:
        what = self.attack if self.kind == "attack" else self.kind
        eps = f", epsilon {self.epsilon:g}" if self.epsilon is not None else ""
        return f"{self.variant or self.method}/{self.target} {what} ({self.dataset}, seed {self.seed}{eps})"


def _datasets(spec_ds, default) -> list[tuple[str, list]]:
    """(dataset name, its --set overrides) per entry; a path is registered as ``--dataset PATH`` registers it."""
    out = []
    for item in as_list(spec_ds if spec_ds is not None else default, "datasets"):
        if isinstance(item, str):
            name, sets = item, []
        elif isinstance(item, dict) and len(item) == 1:
            (name, sets), = item.items()
            name, sets = str(name), as_sets(sets, f"datasets.{name}")
        else:
            raise BadInput(f"datasets: entries are names or {{name: {{key: value}}}}, got {item!r}")
        out.append((register_records(name) if is_records_path(name) else name, sets))
    if not out:
        raise BadInput("suite: no datasets given")
    return out


def _attacks_for(spec_attacks, default: list, target: str, method: str) -> list[str]:
    if spec_attacks is None:
        return list(default)
    if isinstance(spec_attacks, list):
        return [str(a) for a in spec_attacks]
    if isinstance(spec_attacks, dict):
        return [str(a) for a in as_list(spec_attacks.get(target, []), f"methods.{method}.attacks.{target}")]
    raise BadInput(f"methods.{method}.attacks: expected a list or a mapping target -> list")


def plan(suite: dict, *, preset: str | None, sets: list[tuple[str, Any]], runs_dir, device: str,
         validate_methods: bool = True) -> list[Cell]:
    """Expand and validate the whole grid before anything is trained (BadInput on any bad name or value).

    ``validate_methods`` also runs each untrained method's own checks (DP methods calibrate their noise there).
    A suite's default attacks are planned for the targets they apply to; attacks listed for a target explicitly
    must apply to it."""
    preset = preset or suite.get("preset") or "tiny"
    seeds = as_list(suite.get("seeds", [0]), "seeds")
    seeds = [check_seed(s, "seeds") for s in seeds]
    explicit_default = "attacks" in suite
    default_attacks = [str(a) for a in as_list(suite.get("attacks", ATTACKS.names()), "attacks")]
    for a in default_attacks:
        ATTACKS.get(split_label(a)[0])  # a label: name or name@variant (lira@online)
    fid_on = suite.get("fid", False) not in (False, None)
    fcfg = fid_settings(suite) if fid_on else None  # validated before anything else
    samples_on = suite.get("samples", False) not in (False, None)
    ucfg = utility_settings(suite)
    cells: list[Cell] = []
    checked_data: set = set()
    for entry, spec in suite["methods"].items():
        spec = spec or {}
        entry = str(entry)
        mname, variant, factory, role = _entry_method(entry, spec)
        msets = as_sets(spec.get("set"), f"methods.{entry}.set")
        # every method's client FID (the paper's Table 1) reads the client split
        refuse_unread_keys(mname, [k for k, _ in msets], f"suite, methods.{entry}.set: ", also=(CLIENT_SECTION,))
        axis = epsilon_axis(suite, spec, [int(s) for s in seeds], bool(factory.private), f"methods.{entry}")
        for ds, dsets, eps, seed in ((ds, dsets, eps, seed)
                                     for ds, dsets in _datasets(spec.get("datasets"), suite.get("datasets", [preset_dataset(preset)]))
                                     for eps, eps_seeds in axis for seed in eps_seeds):
            base = dict(method=mname, dataset=ds, seed=int(seed), role=role, variant=variant, epsilon=eps)
            overrides = as_sets(suite.get("set"), "set") + msets + dsets + list(sets)
            cfg, overrides = _run_config(entry, factory, ds, preset, int(seed), eps, overrides)
            targets = [str(t) for t in as_list(spec.get("targets"), f"methods.{mname}.targets")]
            rd = run_dir_for(cfg, runs_dir)
            method = make_method(cfg, rd, device)
            key = (cfg.dataset, cfg.data.data_root, cfg.data.resolution)
            if key not in checked_data:
                method.ctx.dataset  # noqa: B018 - a missing dataset / data root is bad input, now
                checked_data.add(key)
            if validate_methods and not (rd / "train_done.json").is_file():
                method.validate()
            targets = [method.check_target(t) for t in (targets or [method.default_target])]
            common = dict(base, overrides=overrides, cfg=cfg, run_dir=str(rd), config_hash=cfg.training_hash(),
                          shared=tuple(method.shared_trainings()))
            for t in targets:
                cells += _attack_cells(cells, spec, default_attacks, explicit_default, t, cfg, rd, common)
            cells += _sample_cells(suite, spec, method, targets, common, samples_on, fcfg, ucfg)
    for name, espec in (suite.get("external") or {}).items():
        cells += _external_cells(str(name), espec, suite, preset, seeds, sets, runs_dir, default_attacks)
    for c in cells:
        c.id = "|".join(str(x) for x in (c.kind, c.method, c.dataset, c.seed, c.target, c.attack, c.config_hash,
                                          c.attack_hash or c.settings_hash))
    return cells


def _entry_method(entry: str, spec: dict) -> tuple[str, str | None, Any, str]:
    """(method name, variant name or None, method factory, role) of a suite's ``methods`` entry."""
    mname = str(spec.get("method", entry))  # an entry named after a variant says its method
    variant = entry if entry != mname else None
    if mname not in METHODS:
        raise BadInput(f"suite methods: unknown method {mname!r}; choose from {', '.join(METHODS.names())}")
    factory = METHODS.get(mname).factory
    role = spec.get("role") or ("private" if factory.private else "baseline")
    if role not in ("private", "baseline"):
        raise BadInput(f"methods.{entry}.role: {role!r}; choose private or baseline")
    return mname, variant, factory, role


def _sample_cells(suite: dict, spec: dict, method, targets: list[str], common: dict, samples_on: bool,
                  fcfg: dict | None, ucfg) -> list[Cell]:
    """The sample grid per target, FID and utility cells of one run (each unless the suite or entry turns it off)."""
    out: list[Cell] = []
    if samples_on and spec.get("samples", True) is not False:
        out += [Cell("samples", target=t, settings_hash=samples_settings_hash(common["cfg"], suite), **common)
                for t in targets]
    if fcfg is not None and spec.get("fid", True) is not False:
        ft = fcfg["target"]
        ft = method.fid_target(int(fcfg["client"])) if ft == "auto" else method.check_target(ft)
        c = Cell("fid", target=ft, **common)
        c.settings_hash, c.result_path = fid_settings_hash(c, fcfg), str(fid_record_path(c, fcfg))
        out.append(c)
    if ucfg is not None and spec.get("utility", True) is not False and method.ctx.num_classes:
        out.append(_utility_cell(common, method, ucfg))
    return out


def _run_config(entry: str, factory, ds: str, preset: str, seed: int, eps, overrides: list):
    """(config, overrides) of one method entry on one dataset, seed and ε (which adds e.g. dp.epsilon)."""
    mname = factory.name
    if eps is not None:
        try:
            pre = build_config(mname, ds, preset, seed, overrides)
            overrides = overrides + list(factory.epsilon_settings(pre, eps) or [])
        except BadInput as e:
            raise BadInput(f"suite, {entry} at epsilon {eps:g} on {ds}: {e}") from None
    try:
        return build_config(mname, ds, preset, seed, overrides), overrides
    except BadInput as e:
        raise BadInput(f"suite, method {mname} on {ds}: {e}") from None


def _attack_cells(cells: list, spec: dict, default_attacks: list[str], explicit_default: bool, t: str, cfg, rd,
                  common: dict) -> list:
    """The attack cells of one target: the entry's attacks (or the suite's defaults that apply to it), each once."""
    mname, listed, out = cfg.method, spec.get("attacks") is not None, []
    for a in _attacks_for(spec.get("attacks"), default_attacks, t, mname):
        if split_label(a)[0] not in ATTACKS:
            raise BadInput(f"suite, method {mname}: unknown attack {a!r}; choose from {', '.join(ATTACKS.names())}")
        att = make_attack(cfg, a, strict=False)
        if not att.applies(t):
            if listed or explicit_default:
                raise BadInput(f"suite, method {mname}: attack {a} does not apply to target {t} "
                               f"(it attacks: {', '.join(att.applies_to)})")
            continue
        a = att.label  # canonical: lira@offline is lira (the default variant)
        if any(c.kind == "attack" and c.target == t and c.attack == a and c.run_dir == str(rd) for c in cells + out):
            continue
        out.append(Cell("attack", target=t, attack=a, attack_hash=attack_hash(att, cfg, t),
                        result_path=str(attack_dir(rd, att, cfg, t) / "result.json"), **common))
    return out


def _external_cells(name: str, espec: dict, suite: dict, preset: str, seeds: list, sets: list, runs_dir,
                    default_attacks: list[str]) -> list[Cell]:
    """The attack cells of one external target (docs/cli.md §9): the model and its records are loaded and checked
    now, on the CPU; each cell's run directory is the one ``privbench attack --model`` would write."""
    where = f"suite, external target {name}"
    shared = [(k, v) for k, v in as_sets(suite.get("set"), "set") + list(sets)
              if k.split(".", 1)[0] in SETTING_SECTIONS]
    esets = tuple(shared + as_sets(espec.get("set"), f"external.{name}.set"))
    opts = dict(model_path=espec["model"], members_spec=espec.get("members"),
                nonmembers_spec=espec.get("nonmembers"), split=espec.get("split"), dataset=espec.get("dataset"),
                data_root=espec.get("data_root"), arch=espec.get("arch"),
                scheduler_config=espec.get("scheduler_config"), use_ema=bool(espec.get("ema", True)),
                target_name=name, claim=user_claim(*(espec.get(k) for k in CLAIM_KEYS)),
                records_range=str(espec.get("records_range", "auto")), lora=espec.get("lora"),
                caption=espec.get("caption"), reference_recipe=espec.get("reference_recipe"),
                reference_data=espec.get("reference_data"))
    try:
        ext = load_external_target(OutsideSpec(**opts, preset=preset, sets=esets, device="cpu"))
    except BadInput as e:
        raise BadInput(f"{where}: {e}") from None
    listed = espec.get("attacks") is not None
    names = [str(a) for a in as_list(espec.get("attacks"), f"external.{name}.attacks")] if listed \
        else list(default_attacks)
    cells = []
    for seed in seeds:
        for a in names:
            try:
                att, source = ext.plan(a, int(seed), runs_dir=runs_dir, strict=False)
            except BadInput as e:
                if listed:
                    raise BadInput(f"{where}: {e}") from None
                continue  # a suite default that does not apply to an external model (reconstruction, lira, ...)
            cfg, rd = source.cfg, source.run_dir
            cells.append(Cell("attack", method=OUTSIDE, dataset=cfg.dataset, seed=int(seed), target=name,
                              attack=a, role=OUTSIDE, overrides=list(esets), cfg=cfg, run_dir=str(rd),
                              config_hash=ext.prov.get("weights_sha256"), attack_hash=rd.name.split("-", 1)[1],
                              result_path=str(rd / "result.json"),
                              external={"sets": list(esets), "preset": preset, **opts}))
    return cells


def _utility_cell(common: dict, method, ucfg: dict) -> Cell:
    """The utility cell of a run (downstream accuracy, precision/recall, class fidelity of its default target)."""
    if not common["cfg"].data.n_test:  # the downstream classifier is scored on the test split: none, no score
        raise BadInput(f"utility of {common['method']} on {common['dataset']}: the run has no test split; set "
                       f"data.n_test (e.g. 300)")
    target = method.check_target(ucfg["target"]) if ucfg["target"] != "auto" else method.default_target
    path = utility_path(common["run_dir"], common["cfg"], target, ucfg["n_per_class"], ucfg["epochs"])
    return Cell("utility", target=target, settings_hash=path.stem.rsplit("-", 1)[1], result_path=str(path),
                utility={"n_per_class": ucfg["n_per_class"], "epochs": ucfg["epochs"]}, **common)


def samples_settings_hash(cfg, suite: dict) -> str:
    # sample.batch_size too: each batch of the chain draws its noise from its own generator
    return config_hash({"n": samples_n(suite), "seed": cfg.seed, "sampler": cfg.sample.sampler,
                        "ddim_steps": cfg.sample.ddim_steps, "batch_size": cfg.sample.batch_size})


def fid_settings_hash(c: Cell, fcfg: dict) -> str:
    return config_hash({"target": c.target, "seed": c.seed, **{k: fcfg[k] for k in ("client", "n_per_class",
                                                                                      "n_overall")},
                        "sampler": fcfg.get("sampler") or c.cfg.sample.sampler,
                        "ddim_steps": c.cfg.sample.ddim_steps, "batch_size": c.cfg.sample.batch_size, "version": 1,
                        # only when set: the default extractor's records are named without it
                        **({"inception_weights": Path(fcfg["inception_weights"]).name}
                           if fcfg.get("inception_weights") else {}),
                        **{k: True for k in ("kid", "heldout") if fcfg.get(k)}})


def fid_record_path(c: Cell, fcfg: dict) -> Path:
    return Path(c.run_dir) / "fid" / f"fid-{safe_name(c.target)}-{fid_settings_hash(c, fcfg)}.json"


