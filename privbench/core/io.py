"""Files: atomic writes that fsync, a lock per path (``filelock``), JSON helpers and safe file-name parts.

Every file privbench writes goes through :func:`atomic_path`, so no reader sees a half-written file. Third-party
modules (numpy, safetensors, torch) are imported only inside the functions that use them.
"""
from __future__ import annotations

import contextlib
import datetime as _dt
import hashlib
import json
import logging
import os
import re
import tempfile
from pathlib import Path
from typing import Any, Iterator

from .errors import BadInput
from .jsonio import MAX_RECORD_BYTES, read_json

LOG = logging.getLogger(__name__)


def is_writer() -> bool:
    """True on the process that writes files: always, except under torchrun, where rank 0 alone writes the run
    (the other ranks compute the same bytes; privbench.core.distributed)."""
    if os.environ.get("WORLD_SIZE", "1").strip() in ("", "1"):
        return True
    from .distributed import is_main  # lazy: core.distributed imports torch; core.io does not

    return is_main()


@contextlib.contextmanager
def atomic_path(path: str | Path) -> Iterator[Path]:
    """Yield a temporary path next to ``path``; fsync it and rename it into place only if the block succeeds
    (under torchrun: only on rank 0; the other ranks' temporary files are discarded, see :func:`is_writer`)."""
    path = Path(path)
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.stem}.", suffix=path.suffix or ".tmp")  # keep the suffix: writers infer formats
    os.close(fd)
    try:
        yield Path(tmp)
        if not is_writer():
            return
        with open(tmp, "rb+") as fh:  # whatever wrote the file, its bytes reach the disk before the rename
            os.fsync(fh.fileno())
        os.chmod(tmp, 0o666 & ~_umask())  # mkstemp makes 0600; the file gets the mode any new file would get
        os.replace(tmp, path)
    except OSError as e:
        if e.filename is not None or e.errno is None:
            raise
        # a failed write() names no file ("[Errno 27] File too large"): name the one being written
        raise OSError(e.errno, e.strerror, str(path)) from e
    finally:
        with contextlib.suppress(FileNotFoundError):
            os.unlink(tmp)


def check_writable(path: str | Path, what: str) -> None:
    """BadInput unless a file can be created next to ``path`` (checked before long work whose output it is)."""
    parent = Path(path).parent
    if parent.exists() and not parent.is_dir():
        raise BadInput(f"{what} {path}: {parent} is not a folder")
    try:
        parent.mkdir(parents=True, exist_ok=True)
        with tempfile.NamedTemporaryFile(dir=parent, prefix=".privbench-probe-"):
            pass
    except OSError as e:
        raise BadInput(f"{what} {path}: cannot write there ({e.strerror})") from None


def _umask() -> int:
    mask = os.umask(0o022)
    os.umask(mask)
    return mask


def atomic_write_bytes(path: str | Path, data: bytes) -> None:
    if not is_writer():
        return
    with atomic_path(path) as tmp:
        Path(tmp).write_bytes(data)


def atomic_write_text(path: str | Path, text: str) -> None:
    atomic_write_bytes(path, text.encode())


def json_default(o):
    """JSON for numpy scalars/arrays and paths (everything else is an error)."""
    import numpy as np  # lazy: only for numpy values; core.io imports no third-party module

    if isinstance(o, (np.floating, np.integer)):
        return o.item()
    if isinstance(o, np.ndarray):
        return o.tolist()
    if isinstance(o, Path):
        return str(o)
    raise TypeError(f"not JSON-serialisable: {type(o).__name__}")


def atomic_write_json(path: str | Path, obj: Any) -> None:
    atomic_write_text(path, json.dumps(obj, indent=2, sort_keys=False, default=json_default) + "\n")


def read_json_or_none(path: Path, corrupt: str) -> Any:
    """A JSON file's content, None when it does not exist; a corrupt one is BadInput ``<path>: <corrupt>``."""
    if not path.exists():
        return None
    try:
        return read_json(path, "", MAX_RECORD_BYTES)
    except BadInput:
        raise BadInput(f"{path}: {corrupt}") from None


#: the most UTF-8 bytes a name takes in a file name (:func:`safe_name`)
MAX_NAME_BYTES = 100


def safe_name(name: str) -> str:
    """A name as a file-name part: ``client:0`` → ``client0`` (names in run and attack folders), at most
    :data:`MAX_NAME_BYTES` UTF-8 bytes so that a file name holding several stays under the file system's 255."""
    kept = "".join(ch if ch.isalnum() or ch in "-_." else "" for ch in name.replace(":", ""))
    return kept.encode()[:MAX_NAME_BYTES].decode(errors="ignore") or "target"


@contextlib.contextmanager
def path_lock(folder: Path, what: str, busy: str) -> Iterator[None]:
    """An exclusive lock ``<folder>/.<what>.lock`` (``filelock``): a second process waits, saying ``busy``."""
    folder.mkdir(parents=True, exist_ok=True)
    with file_lock(folder / f".{what}.lock", busy):
        yield


@contextlib.contextmanager
def file_lock(lock_file: Path, busy: str) -> Iterator[None]:
    """An exclusive lock on ``lock_file`` (created in its existing folder; no folder is made for it): a second
    process waits, saying ``<folder> <busy>`` on stderr."""
    from filelock import FileLock, Timeout  # lazy: per call (tests/faults/test_settings_hashed.py patches filelock)

    lock = FileLock(str(lock_file))
    try:
        lock.acquire(timeout=0)
    except Timeout:
        LOG.info(f"privbench: {lock_file.parent} {busy}; waiting for it")
        lock.acquire()
    try:
        yield
    finally:
        lock.release()


_HASHES: dict[tuple, str] = {}


def sha256_file(path: str | Path) -> str:
    """The SHA-256 of a file's bytes (hex). Remembered per process by (device, inode, size, mtime, ctime): a file
    rewritten, truncated or replaced gets a new ctime, so a changed file is always hashed again."""
    path = Path(path)
    st = path.stat()
    key = (str(path.resolve()), st.st_dev, st.st_ino, st.st_size, st.st_mtime_ns, st.st_ctime_ns)
    hit = _HASHES.get(key)
    if hit is not None:
        return hit
    h = hashlib.sha256()
    with open(path, "rb") as fh:
        for block in iter(lambda: fh.read(1 << 20), b""):
            h.update(block)
    _HASHES[key] = h.hexdigest()
    return _HASHES[key]


def fsync_dir(path: str | Path) -> None:
    """Make a rename inside ``path`` durable (POSIX: the directory entry reaches the disk)."""
    fd = os.open(str(path), os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def append_log(folder: Path, msg: str) -> None:
    """Append one timestamped line to ``<folder>/log.txt`` (under torchrun: rank 0 only)."""
    if not is_writer():
        return
    folder.mkdir(parents=True, exist_ok=True)
    stamp = _dt.datetime.now().strftime("%Y-%m-%d %H:%M:%S")
    with open(folder / "log.txt", "a") as f:
        f.write(f"{stamp} {msg}\n")


def save_weights(path: Path, tensors: dict, meta: dict | None = None) -> None:
    """Tensors to a safetensors file (atomically), with string metadata."""
    # lazy: safetensors.torch imports torch; core.io imports no third-party module
    from safetensors import SafetensorError
    from safetensors.torch import save_file

    with atomic_path(path) as tmp:
        try:
            save_file({k: v.detach().contiguous() for k, v in tensors.items()}, str(tmp),
                      metadata={k: str(v) for k, v in (meta or {}).items()})
        except SafetensorError as e:  # an I/O failure (a full disk) as the OSError it is, so its cause is reported
            code = re.search(r"os error (\d+)", str(e))
            if code is None:
                raise
            raise OSError(int(code.group(1)), os.strerror(int(code.group(1))), str(path)) from None


def load_weights(path: Path, device="cpu") -> dict:
    """A safetensors file's tensors (never runs code); a damaged file is BadInput naming it."""
    # lazy: safetensors.torch imports torch; core.io imports no third-party module
    from safetensors import SafetensorError
    from safetensors.torch import load_file

    try:
        return load_file(str(path), device=str(device))
    except (SafetensorError, OSError, ValueError, RuntimeError) as e:
        raise BadInput(f"checkpoint {path}: corrupt or truncated ({str(e).splitlines()[0][:80]}); "
                       f"delete it to retrain") from None
