"""privbench: measure how much diffusion models leak about their training data."""
from .core.version import __version__  # noqa: F401


def load_dataset(name: str, data_root: str | None = None, download: bool = False):
    """(images N×C×H×W float in [−1, 1], labels N long) in the dataset's fixed order."""
    from .runs.train import load_dataset as _ld

    return _ld(name, data_root, download)


def load_target(run_dir, target: str | None = None, device: str = "auto"):
    """A trained run's Target: ``predict_noise(x_t, t, y=None)``, ``alphas_cumprod``, ``num_classes``."""
    from .runs.train import load_target as _lt

    return _lt(run_dir, target, device)
