"""Atomic writes: complete or absent, fsynced, and readable by others as the umask says (not 0600)."""
from __future__ import annotations

import os
import stat

import pytest

from privbench.core.io import atomic_path, atomic_write_json, atomic_write_text


def test_files_get_the_process_umask(tmp_path):
    old = os.umask(0o022)
    try:
        atomic_write_text(tmp_path / "a.txt", "x")
        atomic_write_json(tmp_path / "b.json", {"k": 1})
        assert stat.S_IMODE((tmp_path / "a.txt").stat().st_mode) == 0o644
        assert stat.S_IMODE((tmp_path / "b.json").stat().st_mode) == 0o644
        os.umask(0o077)
        atomic_write_text(tmp_path / "c.txt", "x")
        assert stat.S_IMODE((tmp_path / "c.txt").stat().st_mode) == 0o600
    finally:
        os.umask(old)


def test_a_failed_write_leaves_the_old_file_and_no_temporary(tmp_path):
    p = tmp_path / "f.txt"
    atomic_write_text(p, "old")
    with pytest.raises(RuntimeError), atomic_path(p) as tmp:
        tmp.write_text("half")
        raise RuntimeError("killed")
    assert p.read_text() == "old"
    assert [f.name for f in tmp_path.iterdir()] == ["f.txt"]
