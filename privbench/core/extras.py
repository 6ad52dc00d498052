"""Optional dependencies: the packages of the ``[dp]`` and ``[fid]`` extras are imported lazily, where they are
used, through :func:`require`, so the core installs and runs without them and a command that needs one exits 2
with one line naming the extra (docs/cli.md §3)."""
from __future__ import annotations

import contextlib
import importlib
import logging.config
from types import ModuleType
from typing import Iterator

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


#: extras whose import calls ``logging.config.dictConfig`` (submitit), which closes every handler the process has:
#: imported with ``dictConfig`` held back, so their records reach the process's handlers through the root logger.
CONFIGURE_LOGGING_ON_IMPORT = ("submitit",)


@contextlib.contextmanager
def _logging_config_held_back() -> Iterator[None]:
    saved = logging.config.dictConfig
    logging.config.dictConfig = lambda _config: None
    try:
        yield
    finally:
        logging.config.dictConfig = saved


def require(module: str, what: str) -> ModuleType:
    """Import ``module`` (a top-level package of an extra) or raise BadInput naming the extra to install."""
    held = module.split(".")[0] in CONFIGURE_LOGGING_ON_IMPORT
    try:
        with _logging_config_held_back() if held else contextlib.nullcontext():
            return importlib.import_module(module)
    except ImportError:
        dist, extra = EXTRAS[module.split(".")[0]]
        raise BadInput(f"{what} needs the optional package {dist}, which is not installed: "
                       f"pip install 'privbench[{extra}]'") from None
