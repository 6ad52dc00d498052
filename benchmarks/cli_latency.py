"""How long the command line takes to answer when it has little to do: a wrongly shaped ``.npz`` refused,
``check`` on a result folder, ``list``, ``audit`` and ``report`` of an outside model's run.

    python benchmarks/cli_latency.py [--repeat 3] [--checkout DIR]

Set-up (not timed): an untrained diffusers ``UNet2DModel`` with a ``DDPMScheduler`` saved in a scratch folder,
32 + 32 digits records, a ``(4, 5)`` float array as the wrongly shaped ``.npz``, one ``privbench attack --model
… --attack loss`` run and a one-gate YAML. Each command then runs ``--repeat`` times as ``python -m privbench …``
in a fresh process (one thread) from ``--checkout`` (default: this checkout); the table gives the median and the
fastest wall time, the number of modules the process imported (``python -X importtime``) and whether torch or
diffusers was among them. Wall times depend on the machine's load: run it on an idle machine to compare with the
targets in docs/cli.md §3.
"""
from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]


def _setup(folder: Path, checkout: Path) -> dict:
    """The model, records, gates and one attack run the timed commands read."""
    import torch
    from diffusers import DDPMScheduler, UNet2DModel

    sys.path.insert(0, str(ROOT))
    from privbench import load_dataset

    torch.manual_seed(0)
    unet = UNet2DModel(sample_size=8, in_channels=1, out_channels=1, block_out_channels=(16, 32), layers_per_block=1,
                       down_block_types=("DownBlock2D",) * 2, up_block_types=("UpBlock2D",) * 2, norm_num_groups=8)
    unet.save_pretrained(str(folder / "model"))
    DDPMScheduler(num_train_timesteps=1000).save_pretrained(str(folder / "model"))
    x, y = load_dataset("digits")
    for name, sl in (("members", slice(0, 32)), ("heldout", slice(32, 64))):
        np.savez(folder / f"{name}.npz", images=x[sl].numpy().astype(np.float32), labels=y[sl].numpy())
    np.savez(folder / "bad.npz", images=np.zeros((4, 5), np.float32))
    (folder / "gates.yaml").write_text("gates:\n  - {method: external, target: model, attack: loss, metric: auc, "
                                       "max: 0.99}\n")
    r = _run(["attack", "--model", "model", "--members", "members.npz", "--nonmembers", "heldout.npz",
              "--attack", "loss", "--runs-dir", "runs", "--device", "cpu"], folder, checkout)
    if r.returncode != 0:
        raise SystemExit(f"set-up attack failed: {r.stderr[-500:]}")
    return {"run": str(next((folder / "runs").glob("external-*")))}


def _run(args: list[str], cwd: Path, checkout: Path, importtime: bool = False) -> subprocess.CompletedProcess:
    env = {**os.environ, "PYTHONPATH": str(checkout), "OMP_NUM_THREADS": "1", "PRIVBENCH_PROGRESS": "0"}
    flags = ["-X", "importtime"] if importtime else []
    return subprocess.run([sys.executable, *flags, "-m", "privbench", *args], cwd=cwd, env=env, capture_output=True,
                          text=True, timeout=600)


def _imported(stderr: str) -> list[str]:
    return [line.rsplit("|", 1)[1].strip() for line in stderr.splitlines() if line.startswith("import time:")
            and "|" in line]


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--repeat", type=int, default=3)
    ap.add_argument("--checkout", type=Path, default=ROOT, help="the privbench checkout to time (default: this one)")
    args = ap.parse_args(argv)
    with tempfile.TemporaryDirectory() as scratch:
        folder = Path(scratch)
        run = _setup(folder, args.checkout)["run"]
        commands = {
            "bad .npz refused": (["attack", "--model", "model", "--members", "bad.npz", "--nonmembers", "heldout.npz",
                                  "--attack", "loss", "--runs-dir", "runs"], 2),
            "check (result folder)": (["check", "--gates", "gates.yaml", run], 0),
            "list": (["list"], 0),
            "audit (result folder)": (["audit", run], 0),
            "report (result folder)": (["report", run, "--out", "report", "--format", "csv,markdown"], 0),
        }
        print(f"checkout {args.checkout}; {args.repeat} runs each; one thread; load average "
              f"{os.getloadavg()[0]:.2f}")
        print(f"{'command':24s} {'median s':>9s} {'min s':>7s} {'modules':>8s}  torch  diffusers")
        for label, (cmd, code) in commands.items():
            times = []
            for _ in range(args.repeat):
                t0 = time.perf_counter()
                r = _run(cmd, folder, args.checkout)
                times.append(time.perf_counter() - t0)
                if r.returncode != code:
                    raise SystemExit(f"{label}: exit {r.returncode}, expected {code}: {r.stderr[-300:]}")
            mods = _imported(_run(cmd, folder, args.checkout, importtime=True).stderr)
            print(f"{label:24s} {statistics.median(times):9.2f} {min(times):7.2f} {len(mods):8d}  "
                  f"{'yes' if 'torch' in mods else 'no':5s}  {'yes' if 'diffusers' in mods else 'no'}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
