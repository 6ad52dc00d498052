"""What every loader of an outside model shares: the ε schedule of a diffusers scheduler config
(:class:`ExternalSchedule`), the conversion of a model's output to ε, the listing and hashing of weight files, and
the device. :mod:`.external` (pixel-space models) and :mod:`.latent` (text-to-image pipelines) build on it."""
from __future__ import annotations

import hashlib
import inspect
from dataclasses import dataclass, field
from pathlib import Path

import torch

from ..core.config import MAX_TIMESTEPS
from ..core.errors import BadInput
from ..core.jsonio import read_json_object
from ..core.schedule import Schedule
from .method import resolve_device

PREDICTION_TYPES = ("epsilon", "v_prediction", "sample")
#: schedulers whose config is a discrete β schedule over num_train_timesteps (all share DDPM's ᾱ)
DISCRETE_SCHEDULERS = ("DDPMScheduler", "DDIMScheduler", "DDIMInverseScheduler", "DDPMParallelScheduler",
                       "DDIMParallelScheduler", "PNDMScheduler", "DPMSolverMultistepScheduler",
                       "DPMSolverSinglestepScheduler", "DEISMultistepScheduler", "UniPCMultistepScheduler",
                       "EulerDiscreteScheduler", "EulerAncestralDiscreteScheduler", "HeunDiscreteScheduler",
                       "LMSDiscreteScheduler", "KDPM2DiscreteScheduler", "KDPM2AncestralDiscreteScheduler")
DEFAULT_SCHEDULE_NOTE = "default: linear beta 1e-4..0.02, T=1000, epsilon (no scheduler config given)"
CONVERSIONS = {
    "epsilon": "eps = output",
    "v_prediction": "eps = sqrt(abar_t)*v + sqrt(1-abar_t)*x_t",
    "sample": "eps = (x_t - sqrt(abar_t)*x0_hat) / sqrt(1-abar_t)",
}
#: the largest image side a model may declare (``sample_size``), as privbench's own ``data.resolution``
MAX_SAMPLE_SIDE = 1024
WEIGHT_SUFFIXES = (".safetensors", ".bin", ".pt", ".pth", ".ckpt", ".pkl", ".pickle", ".msgpack", ".h5")


# ---------------------------------------------------------------------- schedules

@dataclass
class ExternalSchedule(Schedule):
    """A :class:`Schedule` read from a diffusers scheduler config; ``scheduler()`` is DDPM ancestral sampling with
    the model's own β (and ε input, since every target predicts ε after conversion)."""
    config: dict = field(default_factory=dict)

    def _exact_betas(self) -> bool:
        c = self.config
        return (c.get("trained_betas") is None and not c.get("rescale_betas_zero_snr")
                and self.beta_schedule in ("linear", "scaled_linear", "squaredcos_cap_v2"))

    def alphas_cumprod(self, device=None) -> torch.Tensor:
        if self._exact_betas():
            return super().alphas_cumprod(device)
        return self.scheduler().alphas_cumprod.to(torch.float32).to(device)

    def scheduler(self, clip_sample: bool = True):
        from diffusers import DDPMScheduler  # lazy: diffusers (seconds to import) only when this runs

        allowed = set(inspect.signature(DDPMScheduler.__init__).parameters) - {"self"}
        kw = {k: v for k, v in self.config.items() if k in allowed}
        kw.update(prediction_type="epsilon", clip_sample=clip_sample, variance_type=self.variance_type)
        return DDPMScheduler(**kw)


def model_where(provenance: dict, name: str) -> str:
    """How a refusal names an outside model: ``--model PATH``, or ``wrap: NAME`` for objects given in memory."""
    return f"--model {provenance['path']}" if provenance.get("path") else f"wrap: {name}"


def default_scheduler_config() -> dict:
    """The standard DDPM schedule (Ho et al.; pytorch-ddpm; diffusers' DDPMScheduler defaults)."""
    return {"_class_name": "DDPMScheduler", "num_train_timesteps": 1000, "beta_start": 1e-4, "beta_end": 0.02,
            "beta_schedule": "linear", "variance_type": "fixed_small", "clip_sample": True,
            "prediction_type": "epsilon"}


def read_json(path: Path, what: str) -> dict:
    """A JSON object from a file of the model (bounded, regular files only: :mod:`privbench.core.jsonio`)."""
    return read_json_object(path, what)


def read_scheduler_config(path) -> dict:
    """A diffusers scheduler config: the JSON file itself, or a folder holding ``scheduler_config.json``."""
    p = Path(path)
    if p.is_dir():
        p = p / "scheduler_config.json"
    return read_json(p, "--scheduler-config")


def schedule_from_config(cfg: dict, where: str = "scheduler config") -> tuple[ExternalSchedule, dict]:
    """(schedule, facts) from a diffusers scheduler config; facts: class, prediction_type, clip_sample, ..."""
    cls = cfg.get("_class_name", "DDPMScheduler")
    if cls not in DISCRETE_SCHEDULERS:
        raise BadInput(f"{where}: scheduler {cls!r} has no discrete beta schedule privbench can attack through "
                       f"(supported: {', '.join(DISCRETE_SCHEDULERS[:4])}, ... the DDPM-family schedulers)")
    T = cfg.get("num_train_timesteps", 1000)
    if isinstance(T, bool) or not isinstance(T, int) or not 2 <= T <= MAX_TIMESTEPS:
        raise BadInput(f"{where}: num_train_timesteps={T!r} must be an integer in 2..{MAX_TIMESTEPS}")
    pred = cfg.get("prediction_type", "epsilon")
    if pred not in PREDICTION_TYPES:
        raise BadInput(f"{where}: prediction_type={pred!r}; supported: {', '.join(PREDICTION_TYPES)}")
    bs = cfg.get("beta_schedule", "linear")
    if cfg.get("trained_betas") is None and bs not in ("linear", "scaled_linear", "squaredcos_cap_v2", "sigmoid"):
        raise BadInput(f"{where}: beta_schedule={bs!r} is not one diffusers defines")
    tb = cfg.get("trained_betas")
    if tb is not None and (not isinstance(tb, list) or len(tb) != T):
        raise BadInput(f"{where}: trained_betas must be a list of num_train_timesteps={T} betas, got "
                       f"{len(tb) if isinstance(tb, list) else type(tb).__name__}")
    var = cfg.get("variance_type", "fixed_small")
    learned = var in ("learned", "learned_range")
    if var not in ("fixed_small", "fixed_large", "fixed_small_log", "fixed_large_log") and not learned:
        var = "fixed_small"
    full = dict(cfg)
    full.setdefault("num_train_timesteps", T)
    try:
        sched = ExternalSchedule(T, float(cfg.get("beta_start", 1e-4)), float(cfg.get("beta_end", 0.02)), bs,
                                 "fixed_small" if learned else var, config=full)
        ac = sched.alphas_cumprod()
    except (TypeError, ValueError, NotImplementedError) as e:
        raise BadInput(f"{where}: not a usable beta schedule ({type(e).__name__}: {str(e)[:100]})") from None
    if not bool(torch.isfinite(ac).all()) or not bool(((ac > 0) & (ac < 1)).all()):
        zero_snr = " (rescale_betas_zero_snr: zero terminal SNR, alphas_cumprod = 0 at the last step)" \
            if cfg.get("rescale_betas_zero_snr") and bool((ac[:-1] > 0).all()) else ""
        raise BadInput(f"{where}: the schedule's alphas_cumprod leave (0, 1){zero_snr}; the attacks and the sampler "
                       f"divide by sqrt(alphas_cumprod) and sqrt(1 - alphas_cumprod) at every step")
    facts = {"class": cls, "num_train_timesteps": T, "beta_schedule": bs if cfg.get("trained_betas") is None
             else "trained_betas", "beta_start": sched.beta_start, "beta_end": sched.beta_end,
             "variance_type": var, "prediction_type": pred, "clip_sample": bool(cfg.get("clip_sample", True)),
             "rescale_betas_zero_snr": bool(cfg.get("rescale_betas_zero_snr", False))}
    if learned:
        facts["sampling_variance"] = "fixed_small (the learned variance channels are not used for sampling)"
    return sched, facts


def to_epsilon(out: torch.Tensor, x_t: torch.Tensor, abar_t: torch.Tensor, prediction_type: str) -> torch.Tensor:
    """The ε a network's output stands for, given ᾱ at each record's timestep (exact: docs/external-models.md)."""
    if prediction_type == "epsilon":
        return out
    a = abar_t.to(out.dtype).view(-1, *([1] * (out.dim() - 1)))
    if prediction_type == "v_prediction":
        return a.sqrt() * out + (1 - a).sqrt() * x_t
    if prediction_type == "sample":
        return (x_t - a.sqrt() * out) / (1 - a).sqrt()
    raise BadInput(f"prediction_type={prediction_type!r}; supported: {', '.join(PREDICTION_TYPES)}")


# ---------------------------------------------------------------------- hashing

def _sha256_files(files: list[Path], root: Path) -> str:
    h = hashlib.sha256()
    for f in sorted(files):
        h.update(str(f.relative_to(root)).encode() + b"\0")
        with open(f, "rb") as fh:
            for chunk in iter(lambda: fh.read(1 << 20), b""):
                h.update(chunk)
    return h.hexdigest()


def state_dict_sha256(module: torch.nn.Module) -> str:
    """Content hash of a module's tensors (names, dtypes, shapes, bytes) — for models handed over in memory."""
    h = hashlib.sha256()
    for k, v in sorted(module.state_dict().items()):
        t = v.detach().cpu().contiguous()
        h.update(f"{k}|{t.dtype}|{tuple(t.shape)}".encode())
        h.update(t.view(torch.uint8).numpy().tobytes() if t.numel() else b"")
    return h.hexdigest()


# ---------------------------------------------------------------------- the target

def _device(device):
    return device if isinstance(device, torch.device) else resolve_device(device)


def _weight_files(folder: Path) -> tuple[list[Path], list[Path]]:
    files = [f for f in folder.iterdir() if f.is_file()]
    safe = [f for f in files if f.name.endswith(".safetensors")]
    other = [f for f in files if f.suffix in WEIGHT_SUFFIXES and not f.name.endswith(".safetensors")]
    return safe, other
