"""privbench's version (the one place it is written: pyproject.toml reads it from here) and the version of what it
stores."""
from __future__ import annotations

from typing import Callable

from .errors import BadInput

__version__ = "0.1.0"

#: the version of the files privbench writes with a ``schema_version`` (result.json, bench.json's ``paper_claims``)
STORE_VERSION = 1
#: stored version → the function turning an object of that version into one of the next (none yet)
MIGRATIONS: dict[int, Callable[[dict], dict]] = {}


def upgraded(d: dict, version, what: str) -> dict:
    """``d``, stored at ``version``, as an object of :data:`STORE_VERSION` (through :data:`MIGRATIONS`); BadInput
    (one line, naming ``what``) for a version no migration leads from."""
    while version != STORE_VERSION:
        step = MIGRATIONS.get(version) if isinstance(version, int) and not isinstance(version, bool) else None
        if step is None:
            raise BadInput(f"{what}: schema_version {version!r} is not one privbench {__version__} reads (it reads "
                           f"{STORE_VERSION}); re-run it with this privbench")
        d, version = step(d), version + 1
    return d
