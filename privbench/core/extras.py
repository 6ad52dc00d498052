"""Optional dependencies: the packages of the ``[dp]`` and ``[fid]`` extras are imported lazily, where they are
used, through :func:`require`, so the core installs and runs without them and a command that needs one exits 2
with one line naming the extra (docs/cli.md §3)."""
from __future__ import annotations

import importlib
from types import ModuleType

from .errors import BadInput

# import name → (distribution name, extra)
EXTRAS = {
    "opacus": ("opacus", "dp"),
    "dp_accounting": ("dp-accounting", "dp"),
    "torch_fidelity": ("torch-fidelity", "fid"),
    "ray": ("ray", "ray"),
    "xgboost": ("xgboost", "official"),
    "transformers": ("transformers", "t2i"),
    "peft": ("peft", "dp"),  # also in [t2i]
    "submitit": ("submitit", "slurm"),
}


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` (a top-level package of an extra) or raise BadInput naming the extra to install."""
    try:
        return importlib.import_module(module)
    except ImportError:
        dist, extra = EXTRAS[module.split(".")[0]]
        raise BadInput(f"{what} needs the optional package {dist}, which is not installed: "
                       f"pip install 'privbench[{extra}]'") from None
