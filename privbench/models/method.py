"""What every training method shares: the run context (config, data, splits, device) and the Method API.

A Method trains inside its run directory (idempotent, resumable) and yields named Targets. Each is one file in
``privbench/models/methods/`` whose class registers itself (``@METHODS.register_class``) and declares, as class
attributes, what the rest of privbench needs to know about it (docs/methods.md).
"""
from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property
from pathlib import Path

import torch

from ..core.errors import BadInput
from ..core.io import append_log, atomic_write_text
from ..core.ranks import rank_target
from ..core.registry import METHODS
from ..core.schedule import Schedule
from ..data.base import dataset_info, extractor_split, load_dataset
from ..data.splits import ClientSplit, MemberSplit, class_matched, config_client_split, partition
from .public_init import load_into, pretrain_dir, pretrain_settings, pretrained_denoiser, public_hash
from .target import Target
from .unet import Denoiser, build_denoiser


def resolve_device(device: str | None) -> torch.device:
    if device in (None, "auto"):
        return torch.device("cuda" if torch.cuda.is_available() else "cpu")
    if device == "cuda" and not torch.cuda.is_available():
        raise BadInput("--device cuda: no CUDA device is available here; use --device cpu or auto")
    if device not in ("cpu", "cuda") and not str(device).startswith("cuda:"):
        raise BadInput(f"--device {device!r}: choose auto, cpu or cuda")
    return torch.device(device)


def public_size(cfg) -> int:
    """Records of the run's public split: ``data.n_public`` (0: ``data.n_members`` under ``pool``, every record of
    the public classes under ``classes:A-B``); under ``none`` only what the method asks for (``public_demand``)."""
    d = cfg.data
    if d.public == "pool":
        return d.n_public or d.n_members
    if d.public != "none":
        return d.n_public
    factory = METHODS.get(cfg.method).factory
    demand = getattr(factory, "public_demand", None)
    return int(demand(cfg)) if demand is not None else 0


def run_partition(cfg, labels) -> MemberSplit:
    """The partition (members, non-members, public) of a run with config ``cfg``: one function of the seed, outside
    the dataset's extractor split."""
    d = cfg.data
    owner = "data.n_public" if d.public != "none" else getattr(METHODS.get(cfg.method).factory, "public_demand_key",
                                                                "data.n_public")
    labels = labels.numpy() if isinstance(labels, torch.Tensor) else labels
    return partition(labels, d.n_members, d.n_nonmembers, cfg.seed, d.public, public_size(cfg), owner, d.n_test,
                     extractor_split(cfg.dataset, labels))


def _stored_or_written(path: Path, derived, parse):
    """The split stored at ``path``, which must equal ``derived`` (a split is a function of the config and seed: one
    that differs was edited, even if its hash in train_done.json was too); ``derived``, written there, when absent."""
    if not path.exists():
        atomic_write_text(path, derived.to_json())
        return derived
    try:
        stored = parse(path.read_text())
    except BadInput as e:
        raise BadInput(f"{path}: {e}; remove the run directory to retrain it") from None
    if stored != derived:
        raise BadInput(f"{path}: differs from the split this config and seed give; remove it and `privbench train` "
                       f"rewrites it")
    return stored


@dataclass
class RunContext:
    cfg: object
    run_dir: Path
    device: torch.device
    #: an explicit member split (reference models: a random half of a pool), used instead of the seeded one
    split_override: MemberSplit | None = None
    #: where shared artefacts of several runs live (the public pre-training); default: the run's parent folder
    runs_root: Path | None = None

    @property
    def store_root(self) -> Path:
        return Path(self.runs_root) if self.runs_root is not None else self.run_dir.parent

    @property
    def ckpt_dir(self) -> Path:
        return self.run_dir / "checkpoints"

    @cached_property
    def dataset(self) -> tuple[torch.Tensor, torch.Tensor]:
        d = self.cfg.data
        return load_dataset(self.cfg.dataset, d.data_root or None, d.download, d.resolution)

    @property
    def info(self):
        return dataset_info(self.cfg.dataset)

    @property
    def image_shape(self) -> tuple[int, int, int]:
        return tuple(self.dataset[0].shape[1:])

    @cached_property
    def split(self) -> MemberSplit:
        """The run's member split (split.json: :meth:`write_split`)."""
        return self.write_split()

    @cached_property
    def clients(self) -> ClientSplit:
        """The run's client split (clients.json: :meth:`write_clients`)."""
        return self.write_clients()

    def write_split(self) -> MemberSplit:
        """The member split, from split.json, or derived from the config and seed (or the override) and written
        there when absent: every finished run holds the split its targets were trained on (attacks read it)."""
        path = self.run_dir / "split.json"
        if self.split_override is not None:
            if not path.exists():
                atomic_write_text(path, self.split_override.to_json())
            return self.split_override
        return _stored_or_written(path, run_partition(self.cfg, self.dataset[1]), MemberSplit.from_json)

    def write_clients(self) -> ClientSplit:
        """The client split, from clients.json, or derived from the config, seed and member split and written there
        when absent."""
        s = config_client_split(self.cfg, self.split.members, self.dataset[1].numpy(), self.info.num_classes)
        return _stored_or_written(self.run_dir / "clients.json", s, ClientSplit.from_json)

    def records(self, indices) -> tuple[torch.Tensor, torch.Tensor]:
        idx = torch.as_tensor(list(indices), dtype=torch.long)
        x, y = self.dataset
        return x[idx], y[idx]

    @property
    def schedule(self) -> Schedule:
        return Schedule.from_config(self.cfg.diffusion)

    @property
    def num_classes(self) -> int | None:
        return self.info.num_classes if self.cfg.model.class_conditional else None

    def new_denoiser(self, num_extra: int = 0) -> Denoiser:
        return self.build_denoiser(self.cfg.seed, num_extra)  # same init for the same config and seed

    def build_denoiser(self, seed: int, num_extra: int = 0) -> Denoiser:
        c, h, _ = self.image_shape
        torch.manual_seed(seed)
        return build_denoiser(self.cfg.model, c, h, self.info.num_classes, num_extra)

    def initial_denoiser(self, num_extra: int = 0) -> Denoiser:
        """The network a method starts training from: seeded (``train.init=scratch``) or the public pre-training's
        weights (``train.init=public``, :mod:`privbench.models.public_init`; cached, trained on first use)."""
        model = self.new_denoiser(num_extra)
        if self.cfg.train.init != "public":
            return model
        fresh = load_into(model, pretrained_denoiser(self))
        self.log(f"[init] from the public pre-training ({len(self.split.public)} public records)"
                 + (f"; {', '.join(fresh)} keep their seeded initialisation" if fresh else ""))
        return model

    def init_record(self) -> dict:
        """What the trained networks started from, for result.json and the report: ``scratch``, or the public
        pre-training (its public split's mode, size and content hash, steps, folder)."""
        if self.cfg.train.init != "public":
            return {"init": "scratch"}
        return {"init": "public", "public_mode": self.split.public_mode, "n_public": len(self.split.public),
                "public_sha256": public_hash(self.split.public), "pretrain_steps": pretrain_settings(self.cfg)["steps"],
                "pretrain_dir": pretrain_dir(self).name}

    def log(self, msg: str) -> None:
        append_log(self.run_dir, msg)


class Method:
    """Base class. Subclasses set the class attributes below and implement ``train`` and ``load_target``."""
    name = "?"
    description = ""
    default_target = "model"
    #: True for a method whose purpose is privacy (its report rows come first, its role defaults to "private")
    private = False
    #: report order among methods (lower first)
    report_order = 100
    #: report order of target kinds ("shared" for "shared", "client" for "client:K"); unknown kinds go last
    target_order: tuple[str, ...] = ("model",)
    #: config the method reads besides data/model/diffusion/train ("section" or "section.key"); only these enter
    #: the config hash that names its run. None = every training section (safe for a method that does not say).
    config_keys: tuple[str, ...] | None = None
    #: config keys shown with its results in reports' provenance
    provenance_keys: tuple[str, ...] = ()
    #: why one of its targets can score exactly as another target does (reports add it as a note when two rows
    #: of one attack have identical scores); a literal string, read without importing the method
    coinciding_note = ""
    #: whether reference-model attacks (LiRA, RMIA, …) can train this method's reference models and query them
    #: with the target's records
    reference_models = True
    #: whether its targets are text-conditional (records queried with captions: CLiD applies)
    text_conditional = False

    @classmethod
    def target_kind(cls, target: str) -> str:
        """``client:3`` → ``client``."""
        return target.split(":", 1)[0]

    @classmethod
    def target_rank(cls, target: str) -> tuple:
        return rank_target(target, cls.target_order, cls.target_kind(target))

    @classmethod
    def epsilon_settings(cls, cfg, epsilon: float) -> list[tuple[str, object]] | None:
        """The ``--set`` overrides that make a run of this method private at ``epsilon`` (a suite's ``epsilons``
        axis); None for a non-private method (its cells stand at ε = ∞). DP-SGD methods: ``dp.epsilon`` (σ is then
        calibrated by their accountant when the plan is made); BadInput when the ε cannot be reached."""
        del cfg  # part of the Method interface (methods that calibrate their ε read it)
        return [("dp.epsilon", float(epsilon))] if cls.private else None

    #: the setting that sizes ``public_demand`` (named when the public split does not fit)
    public_demand_key = "data.n_public"

    @classmethod
    def public_demand(cls, cfg) -> int:
        """Public records the method needs under ``data.public=none`` (0: none); they are allocated by the run's
        partition like ``data.public=pool`` records (docs/methods.md §0)."""
        del cfg  # part of the Method interface (methods with a public demand size it from the config)
        return 0

    @classmethod
    def upload_mechanism(cls, cfg: dict, target: str) -> dict | None:
        """The LDP upload mechanism a target's formal ε is about ({clip, t0, num_timesteps, beta_start, beta_end,
        beta_schedule}) so the report can audit the mechanism itself; None when the target has none."""
        del cfg, target  # part of the Method interface (methods with an upload mechanism read them)
        return None

    def fid_target(self, client: int) -> str:
        """The target whose samples stand for client ``client`` in the per-client FID."""
        del client  # part of the Method interface (per-client targets depend on it)
        return self.default_target

    def validate(self) -> None:
        """Method-specific checks of the config (BadInput); called before anything is written."""

    def __init__(self, ctx: RunContext):
        self.ctx = ctx
        self.cfg = ctx.cfg

    def train(self) -> None:
        raise NotImplementedError

    def shared_trainings(self) -> list[str]:
        """Folder names (under the run store) of the cached trainings this run's ``train`` reads and other runs
        share — the public pre-training of ``train.init=public``. A scheduler runs the first run of each at once
        and holds back the others until it is cached, instead of letting them wait on its lock."""
        if self.cfg.train.init != "public":
            return []
        return [pretrain_dir(self.ctx).name]

    def target_names(self) -> list[str]:
        return [self.default_target]

    def check_target(self, name: str | None) -> str:
        name = name or self.default_target
        names = self.target_names()
        if name not in names:
            raise BadInput(f"--target {name!r}: method {self.name} has targets: {', '.join(names)}")
        return name

    def load_target(self, name: str | None = None) -> Target:
        raise NotImplementedError

    def privacy(self, target: str) -> dict | None:
        """The formal guarantee of ``target`` with its basis, or None for non-private targets."""
        del target  # part of the Method interface (private methods' guarantees depend on it)
        return None

    def attack_split(self, target: str) -> tuple[list[int], list[int]]:
        """(member indices, non-member indices) of the membership game of ``target``: by default every member
        vs every non-member; a method whose target was trained on part of the members overrides this."""
        self.check_target(target)
        return list(self.ctx.split.members), list(self.ctx.split.nonmembers)

    def client_attack_split(self, k: int) -> tuple[list[int], list[int]]:
        """The membership game of a model trained on client k's records only: those records vs non-members with
        the same class counts (the client's class mix is skewed; see :func:`class_matched`)."""
        mem = list(self.ctx.clients.clients[k])
        non = class_matched(mem, self.ctx.split.nonmembers, self.ctx.dataset[1].numpy(), self.cfg.seed)
        return mem, non

    def training_data(self) -> tuple[torch.Tensor, torch.Tensor]:
        """Records the target was trained on (members) — for memorization and reconstruction."""
        return self.ctx.records(self.ctx.split.members)

    def make_target(self, name: str, model, *, note="", **kw) -> Target:
        return Target(name, self.name, model, self.ctx.schedule, self.ctx.device, self.ctx.num_classes,
                      note=note, meta={"shape": self.ctx.image_shape}, **kw)


METHODS.require_base(Method)  # a class that is not a Method is refused when it registers
