"""The sections every method trains and samples from (data, model, diffusion, train, sample, metrics, dp) and the
presets: a preset names the dataset it trains when none is named, and sets the values each section lists for it
(``register_section(..., presets=...)``; a method's or an attack's own file lists its own).
"""
from __future__ import annotations

from dataclasses import dataclass

from .constants import DEFAULT_DELTA
from .registry import ACCOUNTANTS, PRESETS
from .settings import MAX_SEED, register_section, setting

#: upper bounds of sizes: far above every preset (paper: 800k steps, batch 128, 1000 timesteps), low enough that
#: a typo is refused (exit 2) instead of exhausting memory in an allocation
MAX_BATCH = 65_536
MAX_TIMESTEPS = 100_000
MAX_CHANNELS = 4096
MAX_PARAMETERS = 1_000_000_000


@dataclass(frozen=True)
class Preset:
    """A preset's own value: the dataset it trains when the user names none (``--dataset`` not given)."""
    dataset: str


PRESETS.add("test", Preset("digits"), "seconds; for unit tests only (results meaningless)")
PRESETS.add("tiny", Preset("digits"), "embedded 8×8 digits, UNet (16, 32), CPU in minutes; results meaningful")
PRESETS.add("small", Preset("colored-digits"), "CPU, larger: colored digits, UNet (32, 64), more steps")
PRESETS.add("paper", Preset("cifar10"), "GPU: 32×32 datasets, the standard DDPM CIFAR-10 victim (35.7M params)")


def _dpsgd_accountant_names() -> list[str]:
    return [e.name for e in ACCOUNTANTS if getattr(e.factory, "kind", None) == "dpsgd"]


@dataclass
class DataConfig:
    n_members: int = setting(256, lo=2, hi=100_000_000, help="records in the member split (the training data)")
    n_nonmembers: int = setting(256, lo=2, hi=100_000_000, help="records in the held-out non-member split")
    resolution: int = setting(0, lo=0, hi=1024, help="image side after padding/resizing; 0 = the dataset's native size")
    public: str = setting("none", hashed_at_default=False,
                          help="the public split: none (no public records unless a consumer asks for them), pool "
                               "(data.n_public records of the same distribution, disjoint from every other split) or "
                               "classes:A-B (the records of classes A..B; members and non-members from the others)")
    n_public: int = setting(0, lo=0, hi=100_000_000, hashed_at_default=False,
                            help="records in the public split; 0 = as many as data.n_members (pool) or every record "
                                 "of the public classes (classes:A-B)")
    n_test: int = setting(0, lo=0, hi=100_000_000, hashed_at_default=False,
                          help="records of the utility test split (downstream accuracy; read once, by no model and "
                               "no selection step); 0 = none")
    data_root: str = setting("", training=False, help="folder with torchvision-format datasets (mnist, cifar10, celeba)")
    download: bool = setting(False, training=False, help="allow torchvision to download the dataset into data_root")


@dataclass
class ModelConfig:
    block_out_channels: list = setting([16, 32], item=int, item_lo=1, item_hi=MAX_CHANNELS, min_len=1, max_len=8,
                                       help="channels per UNet level (diffusers UNet2DModel)")
    layers_per_block: int = setting(1, lo=1, hi=16)
    attention_levels: list = setting([], item=int, item_lo=0, item_hi=7, max_len=8,
                                     help="indices of UNet levels with self-attention")
    dropout: float = setting(0.0, lo=0.0, hi=1.0, hi_open=True)
    norm_num_groups: int = setting(8, lo=1, hi=MAX_CHANNELS, help="GroupNorm groups; must divide every level's channels")
    class_conditional: bool = setting(True)


@dataclass
class DiffusionConfig:
    num_timesteps: int = setting(1000, lo=2, hi=MAX_TIMESTEPS)
    beta_start: float = setting(1e-4, lo=0.0, hi=1.0, lo_open=True, hi_open=True)
    beta_end: float = setting(0.02, lo=0.0, hi=1.0, lo_open=True, hi_open=True,
                              help="> beta_start (linear and scaled_linear schedules)")
    beta_schedule: str = setting("linear", choices=["linear", "scaled_linear", "squaredcos_cap_v2"])
    variance_type: str = setting("fixed_small", choices=["fixed_small", "fixed_large"])


@dataclass
class TrainConfig:
    steps: int = setting(4000, lo=1, help="optimizer steps")
    batch_size: int = setting(64, lo=1, hi=MAX_BATCH)
    lr: float = setting(2e-3, lo=0.0, lo_open=True)
    weight_decay: float = setting(0.0, lo=0.0)
    warmup: int = setting(100, lo=0, help="linear LR warm-up steps")
    grad_clip: float = setting(1.0, lo=0.0, help="global grad-norm clip (0 = off)")
    ema_decay: float = setting(0.999, lo=0.0, hi=1.0, hi_open=True)
    # a short run's EMA at decay 0.999 would still be mostly its start: the methods that cap it (models/loop.ema_capped)
    # name this key in their config_keys (hashed at every value); for the others only when set off the default
    ema_start_weight: float = setting(0.01, lo=0.0, hi=1.0, lo_open=True, hashed_at_default=False,
                                      help="largest weight the released EMA keeps on the network a capped run "
                                           "starts from (DP-SGD runs, fine-tunes, federated clients): decay <= "
                                           "w^(1/steps); 1 = no cap")
    checkpoint_every: int = setting(1000, lo=1)
    log_every: int = setting(100, lo=1)
    # precision changes the numbers, so it enters the config hash when set off its default; channels_last and
    # compile change how the steps run, not what they compute: never in the hash
    precision: str = setting("fp32", choices=["fp32", "bf16"], hashed_at_default=False,
                             help="bf16: autocast of the model's forward/backward (weights, Adam, EMA stay fp32)")
    init: str = setting("scratch", choices=["scratch", "public"], hashed_at_default=False,
                        help="public: every trained network starts from a non-private pre-training on the run's "
                             "public split (data.public), cached and shared (models/public_init.py)")
    public_steps: int = setting(0, lo=0, hashed_at_default=False,
                                help="steps of the public pre-training (train.init=public); 0 = train.steps")
    public_seed: int = setting(0, lo=0, hi=MAX_SEED, hashed_at_default=False,
                               help="seed of the public pre-training (its init and batches; never the run's seed, "
                                    "so seeds and epsilons with one public split share it)")
    channels_last: bool = setting(False, training=False,
                                  help="NHWC memory format for the convolutions (GPU tensor cores); same math")
    compile: bool = setting(False, training=False,
                            help="torch.compile the denoiser of the plain loop (slow start; pays off on GPU)")


@dataclass
class SampleConfig:
    sampler: str = setting("ddpm", choices=["ddpm", "ddim"])
    ddim_steps: int = setting(100, lo=1, hi=MAX_TIMESTEPS, help="<= diffusion.num_timesteps")
    batch_size: int = setting(500, lo=1, hi=MAX_BATCH)


@dataclass
class MetricsConfig:
    tpr_rule: str = setting("le", choices=["le", "lt"], training=False,
                            help="TPR@x: le = the largest TPR with FPR <= x (default); lt = with FPR < x, as "
                                 "Carlini et al.'s LiRA code (mi_lira_2021/plot.py)")


@dataclass
class DPConfig:
    epsilon: float = setting(10.0, lo=0.0, lo_open=True)
    delta: float = setting(DEFAULT_DELTA, lo=0.0, hi=1.0, lo_open=True, hi_open=True, help="capped at 1/N when larger")
    max_grad_norm: float = setting(1.0, lo=0.0, lo_open=True)
    noise_multiplier: float = setting(0.0, lo=0.0, help="0 = calibrate to dp.epsilon; >0 = use it as given")
    noise_multiplicity: int = setting(4, lo=1, hi=1024, help="K noise draws averaged per record before clipping")
    # the registered DP-SGD accountants, plug-ins included (privbench list accountants)
    accountant: str = setting("prv", choices=lambda: _dpsgd_accountant_names())
    sample_rate: float = setting(0.0, lo=0.0, hi=1.0, help="Poisson rate q; 0 = batch_size / N")
    grad_sample: str = setting("ghost", choices=["ghost", "hooks", "vmap"],
                               help="per-record gradient backend (models/grad_sample/, models/grad_sample/ghost.py); all exact")
    physical_batch: int = setting(0, lo=0, hi=MAX_BATCH,
                                  help="records per per-sample-gradient pass (memory); 0 = the whole batch")
    trainable: str = setting("all", choices=["all", "lora", "attention"], hashed_at_default=False,
                             help="what DP-SGD updates: all parameters, LoRA adapters (peft) on the UNet's attention "
                                  "and conv layers, or the attention layers (DP-LDM); the label embedding is always "
                                  "trained (models/trainable.py)")
    lora_rank: int = setting(4, lo=1, hi=1024, hashed_at_default=False, help="rank of the LoRA adapters")
    noise_source: str = setting("seeded", choices=["seeded", "secure"],
                                help="privacy randomness: seeded = from the run's seed (reproducible benchmark noise, "
                                     "not a deployable release); secure = OS entropy, never stored")


register_section("data", DataConfig, presets={
    "test": {"n_members": 64, "n_nonmembers": 64}, "small": {"n_members": 512, "n_nonmembers": 512},
    "paper": {"resolution": 32, "n_members": 25000, "n_nonmembers": 25000}})
register_section("model", ModelConfig, presets={
    "test": {"block_out_channels": [8, 16], "norm_num_groups": 4},
    "small": {"block_out_channels": [32, 64], "layers_per_block": 2},
    # The standard DDPM CIFAR-10 victim (pytorch-ddpm): ch 128, mult (1,2,2,2), attention at 16×16 (level 1),
    # 2 res-blocks, dropout 0.1.
    "paper": {"block_out_channels": [128, 256, 256, 256], "layers_per_block": 2, "attention_levels": [1],
              "dropout": 0.1, "norm_num_groups": 32}})
register_section("diffusion", DiffusionConfig, presets={"paper": {"variance_type": "fixed_large"}})
register_section("train", TrainConfig, presets={
    "test": {"steps": 20, "batch_size": 16, "warmup": 0, "checkpoint_every": 10, "log_every": 5},
    "small": {"steps": 10000},
    "paper": {"steps": 800_000, "batch_size": 128, "lr": 2e-4, "warmup": 5000, "ema_decay": 0.9999,
              "checkpoint_every": 10_000, "log_every": 1000}})
register_section("sample", SampleConfig, training=False, presets={"test": {"ddim_steps": 10}})
register_section("metrics", MetricsConfig, training=False)
register_section("dp", DPConfig, presets={
    # DPDM's CIFAR-10 config; per-record gradients of the 35.7M-parameter UNet: 16 records per pass
    "paper": {"noise_multiplicity": 8, "physical_batch": 16}})
