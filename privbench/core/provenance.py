"""Where a number came from: privbench's version and the git commit of the checkout that made it."""
from __future__ import annotations

import subprocess
from pathlib import Path
from typing import Any

from .version import __version__


def version() -> str:
    return __version__


def git_info() -> dict[str, Any]:
    """The git commit of the privbench checkout (if it is one) and whether the code that makes the numbers (the
    package, benchmarks/, pyproject.toml) has uncommitted changes — a regenerated committed report is not."""
    root = Path(__file__).resolve().parents[2]
    info: dict[str, Any] = {"commit": None, "dirty": None}
    if not (root / ".git").exists():
        return info
    try:
        c = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=10)
        if c.returncode == 0:
            info["commit"] = c.stdout.strip()
        d = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no", "--",
                            "privbench", "benchmarks", "pyproject.toml"],
                           capture_output=True, text=True, timeout=10)
        if d.returncode == 0:
            info["dirty"] = bool(d.stdout.strip())
    except (OSError, subprocess.SubprocessError):
        pass
    return info


def git_commit() -> str | None:
    """The commit, with ``+modified`` when the code has uncommitted changes; None outside a checkout."""
    g = git_info()
    return None if not g["commit"] else g["commit"] + ("+modified" if g.get("dirty") else "")


def version_line() -> str:
    """``privbench --version``: the version, and the commit when the code runs from a git checkout."""
    line = f"privbench, version {version()}"
    g = git_info()
    if g["commit"]:
        line += f" (commit {g['commit'][:12]}{', with uncommitted changes' if g.get('dirty') else ''})"
    return line


def package_version(name: str) -> str | None:
    """An installed package's version from its metadata, without importing it (a report names torch's version
    and stays torch-free); None when it is not installed."""
    # lazy: importlib.metadata is only read by the reports that print versions
    from importlib.metadata import PackageNotFoundError
    from importlib.metadata import version as dist_version

    try:
        return dist_version(name)
    except PackageNotFoundError:
        return None
