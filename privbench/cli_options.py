"""The option groups of the ``privbench`` commands, each declared once and handed to a command as one frozen object
(:func:`option_group`): :class:`RunOptions`, the ``--model`` group's ``OutsideSpec`` and the bench's
``ExecutorOptions``; the checks that read them before torch loads; and :func:`lib`, which imports the library."""
from __future__ import annotations

import functools
import importlib
import os
from dataclasses import dataclass, replace
from pathlib import Path
from types import ModuleType
from typing import Any, Callable

import click
from click.core import ParameterSource

from .bench.executor_options import ExecutorOptions
from .core.config import MAX_SEED, Config, build_config, parse_set_args, refuse_unread_keys
from .core.errors import BadInput
from .core.threads import MAX_THREADS, configure_threads, env_world_size
from .core.validation import MAX_TARGET_NAME
from .runs.outside_spec import OutsideSpec


def lib(module: str) -> ModuleType:
    """``privbench.<module>``, imported when a command runs rather than with the CLI: each command loads only what
    it uses, so ``--help`` and ``list`` stay light (docs/scaling.md §5)."""
    return importlib.import_module(f"{__package__}.{module}")


def option_group(name: str, options: list, pack: Callable[..., Any]) -> Callable:
    """A decorator that adds ``options`` (click options, in help order) to a command and hands their values to it
    as one object, ``pack(**values)``, under the keyword ``name``."""
    def probe():
        pass

    for o in options:
        o(probe)
    names = [p.name for p in probe.__click_params__]

    def decorate(f):
        @functools.wraps(f)
        def packed(*args, **kwargs):
            kwargs[name] = pack(**{n: kwargs.pop(n) for n in names})
            return f(*args, **kwargs)

        for o in reversed(options):
            packed = o(packed)
        return packed

    return decorate


# ---------------------------------------------------------------------- every command that trains or attacks

@dataclass(frozen=True)
class RunOptions:
    """The options of every command that trains or attacks (:func:`common`)."""
    preset: str
    seed: int
    device: str
    runs_dir: str | None
    sets: tuple[str, ...]
    config_file: str | None
    data_root: str | None
    download: bool
    as_json: bool
    threads: int | None
    seed_given: bool = False  # --seed was on the command line (a config file's other seed is then refused)

    def config(self, method: str | None, dataset: str | None, sets=None) -> Config:
        """The Config of ``method`` on ``dataset`` (a path: the user's records, data/user_records.py) with the
        preset, seed, ``--data-root``, ``--download``, ``--config`` and ``sets`` (default: the ``--set`` list)."""
        overrides = parse_set_args(self.sets if sets is None else sets)
        user_records = lib("data.user_records")
        if user_records.is_records_path(dataset):
            dataset = user_records.register_records(dataset)
        if self.data_root:
            overrides.insert(0, ("data.data_root", self.data_root))
        if self.download:
            overrides.insert(0, ("data.download", "true"))
        cfg = build_config(method, dataset, self.preset, self.seed, overrides, self.config_file,
                           seed_given=self.seed_given)
        refuse_unread_keys(cfg.method, cfg.explicit)
        return cfg


_COMMON = [
    click.option("--preset", default="tiny", show_default=True, help="size/settings preset (privbench list presets)"),
    click.option("--seed", default=0, type=click.IntRange(0, MAX_SEED), show_default=True),
    click.option("--device", default="auto", type=click.Choice(["auto", "cpu", "cuda"]), show_default=True),
    click.option("--runs-dir", default=None, type=click.Path(file_okay=False),
                 help="run store (default ./runs or $PRIVBENCH_HOME)"),
    click.option("--set", "sets", multiple=True, metavar="KEY=VALUE",
                 help="override a config field, e.g. --set pfdm.t0=675 (repeatable)"),
    click.option("--config", "config_file", default=None, help="YAML file of config overrides"),
    click.option("--data-root", default=None, help="folder with torchvision-format datasets"),
    click.option("--download", is_flag=True, help="let torchvision download the dataset into --data-root"),
    click.option("--json", "as_json", is_flag=True, help="print one JSON object on stdout (progress on stderr)"),
    click.option("--threads", default=None, type=click.IntRange(1, MAX_THREADS),
                 help="CPU threads of this process [default: the cores it may use / concurrent workers]"),
]


def common(f):
    """The :class:`RunOptions` group, as ``opts``. The command runs as one process (under torchrun only ``train``
    does), after its input files are prechecked and its thread count is set."""
    @functools.wraps(f)
    def checked(*args, opts: RunOptions, **kwargs):
        if env_world_size() > 1 and f.__name__ != "train":
            raise BadInput(f"`privbench {f.__name__}` runs as one process; under torchrun (WORLD_SIZE="
                           f"{env_world_size()}) only `privbench train` does")
        spec = kwargs.get("model") or OutsideSpec(None)
        precheck_inputs({"dataset": kwargs.get("dataset"), "sets": opts.sets, "config_file": opts.config_file,
                         "members": spec.members_spec, "nonmembers": spec.nonmembers_spec,
                         "reference_data": spec.reference_data})
        configure_threads(opts.threads)  # imports torch: after the inputs are checked
        given = click.get_current_context().get_parameter_source("seed") not in (None, ParameterSource.DEFAULT)
        return f(*args, opts=replace(opts, seed_given=given), **kwargs)

    return option_group("opts", _COMMON, RunOptions)(checked)


def precheck_inputs(options: dict) -> None:
    """Refuse bad input files from their headers before anything imports torch (docs/cli.md §3, "Fast feedback");
    the full checks follow when the command loads them."""
    records_check = lib("data.records_check")
    for key in ("members", "nonmembers", "reference_data"):
        records_check.precheck_records(options.get(key))
    if records_check.is_records_path(options.get("dataset")):
        records_check.precheck_records(options["dataset"])
    parse_set_args(options.get("sets") or ())
    if options.get("config_file"):
        lib("core.yamlio").read_yaml(options["config_file"], f"--config {options['config_file']}")


# ---------------------------------------------------------------------- a model privbench did not train

def records_range_option():
    return click.option("--records-range", "records_range", default="auto", show_default=True,
                        type=click.Choice(["auto", "-1:1", "0:1", "0:255"]),
                        help="pixel range of --members/--nonmembers image arrays; auto: uint8 → 0:255, floats by "
                             "their values (all in [0, 1]: refused, say which)")


def outside(command: str, method: str | None, spec: OutsideSpec, opts: RunOptions) -> bool:
    """True for an outside model (--model), False for a method; refuses mixing the two (one line, exit 2)."""
    if spec.model_path is not None:
        if method is not None:
            raise BadInput("give --method (train and attack a privbench target) or --model (attack your model), "
                           "not both")
        if opts.config_file or opts.download:
            raise BadInput("--config and --download do not apply to --model (use --set attack.KEY=VALUE)")
        return True
    if method is None:
        raise BadInput(f"{command}: give --method NAME (a privbench target) or --model PATH (your own model)")
    if spec.records_range != "auto" or any(getattr(spec, k) is not None for k in _OUTSIDE_ONLY):
        raise BadInput("--members/--nonmembers/--arch/--scheduler-config/--split/--records-range/--lora/--caption/"
                       "--claimed-epsilon/--claimed-delta/--claim-basis/--reference-recipe/--reference-data need "
                       "--model (a privbench method's target carries its own accounting and references)")
    return False


_OUTSIDE_ONLY = ("members_spec", "nonmembers_spec", "arch", "scheduler_config", "split", "claim", "lora", "caption",
                 "reference_recipe", "reference_data")


def _outside_spec(claimed_epsilon, claimed_delta, claim_basis, **options) -> OutsideSpec:
    """The --model group's values, the claimed-ε options checked (before anything imports torch); the rest of the
    spec (target, dataset, preset, --set, device) comes from the command."""
    return OutsideSpec(claim=lib("privacy.claims").user_claim(claimed_epsilon, claimed_delta, claim_basis), **options)


model_options = option_group("model", [
    click.option("--model", "model_path", default=None, type=click.Path(),
                 help="attack a model privbench did not train: a diffusers pipeline or UNet2DModel folder, a "
                      "pytorch-ddpm ckpt.pt with --arch pytorch-ddpm, or a Hub id org/name already in the local "
                      "Hugging Face cache (never downloaded; safetensors only)"),
    click.option("--members", "members_spec", default=None,
                 help="with --model: member records (.npz, image folder, or .npy indices)"),
    click.option("--nonmembers", "nonmembers_spec", default=None, help="with --model: non-member records (same formats)"),
    click.option("--arch", default=None, type=click.Choice(["pytorch-ddpm"]), help="with --model: checkpoint format"),
    click.option("--scheduler-config", default=None, type=click.Path(),
                 help="with --model: a diffusers scheduler config (JSON or folder) overriding the model's own"),
    click.option("--split", default=None, type=click.Path(),
                 help="with --model: PIA/SecMI member split .npz (mia_train_idxs / mia_eval_idxs) into --dataset"),
    click.option("--ema/--no-ema", "use_ema", default=True, show_default=True,
                 help="pytorch-ddpm: ema_model or net_model weights"),
    click.option("--claimed-epsilon", default=None, type=float,
                 help="with --model: the ε your own DP training claims (with --claimed-delta and --claim-basis); "
                      "audit compares the empirical lower bounds with it; reports label it as your claim"),
    click.option("--claimed-delta", default=None, type=float, help="with --model: the δ of --claimed-epsilon"),
    click.option("--claim-basis", default=None,
                 help="with --model: what the claimed ε covers, e.g. 'DP-SGD, add/remove-one, PRV accountant'"),
    records_range_option(),
    click.option("--lora", default=None, type=click.Path(),
                 help="with --model (a Stable-Diffusion-layout pipeline): a LoRA adapter applied to its UNet "
                      "(pytorch_lora_weights.safetensors or its folder)"),
    click.option("--caption", default=None,
                 help="with a text-to-image --model: caption template for labelled records without captions, "
                      "e.g. 'a picture of the digit {word}' ({label}, {word}, {name})"),
    click.option("--reference-recipe", default=None, type=click.Path(dir_okay=False),
                 help="with --model: how to train reference models (lira, rmia, gsa): a YAML naming a shipped "
                      "recipe, or a .py with train(records, seed) -> folder (runs that code)"),
    click.option("--reference-data", default=None,
                 help="with --model: public records the references train on (qmia: its public non-members)"),
], _outside_spec)


def embedding_option(f):
    """``--embedding FILE``: the extract attack's TorchScript embedding (``attack.extract_embedding``)."""
    @functools.wraps(f)
    def with_embedding(*args, embedding=None, sets=(), **kwargs):
        if embedding:
            sets = tuple(sets) + (f"attack.extract_embedding={os.path.abspath(embedding)}",)
        return f(*args, sets=sets, **kwargs)

    return click.option("--embedding", default=None, type=click.Path(dir_okay=False),
                        help="extract: a TorchScript image embedding (e.g. SSCD) for the copy distance; never "
                             "downloaded")(with_embedding)


def model_folder(model_path) -> str:
    """``--model``: a path as given, or the local snapshot of a Hub id (models/hub_cache.py; never downloaded)."""
    hub_cache = lib("models.hub_cache")
    return hub_cache.resolve_hub_model(model_path) if hub_cache.is_hub_id(model_path) else model_path


def default_target_name(model_path) -> str:
    """The name an outside model's results carry without --target: its folder's name (a checkpoint file's
    folder; a Hub id's name), so that the rows of several models differ."""
    hub_cache = lib("models.hub_cache")
    if hub_cache.is_hub_id(model_path):
        return hub_cache.HUB_ID.match(str(model_path))["repo"].split("/", 1)[1]
    p = Path(str(model_path).rstrip("/\\"))
    name = p.name if p.is_dir() or not p.suffix else p.parent.name
    return "".join(ch for ch in name if ch.isprintable())[:MAX_TARGET_NAME] or "model"


# ---------------------------------------------------------------------- bench's executor

#: the --slurm-* options by parameter name, with their defaults: one set otherwise with another executor is refused
_SLURM_OPTIONS = {"partition": ("--slurm-partition", None), "gpus_per_task": ("--slurm-gpus-per-task", 0),
                  "time_train_min": ("--slurm-time-train", 1440), "time_cell_min": ("--slurm-time-cell", 240),
                  "cluster": ("--slurm-cluster", "slurm")}


def _executor(executor, jobs, address, retries, cpus_per_task, **slurm) -> ExecutorOptions:
    if executor != "slurm":
        given = [_SLURM_OPTIONS[k][0] for k, v in slurm.items() if v != _SLURM_OPTIONS[k][1]]
        if given:
            raise BadInput(f"{', '.join(given)}: only with --executor slurm")
    return ExecutorOptions(executor, jobs, retries, cpus_per_task, address, slurm if executor == "slurm" else None)


executor_options = option_group("executor", [
    click.option("--executor", default="local", show_default=True, type=click.Choice(["local", "ray", "slurm"]),
                 help="local: here (one after another, or --jobs at once); ray: each training and cell a Ray task "
                      "(privbench[ray]); slurm: each a Slurm job through submitit (privbench[slurm])"),
    click.option("--jobs", default=1, show_default=True, type=click.IntRange(1, 1024),
                 help="local: trainings and cells run at once in worker processes (the cores divided among them)"),
    click.option("--slurm-partition", "partition", default=_SLURM_OPTIONS["partition"][1],
                 help="slurm: the partition of every job"),
    click.option("--slurm-gpus-per-task", "gpus_per_task", default=_SLURM_OPTIONS["gpus_per_task"][1],
                 show_default=True, type=click.IntRange(0, 64),
                 help="slurm: GPUs of every job (use 1 with --device cuda)"),
    click.option("--slurm-time-train", "time_train_min", default=_SLURM_OPTIONS["time_train_min"][1],
                 show_default=True, type=click.IntRange(1, 525600),
                 help="slurm: time limit of a training job (minutes)"),
    click.option("--slurm-time-cell", "time_cell_min", default=_SLURM_OPTIONS["time_cell_min"][1],
                 show_default=True, type=click.IntRange(1, 525600),
                 help="slurm: time limit of a cell job (minutes)"),
    click.option("--slurm-cluster", "cluster", default=_SLURM_OPTIONS["cluster"][1], show_default=True,
                 type=click.Choice(["slurm", "local"]),
                 help="slurm: submitit's cluster (local: jobs as processes here, without Slurm; for tests)"),
    click.option("--address", default=None,
                 help="ray: the cluster (auto, HOST:PORT, ray://HOST:PORT; local: start a new one here; default: "
                      "$RAY_ADDRESS, else a cluster on this machine, else a new local one)"),
    click.option("--retries", default=None, type=click.IntRange(0, 100),
                 help="times a failed cell is tried again before it is recorded as failed (default: 1 with ray, 0 "
                      "local)"),
    click.option("--cpus-per-task", default=1, show_default=True, type=click.IntRange(1, MAX_THREADS),
                 help="ray, slurm: CPUs each task reserves, and the torch threads it uses"),
], _executor)
