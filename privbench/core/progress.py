"""Progress bars on stderr (tqdm); ``PRIVBENCH_PROGRESS=0`` turns them off."""
from __future__ import annotations

import os
import sys

from tqdm.auto import tqdm


def enabled() -> bool:
    # under torchrun only rank 0 draws bars (RANK is set by torchrun)
    return (os.environ.get("PRIVBENCH_PROGRESS", "1") not in ("0", "false", "no")
            and os.environ.get("RANK", "0").strip() in ("", "0"))


def bar(**kw):
    kw.setdefault("file", sys.stderr)
    kw.setdefault("mininterval", 1.0)
    kw.setdefault("dynamic_ncols", True)
    kw.setdefault("leave", False)
    return tqdm(disable=not enabled(), **kw)
