"""Models named by a Hugging Face Hub id (``--model org/name``), read from the local Hugging Face cache only.

Never downloads; safetensors snapshots only; an existing path always wins (docs/external-models.md, "Models by Hub
id"). Importing this module imports neither torch nor huggingface_hub.
"""
from __future__ import annotations

import os
import re
from pathlib import Path

from ..core.errors import BadInput

#: ``org/name`` as the Hub spells ids (letters, digits, ``-``, ``_``, ``.``), optionally ``@revision``
HUB_ID = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)(?:@(?P<rev>[\w./-]+))?$")
#: a snapshot folder of the cache: ``…/models--org--name/snapshots/<commit>``
_SNAPSHOT = re.compile(r"models--(?P<org>[^/]+?)--(?P<name>[^/]+)/snapshots/[^/]+/?$")


def is_hub_id(value) -> bool:
    """Whether ``--model VALUE`` names a Hub id rather than a path (an existing path always wins)."""
    return value is not None and not Path(str(value)).exists() and HUB_ID.match(str(value)) is not None


def cache_dir() -> str:
    """The Hugging Face hub cache this process reads (``$HF_HUB_CACHE``, else ``$HF_HOME/hub``, else the
    default), looked up when called."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    home = os.environ.get("HF_HOME") or os.path.join(os.path.expanduser("~"), ".cache", "huggingface")
    return os.path.join(home, "hub")


def resolve_hub_model(value: str) -> str:
    """The local snapshot folder of Hub id ``value`` (``org/name`` or ``org/name@revision``); BadInput (one line)
    when the cache does not hold it or it holds no safetensors weights."""
    m = HUB_ID.match(str(value))
    if m is None:
        raise BadInput(f"--model {value}: not a folder, a file or a Hub id (org/name)")
    # lazy: huggingface_hub only for a Hub id
    from huggingface_hub import snapshot_download
    from huggingface_hub.errors import HFValidationError, LocalEntryNotFoundError

    cache = cache_dir()
    try:
        folder = snapshot_download(m["repo"], revision=m["rev"], cache_dir=cache, local_files_only=True)
    except (LocalEntryNotFoundError, HFValidationError, FileNotFoundError, OSError, ValueError):
        raise BadInput(f"--model {value}: not in the local Hugging Face cache ({cache}); privbench never downloads: "
                       f"fetch it first (`hf download {m['repo']}`) or give the model's folder") from None
    if not any(Path(folder).rglob("*.safetensors")):
        raise BadInput(f"--model {value}: the cached snapshot {folder} holds no .safetensors weights; privbench "
                       f"loads safetensors only (pickled .bin/.pt weights can run code when loaded)")
    return str(folder)


def hub_id_of(path) -> str | None:
    """``org/name`` of a folder inside the cache's layout (``…/models--org--name/snapshots/<commit>``), else None."""
    m = _SNAPSHOT.search(str(path).replace(os.sep, "/"))
    return f"{m['org']}/{m['name']}" if m else None
