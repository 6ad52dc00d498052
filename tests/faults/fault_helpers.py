"""Helpers of the fault suite: an in-process CLI, the one-line check, snapshots of a run
store, and mounts (a full or read-only tmpfs) where the machine permits them."""
from __future__ import annotations

import contextlib
import hashlib
import subprocess
from pathlib import Path

import pytest
from click.testing import CliRunner

TEST = ("--method", "centralized", "--preset", "test")


class Run:
    """One CLI invocation in this process (so a test can monkeypatch what the command calls)."""

    def __init__(self, args):
        from privbench.cli import main

        r = CliRunner().invoke(main, [str(a) for a in args])
        self.code, self.out, self.err, self.exception = r.exit_code, r.stdout, r.stderr, r.exception
        self.lines = [line for line in self.err.splitlines() if line.strip()]

    def __repr__(self):
        return f"exit {self.code}\nstderr:\n{self.err}\nexception: {self.exception!r}"


def cli(*args) -> Run:
    return Run(args)


def assert_one_line(r: Run, code: int, needle: str | None = None, *, notes: bool = False) -> str:
    """Exit ``code`` with one stderr line ``privbench: error|failed|interrupted: …`` and no traceback; nothing else
    on stderr unless ``notes`` (then only other ``privbench: …`` lines, e.g. a cache hit before the failure)."""
    assert r.code == code, r
    assert "Traceback" not in r.err, r
    label = {2: "error", 3: "failed", 130: "interrupted"}[code]
    failures = [line for line in r.lines if line.startswith(("privbench: error: ", "privbench: failed: ",
                                                              "privbench: interrupted: "))]
    assert len(failures) == 1 and failures[0].startswith(f"privbench: {label}: "), r
    others = [line for line in r.lines if line not in failures]
    assert (not others) if not notes else all(line.startswith("privbench: ") for line in others), r
    if needle is not None:
        assert needle in failures[0], r
    return failures[0]


def snapshot(root: Path) -> dict[str, str]:
    """relative path → SHA-256 of every file under ``root`` (locks included: they must not appear either)."""
    root = Path(root)
    if not root.exists():
        return {}
    return {p.relative_to(root).as_posix(): hashlib.sha256(p.read_bytes()).hexdigest()
            for p in sorted(root.rglob("*")) if p.is_file()}


def entries(root: Path) -> list[str]:
    """Every file and folder under ``root`` (an empty folder left behind counts)."""
    root = Path(root)
    return sorted(p.relative_to(root).as_posix() for p in root.rglob("*")) if root.exists() else []


@contextlib.contextmanager
def tmpfs(path: Path, size: str):
    """A tmpfs mounted at ``path`` (skips the test where the machine does not permit mounting)."""
    path.mkdir(parents=True, exist_ok=True)
    r = subprocess.run(["mount", "-t", "tmpfs", "-o", f"size={size}", "tmpfs", str(path)], capture_output=True)
    if r.returncode != 0:
        pytest.skip(f"cannot mount a tmpfs here ({r.stderr.decode().strip()[:80]})")
    try:
        yield path
    finally:
        subprocess.run(["umount", "-l", str(path)], capture_output=True)


def remount_readonly(path: Path) -> None:
    subprocess.run(["mount", "-o", "remount,ro", str(path)], check=True, capture_output=True)
