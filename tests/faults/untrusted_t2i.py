"""Helpers of the text-to-image fault tests: a tiny random Stable-Diffusion-layout pipeline (the builders of
privbench.testing.sd), captioned digits records, a copy of the pipeline with one config value changed, and
a privbench process whose peak memory is measured."""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

from untrusted_files import BOUNDED_BYTES

from privbench.testing import sd as H

#: the peak resident memory a refusing process may reach (torch and diffusers imported fit well inside it)
PEAK_LIMIT_KB = int(1.5 * (1 << 20))


def tiny_pipeline(root: Path) -> dict:
    """A random tiny SD pipeline (``pipe``), 8 + 8 captioned digits records and the parts it was built from."""
    root.mkdir(parents=True, exist_ok=True)
    (xm, ym), (xn, yn), _ = H.digits_split(8, 8, seed=0, n_public=0)
    tok = H.tokenizer()
    te = H.text_encoder(tok)
    pipe = H.save_pipeline(root / "pipe", H.unet(0), H.vae(0), tok, te)
    return {"pipe": pipe, "tok": tok, "te": te,
            "members": H.write_captioned_npz(root / "m.npz", xm, H.record_captions(ym), ym),
            "nonmembers": H.write_captioned_npz(root / "n.npz", xn, H.record_captions(yn, range(8, 16)), yn)}


def edited(pipe: Path, dst: Path, component: str, file: str = "config.json", **values) -> Path:
    """A copy of ``pipe`` whose ``component/file`` has ``values`` set (a value of ``...`` deletes the key)."""
    shutil.copytree(pipe, dst)
    f = dst / component / file
    cfg = json.loads(f.read_text())
    for k, v in values.items():
        if v is ...:
            cfg.pop(k, None)
        else:
            cfg[k] = v
    f.write_text(json.dumps(cfg))
    return dst


PEAK = "privbench-test-peak-rss-kb"
_MEASURED = (f"import atexit, resource, runpy, sys; atexit.register(lambda: print('{PEAK}', "
             f"resource.getrusage(resource.RUSAGE_SELF).ru_maxrss, file=sys.stderr)); "
             f"sys.argv = ['privbench'] + sys.argv[1:]; runpy.run_module('privbench', run_name='__main__')")


def run_measured(*args) -> tuple[int, list[str], int]:
    """``python -m privbench ARGS`` in a subprocess (address space capped at BOUNDED_BYTES, so an unbounded
    allocation fails fast): (exit code, stderr lines without the measurement, peak resident memory in KB)."""
    import resource

    def limit():
        resource.setrlimit(resource.RLIMIT_AS, (BOUNDED_BYTES, BOUNDED_BYTES))

    env = dict(os.environ, OMP_NUM_THREADS="1", MKL_NUM_THREADS="1", PRIVBENCH_PROGRESS="0",
               PYTHONPATH=str(Path(__file__).resolve().parents[2]))
    r = subprocess.run([sys.executable, "-c", _MEASURED, *map(str, args)], capture_output=True, text=True,
                       preexec_fn=limit, env=env, timeout=600)
    lines = [ln for ln in r.stderr.splitlines() if ln.strip()]
    peak = [int(ln.split()[1]) for ln in lines if ln.startswith(PEAK)]
    return r.returncode, [ln for ln in lines if not ln.startswith(PEAK)], peak[0] if peak else -1
