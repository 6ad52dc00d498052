"""Typed configs, presets (test/tiny/small/paper), ``--set`` overrides and the config hash.

Every field of every section can be overridden with ``--set section.key=value``; values are parsed and
type-checked against the field's declared type and range, and an unknown key is an error (exit 2).
"""
from __future__ import annotations

import copy
import dataclasses
import hashlib
import json
import typing
from dataclasses import dataclass, field, fields
from pathlib import Path
from typing import Any

import yaml

from .errors import BadInput
from .registry import PRESETS


def _f(default, *, lo=None, hi=None, lo_open=False, hi_open=False, choices=None, help=""):
    """A dataclass field with range/choice metadata used by ``--set`` validation."""
    meta = dict(lo=lo, hi=hi, lo_open=lo_open, hi_open=hi_open, choices=choices, help=help)
    if isinstance(default, (list, dict, tuple)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


@dataclass
class DataConfig:
    n_members: int = _f(256, lo=2, help="records in the member split (the training data)")
    n_nonmembers: int = _f(256, lo=2, help="records in the held-out non-member split")
    resolution: int = _f(0, lo=0, help="image side after padding/resizing; 0 = the dataset's native size")
    data_root: str = _f("", help="folder with torchvision-format datasets (mnist, cifar10, celeba)")
    download: bool = _f(False, help="allow torchvision to download the dataset into data_root")


@dataclass
class ModelConfig:
    block_out_channels: list = _f([16, 32], help="channels per UNet level (diffusers UNet2DModel)")
    layers_per_block: int = _f(1, lo=1)
    attention_levels: list = _f([], help="indices of UNet levels with self-attention")
    dropout: float = _f(0.0, lo=0.0, hi=1.0, hi_open=True)
    norm_num_groups: int = _f(8, lo=1)
    class_conditional: bool = _f(True)


@dataclass
class DiffusionConfig:
    num_timesteps: int = _f(1000, lo=2)
    beta_start: float = _f(1e-4, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    beta_end: float = _f(0.02, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    beta_schedule: str = _f("linear", choices=["linear", "scaled_linear", "squaredcos_cap_v2"])
    variance_type: str = _f("fixed_small", choices=["fixed_small", "fixed_large"])


@dataclass
class TrainConfig:
    steps: int = _f(4000, lo=1, help="optimizer steps")
    batch_size: int = _f(64, lo=1)
    lr: float = _f(2e-3, lo=0.0, lo_open=True)
    weight_decay: float = _f(0.0, lo=0.0)
    warmup: int = _f(100, lo=0, help="linear LR warm-up steps")
    grad_clip: float = _f(1.0, lo=0.0, help="global grad-norm clip (0 = off)")
    ema_decay: float = _f(0.999, lo=0.0, hi=1.0, hi_open=True)
    checkpoint_every: int = _f(1000, lo=1)
    log_every: int = _f(100, lo=1)


@dataclass
class SampleConfig:
    sampler: str = _f("ddpm", choices=["ddpm", "ddim"])
    ddim_steps: int = _f(100, lo=1)
    batch_size: int = _f(500, lo=1)


@dataclass
class PFDMConfig:
    n_clients: int = _f(4, lo=1, help="number of clients the members are split over")
    clip: float = _f(10.0, lo=0.0, lo_open=True, help="L2 clip C of the whole image before noising")
    t0: int = _f(690, lo=1, help="upload noise level, 1-indexed as in the paper: alphas_cumprod[t0-1]")
    majority_classes: int = _f(2, lo=1, help="majority classes per client (client m: m*k .. m*k+k-1 mod n_classes)")
    imbalance: float = _f(10.0, lo=1.0, help="majority:minority records-per-class ratio inside a client")
    clip_mix: float = _f(0.5, lo=0.0, hi=1.0, help="share of clipped copies in a local batch")
    local_steps: int = _f(600, lo=1, help="steps of each client's t<=t0 denoiser")
    server_steps: int = _f(1200, lo=1, help="steps of the shared T-step model on the uploads (tiny: 1200 = 300 "
                                             "epochs of 256 uploads, the paper's global-model length)")
    stage1_sampler: str = _f("ddpm", choices=["ddpm", "ddim"],
                             help="sampler of the shared model's chain (T steps; ddim: sample.ddim_steps)")
    stage2_sampler: str = _f("ddpm", choices=["ddpm", "ddim"],
                             help="sampler of the client model's refinement (t0 steps; ddim: sample.ddim_steps)")

    SAMPLING_KEYS = ("stage1_sampler", "stage2_sampler")  # never force a retrain (see Config.training_dict)


@dataclass
class FedConfig:
    rounds: int = _f(10, lo=1, help="FedAvg communication rounds (feddm)")
    local_steps: int = _f(100, lo=1, help="local steps per client per round (feddm)")
    local_only_steps: int = _f(1000, lo=1, help="steps of each client's full model (local)")
    prox_mu: float = _f(0.0, lo=0.0, help="FedProx proximal weight mu (feddm); 0 = plain FedAvg")


@dataclass
class DPConfig:
    epsilon: float = _f(10.0, lo=0.0, lo_open=True)
    delta: float = _f(1e-5, lo=0.0, hi=1.0, lo_open=True, hi_open=True, help="capped at 1/N when larger")
    max_grad_norm: float = _f(1.0, lo=0.0, lo_open=True)
    noise_multiplier: float = _f(0.0, lo=0.0, help="0 = calibrate to dp.epsilon; >0 = use it as given")
    noise_multiplicity: int = _f(4, lo=1, help="K noise draws averaged per record before clipping")
    accountant: str = _f("prv", choices=["prv", "pld", "rdp"])
    sample_rate: float = _f(0.0, lo=0.0, hi=1.0, help="Poisson rate q; 0 = batch_size / N")
    grad_sample: str = _f("hooks", choices=["hooks", "vmap"],
                          help="per-record gradient backend (models/per_sample.py); both exact")
    physical_batch: int = _f(0, lo=0, help="records per per-sample-gradient pass (memory); 0 = the whole batch")


@dataclass
class DPSADConfig:
    mode: str = _f("sound", choices=["sound", "paper"],
                   help="sound = DP-SGD on the student's parameter gradient; paper = output-gradient sanitization")
    teacher_steps: int = _f(4000, lo=1, help="steps of the non-private teacher DDPM")
    adv_weight: float = _f(1.0, lo=0.0, help="lambda of the adversarial loss")
    disc_lr: float = _f(2e-4, lo=0.0, lo_open=True, help="discriminator Adam learning rate")
    disc_width: int = _f(32, lo=1, help="channels of the discriminator's first conv")


@dataclass
class AttackConfig:
    t: int = _f(200, lo=0, help="model timestep (0-indexed) of loss/PIA/PIAN and of LiRA/RMIA's loss statistic")
    p: float = _f(4.0, lo=0.0, lo_open=True, help="norm of PIA/PIAN/SimA")
    n_draws: int = _f(1, lo=1, help="noise draws averaged by the loss attack")
    sweep: list = _f([], help="timesteps to sweep (loss/pia/pian: t; secmi: t_sec), reported apart as an oracle choice")
    batch_size: int = _f(256, lo=1, help="records per batched model query of every attack")
    secmi_t: int = _f(100, lo=1, help="SecMI's t_sec (a multiple of secmi_k)")
    secmi_k: int = _f(10, lo=1, help="SecMI's DDIM stride k")
    secmi_offset: str = _f("official", choices=["paper", "official"],
                           help="official code (default): error at t_sec-k vs t_sec (t_sec/k+1 NFEs); "
                                "paper: t_sec vs t_sec+k (t_sec/k+2 NFEs)")
    secmi_nn_arch: str = _f("small", choices=["small", "resnet18"],
                            help="secmi-nn classifier: small CNN, or the official code's CIFAR ResNet-18")
    secmi_nn_steps: int = _f(1000, lo=1, help="secmi-nn SGD steps per fold (official: 15 epochs of 10k maps)")
    secmi_nn_folds: int = _f(2, lo=2, help="secmi-nn cross-fitting folds: every record is scored out of fold")
    sima_t: int = _f(100, lo=0, help="SimA's model timestep: -sum|eps_theta(x0, t)|^p with x0 fed unnoised")
    n_reference: int = _f(8, lo=1, help="reference models of the target's method and config (lira, rmia, gsa)")
    reference_pool: str = _f("offline", choices=["offline", "online"],
                             help="offline: references train on halves of records outside the evaluation "
                                  "split; online: on halves of the evaluation records (LiRA-online)")
    lira_draws: int = _f(4, lo=1, help="LiRA/RMIA: fixed noise draws per record of the loss statistic at attack.t "
                                       "(the target and every reference are queried on each)")
    lira_transform: str = _f("log", choices=["log", "none"],
                             help="LiRA: fit the Gaussians to log(loss) (variance-stabilized, as the paper's logit "
                                  "scaling of confidences) or to the loss itself")
    lira_convention: str = _f("paper", choices=["paper", "official"],
                              help="paper: means, one-sided offline test; official code: medians, two-sided "
                                   "offline log-pdf, global std over all values")
    lira_variance: str = _f("auto", choices=["auto", "per_record", "global"],
                            help="Gaussian widths: per record, or one global width (auto: global below 64 "
                                 "references, as the LiRA paper advises)")
    rmia_a: float = _f(-1.0, lo=-1.0, hi=1.0,
                       help="RMIA offline a in [0,1] (Pr(x) = ((1+a)Pr_out(x) + 1-a)/2); -1 = tune on a "
                            "reference model as the official code")
    rmia_gamma: float = _f(1.0, lo=0.0, lo_open=True, help="RMIA's gamma: score = share of z with LR_x/LR_z > gamma")
    rmia_population: int = _f(256, lo=1, help="RMIA population records z (outside the evaluation split and pool)")
    gsa_timesteps: list = _f([100, 200, 300, 400, 500, 600, 700, 800, 900, 999],
                             help="GSA's timesteps (one noise draw each)")
    gsa_variant: int = _f(1, lo=1, hi=2, help="GSA1: per-layer norms of the gradient of the loss averaged over "
                                              "timesteps (official code); GSA2: averaged per-timestep norms")
    gsa_classifier: str = _f("gbdt", choices=["gbdt", "logistic"],
                             help="GSA's classifier on reference-model features (official: XGBoost, 200 trees)")
    n_samples: int = _f(500, lo=1, help="samples drawn by memorization")
    recon_t0: int = _f(0, lo=0, help="reconstruction upload level (1-indexed); 0 = pfdm.t0")
    recon_clip: float = _f(0.0, lo=0.0, help="reconstruction clip; 0 = pfdm.clip")
    recon_n: int = _f(1000, lo=0, help="uploads attacked by reconstruction (seeded subset; 0 = all)")
    recon_sampler: str = _f("ddim", choices=["ddim", "ddpm"],
                            help="reverse chain of the reconstruction attack (ddim: sample.ddim_steps NFEs; ddpm: t0)")
    recon_public_steps: int = _f(0, lo=0, help="reconstruction: train a 'public' denoiser on records outside the "
                                               "split for this many steps (0 = off)")
    bootstrap: int = _f(1000, lo=0, help="bootstrap resamples for CIs")


@dataclass
class Config:
    method: str = "centralized"
    dataset: str = "digits"
    preset: str = "tiny"
    seed: int = 0
    data: DataConfig = field(default_factory=DataConfig)
    model: ModelConfig = field(default_factory=ModelConfig)
    diffusion: DiffusionConfig = field(default_factory=DiffusionConfig)
    train: TrainConfig = field(default_factory=TrainConfig)
    sample: SampleConfig = field(default_factory=SampleConfig)
    pfdm: PFDMConfig = field(default_factory=PFDMConfig)
    fed: FedConfig = field(default_factory=FedConfig)
    dp: DPConfig = field(default_factory=DPConfig)
    dpsad: DPSADConfig = field(default_factory=DPSADConfig)
    attack: AttackConfig = field(default_factory=AttackConfig)

    def to_dict(self) -> dict:
        return dataclasses.asdict(self)

    # What decides what is trained (attack/sample settings never force a retrain): every method trains from these
    # sections; a method names what else it reads in its class attribute ``config_keys`` ("section" or
    # "section.key"), so that e.g. a pfdm default change never re-keys a dpdm run.
    BASE_SECTIONS = ("data", "model", "diffusion", "train")

    def training_dict(self) -> dict:
        d = self.to_dict()
        d.pop("attack"), d.pop("sample"), d.pop("preset")
        d["data"].pop("data_root"), d["data"].pop("download")
        for k in PFDMConfig.SAMPLING_KEYS:  # sampling choices of pfdm: not part of what is trained
            d["pfdm"].pop(k, None)
        keys = _method_config_keys(self.method)
        if keys is None:  # a method that does not say what it reads: every training section counts
            return d
        out = {k: d[k] for k in ("method", "dataset", "seed", *self.BASE_SECTIONS)}
        for key in keys:
            sec, _, name = key.partition(".")
            if name:
                out.setdefault(sec, {})[name] = d[sec][name]
            else:
                out[sec] = d[sec]
        return out

    def training_hash(self) -> str:
        return config_hash(self.training_dict())




def _method_config_keys(method: str):
    """The ``config_keys`` of a registered method class, or None (unknown method or none declared)."""
    from .registry import METHODS
    try:
        factory = METHODS.get(method).factory
    except BadInput:  # unknown method: validated elsewhere with a clear message
        return None
    return getattr(factory, "config_keys", None)


def config_hash(d: dict) -> str:
    blob = json.dumps(d, sort_keys=True, default=str).encode()
    return hashlib.sha256(blob).hexdigest()[:12]


# ---------------------------------------------------------------- presets

def _preset_test(c: Config) -> None:
    c.data.n_members, c.data.n_nonmembers = 64, 64
    c.model.block_out_channels = [8, 16]
    c.model.norm_num_groups = 4
    c.train.steps, c.train.batch_size, c.train.warmup = 20, 16, 0
    c.train.checkpoint_every, c.train.log_every = 10, 5
    c.pfdm.local_steps, c.pfdm.server_steps = 10, 10
    c.fed.rounds, c.fed.local_steps, c.fed.local_only_steps = 2, 5, 10
    c.dpsad.teacher_steps = 10
    c.sample.ddim_steps = 10
    c.attack.n_samples, c.attack.bootstrap = 32, 50
    c.attack.n_reference, c.attack.rmia_population, c.attack.secmi_nn_steps = 2, 64, 20


def _preset_tiny(c: Config) -> None:
    pass  # the dataclass defaults are the tiny preset: 8×8 digits, UNet (16, 32), CPU minutes


def _preset_small(c: Config) -> None:
    c.dataset = "colored-digits" if c.dataset == "digits" else c.dataset
    c.data.n_members, c.data.n_nonmembers = 512, 512
    c.model.block_out_channels = [32, 64]
    c.model.layers_per_block = 2
    c.train.steps = 10000
    c.pfdm.local_steps, c.pfdm.server_steps = 6000, 10000
    c.fed.rounds, c.fed.local_steps = 25, 400
    c.fed.local_only_steps = 10000
    c.dpsad.teacher_steps = 10000


def _preset_paper(c: Config) -> None:
    # The standard DDPM CIFAR-10 victim (attacks.md §0.1; pytorch-ddpm): ch 128, mult (1,2,2,2),
    # attention at 16×16 (level 1), 2 res-blocks, dropout 0.1, batch 128, lr 2e-4, EMA 0.9999.
    c.dataset = "cifar10" if c.dataset in ("digits", "colored-digits") else c.dataset
    c.data.resolution = 32
    c.data.n_members, c.data.n_nonmembers = 25000, 25000
    c.model.block_out_channels = [128, 256, 256, 256]
    c.model.layers_per_block = 2
    c.model.attention_levels = [1]
    c.model.dropout = 0.1
    c.model.norm_num_groups = 32
    c.diffusion.variance_type = "fixed_large"
    c.train.steps, c.train.batch_size, c.train.lr = 800_000, 128, 2e-4
    c.train.warmup, c.train.ema_decay = 5000, 0.9999
    c.train.checkpoint_every, c.train.log_every = 10_000, 1000
    c.pfdm.n_clients = 10
    c.pfdm.local_steps, c.pfdm.server_steps = 100_000, 200_000
    c.fed.rounds, c.fed.local_steps, c.fed.local_only_steps = 100, 1000, 100_000
    c.dpsad.teacher_steps = 200_000
    c.dp.noise_multiplicity = 8  # DPDM's CIFAR-10 config (methods.md §3.4)
    c.dp.physical_batch = 16     # per-record gradients of the 35.7M-parameter UNet: 16 records per pass
    c.attack.n_samples = 10_000


PRESETS.add("test", _preset_test, "seconds; for unit tests only (results meaningless)")
PRESETS.add("tiny", _preset_tiny, "embedded 8×8 digits, UNet (16, 32), CPU in minutes; results meaningful")
PRESETS.add("small", _preset_small, "CPU, larger: colored digits, UNet (32, 64), more steps")
PRESETS.add("paper", _preset_paper, "GPU: 32×32 datasets, the standard DDPM CIFAR-10 victim (35.7M params)")


# ---------------------------------------------------------------- overrides

def _type_of(section_cls, name):
    hints = typing.get_type_hints(section_cls)
    return hints[name]


def parse_value(key: str, raw: Any, typ: type, meta: dict) -> Any:
    """Parse ``raw`` (a string from the command line, or a YAML value) into ``typ`` and range-check it."""
    def bad(what):
        return BadInput(f"--set {key}={raw!r}: {what}")

    if isinstance(raw, str):
        text = raw.strip()
        if typ is bool:
            low = text.lower()
            if low in ("1", "true", "yes", "on"):
                val = True
            elif low in ("0", "false", "no", "off"):
                val = False
            else:
                raise bad("expected a boolean (true/false)")
        elif typ is int:
            try:
                val = int(text)
            except ValueError:
                raise bad("expected an integer") from None
        elif typ is float:
            try:
                val = float(text)
            except ValueError:
                raise bad("expected a number") from None
        elif typ is list:
            try:
                val = yaml.safe_load(text if text.startswith("[") else f"[{text}]")
            except yaml.YAMLError:
                raise bad("expected a list like [1,2] or 1,2") from None
            if val is None:
                val = []
        else:
            val = text
    else:
        val = raw
        if typ is float and isinstance(val, int) and not isinstance(val, bool):
            val = float(val)
        if typ is list and isinstance(val, tuple):
            val = list(val)
        if not isinstance(val, typ) or (typ is int and isinstance(val, bool)):
            raise bad(f"expected {typ.__name__}")
    if typ in (int, float):
        if val != val or val in (float("inf"), float("-inf")):
            raise bad("expected a finite number")
        lo, hi = meta.get("lo"), meta.get("hi")
        if lo is not None and (val < lo or (meta.get("lo_open") and val == lo)):
            raise bad(f"must be {'>' if meta.get('lo_open') else '>='} {lo}")
        if hi is not None and (val > hi or (meta.get("hi_open") and val == hi)):
            raise bad(f"must be {'<' if meta.get('hi_open') else '<='} {hi}")
    if meta.get("choices") and val not in meta["choices"]:
        raise bad(f"choose one of {', '.join(meta['choices'])}")
    if typ is list and not isinstance(val, list):
        raise bad("expected a list")
    return val


def _sections() -> dict[str, type]:
    return {f.name: f.default_factory for f in fields(Config) if f.default_factory is not dataclasses.MISSING}


def all_keys() -> list[tuple[str, type, Any, str]]:
    """(key, type, default, help) for every ``--set`` key."""
    out = []
    base = Config()
    for sec, cls in _sections().items():
        for f in fields(cls):
            out.append((f"{sec}.{f.name}", _type_of(cls, f.name), getattr(getattr(base, sec), f.name),
                        f.metadata.get("help", "")))
    return out


def set_key(cfg: Config, key: str, raw: Any) -> None:
    if "." not in key:
        raise BadInput(f"--set {key}: expected section.key=value, e.g. train.steps=2000")
    sec, name = key.split(".", 1)
    sections = _sections()
    if sec not in sections:
        raise BadInput(f"--set {key}: unknown section {sec!r}; sections: {', '.join(sections)}")
    cls = sections[sec]
    names = {f.name: f for f in fields(cls)}
    if name not in names:
        raise BadInput(f"--set {key}: unknown key; {sec} has: {', '.join(names)}")
    val = parse_value(key, raw, _type_of(cls, name), dict(names[name].metadata))
    setattr(getattr(cfg, sec), name, val)


def parse_set_args(pairs: list[str] | tuple[str, ...]) -> list[tuple[str, str]]:
    out = []
    for p in pairs:
        if "=" not in p:
            raise BadInput(f"--set {p!r}: expected key=value, e.g. train.steps=2000")
        k, v = p.split("=", 1)
        out.append((k.strip(), v))
    return out


def load_yaml_overrides(path: str | Path) -> list[tuple[str, Any]]:
    p = Path(path)
    try:
        data = yaml.safe_load(p.read_text())
    except FileNotFoundError:
        raise BadInput(f"--config {path}: file not found") from None
    except (OSError, yaml.YAMLError) as e:
        raise BadInput(f"--config {path}: not readable YAML ({type(e).__name__})") from None
    if data is None:
        return []
    if not isinstance(data, dict):
        raise BadInput(f"--config {path}: expected a mapping of sections")
    out = []
    for sec, body in data.items():
        if sec in ("method", "dataset", "preset", "seed"):
            out.append((sec, body))
        elif isinstance(body, dict):
            out.extend((f"{sec}.{k}", v) for k, v in body.items())
        else:
            raise BadInput(f"--config {path}: section {sec!r} must be a mapping")
    return out


def build_config(method: str = "centralized", dataset: str = "digits", preset: str = "tiny", seed: int = 0,
                 overrides: list[tuple[str, Any]] | None = None, config_file: str | None = None) -> Config:
    """Resolve a config: defaults → preset → YAML file → ``--set`` overrides (later wins)."""
    from .registry import DATASETS, METHODS

    METHODS.get(method)
    if not isinstance(seed, int) or seed < 0:
        raise BadInput(f"--seed {seed!r}: expected a non-negative integer")
    cfg = Config(method=method, dataset=dataset, preset=preset, seed=seed)
    PRESETS.create(preset, cfg)
    if preset in ("small", "paper"):
        # the preset picks its dataset only when the user left the default
        pass
    if dataset != "digits":
        cfg.dataset = dataset
    items = list(load_yaml_overrides(config_file)) if config_file else []
    items += list(overrides or [])
    for k, v in items:
        if k in ("method", "dataset", "preset", "seed"):
            if k == "seed":
                try:
                    cfg.seed = int(v)
                except (TypeError, ValueError):
                    raise BadInput(f"seed {v!r}: expected an integer") from None
            else:
                setattr(cfg, k, str(v))
            continue
        set_key(cfg, k, v)
    DATASETS.get(cfg.dataset)
    METHODS.get(cfg.method)
    return cfg


def config_from_dict(d: dict) -> Config:
    cfg = Config(method=d["method"], dataset=d["dataset"], preset=d.get("preset", "tiny"), seed=d["seed"])
    for sec, cls in _sections().items():
        body = d.get(sec, {}) or {}
        obj = getattr(cfg, sec)
        for k, v in body.items():
            if hasattr(obj, k):
                setattr(obj, k, v)
    return cfg
