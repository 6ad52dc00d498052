"""Importing an extra leaves the process's logging alone (core/extras.py): submitit's import-time
``logging.config.dictConfig`` closed every handler of the process — a user's log file, and through absl's handler
(dp-accounting imports absl.logging) the stream absl bound at its import, which under pytest-xdist was the
worker's capture file: every later test of that worker errored with "I/O operation on closed file"."""
from __future__ import annotations

import importlib.util
import json
import os
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]

SCRIPT = textwrap.dedent("""
    import io, json, logging, sys
    captured = io.TextIOWrapper(io.BytesIO(), encoding="utf-8")  # a test runner's capture file, as sys.stderr
    sys.stderr, real = captured, sys.stderr
    from absl import logging as absl_logging  # noqa: F401  (binds its handler to the sys.stderr of this moment)
    sys.stderr = real
    log_file = logging.FileHandler(sys.argv[1])
    logging.getLogger("mine").addHandler(log_file)
    from privbench.core.extras import require
    require("submitit", "--executor slurm")
    logging.getLogger("mine").warning("still logging")
    log_file.flush()
    print(json.dumps({"capture_open": not captured.closed, "log_file_open": log_file.stream is not None
                      and not log_file.stream.closed, "submitit_handlers": len(logging.getLogger("submitit").handlers)}))
""")


# checked without importing them here: importing submitit in this process is what the test is about
@pytest.mark.skipif(not all(importlib.util.find_spec(m) for m in ("submitit", "absl")), reason="needs submitit, absl")
def test_importing_submitit_closes_no_handler_of_the_process(tmp_path):
    log = tmp_path / "mine.log"
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    env.pop("SUBMITIT_LOG_LEVEL", None)
    r = subprocess.run([sys.executable, "-c", SCRIPT, str(log)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr
    got = json.loads(r.stdout.strip().splitlines()[-1])
    assert got == {"capture_open": True, "log_file_open": True, "submitit_handlers": 0}, got
    assert "still logging" in log.read_text()
