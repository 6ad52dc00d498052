"""privbench: measure how much diffusion models leak about their training data."""
from . import bench
from .api import BenchPackage as _BenchPackage
from .api import account, audit, check, report
from .builtins import MODULES as _BUILTIN_MODULES
from .builtins import load as _load_builtins
from .core.registry import install_builtins as _install_builtins
from .core.version import __version__

_install_builtins(_load_builtins, _BUILTIN_MODULES)  # the registries' built-ins (privbench/builtins.py)
# `privbench.bench` is both the subpackage and the function of `privbench bench`: the module is made callable.
# The functions below import what they run when called: `import privbench` stays light (docs/scaling.md §5).
bench.__class__ = _BenchPackage


def load_dataset(name: str, data_root: str | None = None, download: bool = False):
    """(images N×C×H×W float in [−1, 1], labels N long) in the dataset's fixed order."""
    # lazy: runs.train imports torch; `import privbench` stays light (docs/scaling.md §5)
    from .runs.train import load_dataset as _ld

    return _ld(name, data_root, download)


def load_target(run_dir, target: str | None = None, device: str = "auto"):
    """A trained run's Target: ``predict_noise(x_t, t, y=None)``, ``alphas_cumprod``, ``num_classes``."""
    # lazy: runs.train imports torch; `import privbench` stays light (docs/scaling.md §5)
    from .runs.train import load_target as _lt

    return _lt(run_dir, target, device)


def wrap(unet_or_pipeline, scheduler=None, *, device=None, name: str = "model"):
    """A Target from a diffusers pipeline / ``UNet2DModel`` (or a pytorch-ddpm UNet) already in memory;
    ``scheduler``: a diffusers scheduler or its config (default: the pipeline's own, else linear DDPM);
    ``device``: where the attacks run it (default: the model's own); ``name``: the target's name in results."""
    # lazy: models.external imports torch; `import privbench` stays light (docs/scaling.md §5)
    from .models.external import wrap as _wrap

    return _wrap(unet_or_pipeline, scheduler, device=device, name=name)


def attack(target, members, nonmembers, attack: str = "pia", **settings):
    """Run a registered attack → an object with ``metrics`` and ``scores`` (higher = member, members first) on
    ``members`` / ``nonmembers`` (images N×C×H×W in [−1, 1], (images, labels), or a SPEC path); writes nothing
    (docs/api.md §6)."""
    # lazy: runs.external imports torch; `import privbench` stays light (docs/scaling.md §5)
    from .runs.external import attack_in_memory

    return attack_in_memory(target, members, nonmembers, attack, **settings)


def __getattr__(name: str):
    """What a plug-in author needs, imported on first use (``import privbench`` stays light): the base classes
    ``Attack``, ``Method``, ``DPSGDAccountant``, ``LDPAccountant``, the registries and ``register_dataset``."""
    if name in _PLUGIN_API:
        # lazy: at the top, `importlib` would be an attribute of the package (dir(privbench))
        import importlib

        return getattr(importlib.import_module(_PLUGIN_API[name], __name__), name)
    raise AttributeError(f"module 'privbench' has no attribute {name!r}")


_PLUGIN_API = {
    "Attack": ".attacks.base", "Method": ".models.method", "Accountant": ".privacy.accountants.base",
    "DPSGDAccountant": ".privacy.accountants.base", "LDPAccountant": ".privacy.accountants.base",
    "ATTACKS": ".core.registry", "METHODS": ".core.registry", "DATASETS": ".core.registry",
    "ACCOUNTANTS": ".core.registry", "register_dataset": ".data.base",
}

__all__ = ["__version__", "account", "attack", "audit", "bench", "check", "load_dataset", "load_target", "report",
           "wrap", *_PLUGIN_API]
