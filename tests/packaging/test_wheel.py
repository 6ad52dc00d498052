"""The wheel: built offline from the source, installed into a fresh virtualenv, it runs a shipped suite and renders
its report from outside the repository (suites, gates and the HTML template are package data)."""
from __future__ import annotations

import json
import os
import shutil
import site
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
pytestmark = pytest.mark.slow  # builds and installs a wheel into a fresh venv: minutes (make test-all)


def run(cmd, cwd, env, timeout=900):
    r = subprocess.run([str(c) for c in cmd], cwd=cwd, env=env, capture_output=True, text=True, timeout=timeout)
    assert r.returncode == 0, f"{' '.join(map(str, cmd))} → {r.returncode}\n{r.stdout[-2000:]}\n{r.stderr[-3000:]}"
    return r


def test_wheel_installs_offline_and_runs_the_test_suite(tmp_path):
    env = {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "PRIVBENCH_HOME", "PRIVBENCH_PLUGINS")}
    env.update(OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PRIVBENCH_PROGRESS="0", PIP_NO_INDEX="1",
               PIP_DISABLE_PIP_VERSION_CHECK="1")
    # build from a copy of the sources: setuptools' build/ and egg-info stay out of the checkout
    src = tmp_path / "src"
    shutil.copytree(ROOT / "privbench", src / "privbench", ignore=shutil.ignore_patterns("__pycache__", "*.pyc"))
    for f in ("pyproject.toml", "README.md"):
        shutil.copy(ROOT / f, src / f)
    run([sys.executable, "-m", "pip", "wheel", "--no-deps", "--no-build-isolation", "--no-index", "-w",
         tmp_path / "dist", src], tmp_path, env)
    (wheel,) = (tmp_path / "dist").glob("privbench-*.whl")
    names = set(zipfile.ZipFile(wheel).namelist())
    for data in ("privbench/bench/suites/tiny.yaml", "privbench/bench/suites/test.yaml",
                 "privbench/bench/suites/paper.yaml", "privbench/bench/gates/tiny.yaml",
                 "privbench/reports/templates/report.html", "privbench/models/t2i_tokenizer/vocab.json",
                 "privbench/models/t2i_tokenizer/merges.txt", "privbench/testing/__init__.py",
                 "privbench/testing/sd.py"):
        assert data in names, data
    meta = next(n for n in names if n.endswith(".dist-info/METADATA"))
    text = zipfile.ZipFile(wheel).read(meta).decode()
    for extra in ("dp", "fid", "ray", "test", "t2i"):
        assert f"Provides-Extra: {extra}" in text
    core = [ln for ln in text.splitlines() if ln.startswith("Requires-Dist:") and "extra ==" not in ln]
    assert not [ln for ln in core if any(p in ln for p in ("opacus", "dp-accounting", "torch-fidelity", "ray",
                                                                       "transformers", "peft"))], core

    # a fresh venv that sees this environment's packages (torch, ...) but not its privbench
    venv = tmp_path / "venv"
    run([sys.executable, "-m", "venv", venv], tmp_path, env)
    vpy = venv / "bin" / "python"
    vsite = Path(run([vpy, "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"], tmp_path,
                     env).stdout.strip())
    (vsite / "outer_env.pth").write_text("\n".join(site.getsitepackages()) + "\n")
    run([vpy, "-m", "pip", "install", "--no-index", "--no-deps", wheel], tmp_path, env)

    work = tmp_path / "elsewhere"        # outside the repository: no benchmarks/, no checkout
    work.mkdir()
    where = run([vpy, "-c", "import privbench; print(privbench.__file__)"], work, env).stdout.strip()
    assert Path(where).is_relative_to(venv), where
    pb = venv / "bin" / "privbench"
    v = run([pb, "--version"], work, env).stdout
    assert v.startswith("privbench, version ") and "commit" not in v

    res = json.loads(run([pb, "bench", "--suite", "test", "--runs-dir", work / "runs", "--out", work / "bench",
                          "--json"], work, env).stdout)
    assert res["counts"]["failed"] == 0 and res["counts"]["done"] >= 4 and res["suite"] == "test"
    rep = json.loads(run([pb, "report", work / "bench", "--out", work / "report", "--json"], work, env).stdout)
    files = {Path(p).relative_to(work / "report").as_posix() for p in rep["files"]}
    assert {"index.html", "side_by_side.csv", "tables.tex", "tables.md"} <= files
    assert any(f.startswith("figures/") and f.endswith(".pdf") for f in files)
    html = (work / "report" / "index.html").read_text()
    assert "results meaningless" in html and "pfdm" in html and "centralized" in html
    chk = subprocess.run([pb, "check", "--gates", "tiny", work / "bench"], cwd=work, env=env, capture_output=True,
                         text=True)
    assert chk.returncode == 2 and "matched none" in chk.stderr, chk.stderr   # the shipped gates are found
    # the test models ship too: the tiny SD recipe builds from the installed package (tokenizer as package data)
    run([vpy, "-c", "import privbench.testing as t; t.tiny_sd_pipeline('sd')"], work, env)
    assert {"pipeline", "pretrained", "random", "lora", "members.npz", "heldout.npz", "audit.yaml"} <= {
        p.name for p in (work / "sd").iterdir()}
