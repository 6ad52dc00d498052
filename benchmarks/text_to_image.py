"""The text-to-image suite of ``make bench`` → ``reports/text-to-image/``: Stable-Diffusion-shaped pipelines
fine-tuned OUTSIDE privbench (plain diffusers/transformers/peft code, benchmarks/tiny_sd_pipeline.py: a full
fine-tune and a LoRA adapter over a frozen pre-trained base, 32 captioned members; and the same architecture at
random initialisation as the control) audited beside privbench's
native text-to-image methods (``txt2img``: a full fine-tune; ``dp-txt2img``: DP-LoRA at ε = 10) on the same digits.

    python benchmarks/text_to_image.py                      # runs/t2i-outside/ + runs/bench-text-to-image/ → report
    python benchmarks/text_to_image.py --preset test --out /tmp/t2i-report    # a smoke run of the same pipeline

Steps: (1) build the outside pipelines and their records once into ``<runs>/t2i-outside/`` with
benchmarks/tiny_sd_pipeline.py (cached: a rerun reuses them); (2) write the suite (``text-to-image.yaml`` there: the outside models as ``external:`` targets, paths
relative to it); (3) ``privbench bench`` + ``privbench report``.
"""
from __future__ import annotations

import argparse
import os
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))
sys.path.insert(0, str(ROOT / "benchmarks"))

ATTACKS = ["loss", "secmi", "pia", "pian", "sima", "clid"]


def build_outside(folder: Path) -> None:
    """The outside pipelines, built once by benchmarks/tiny_sd_pipeline.py (the models of tests/latent)."""
    if (folder / "audit.yaml").is_file():
        return
    import tiny_sd_pipeline

    tiny_sd_pipeline.main(folder)


SUITE = """\
# written by benchmarks/text_to_image.py (reports/text-to-image/): latent text-to-image targets on 8x8 digits.
# Outside: SD-shaped pipelines fine-tuned with plain diffusers code on 32 captioned members (per-record captions),
# vs 32 non-members. Native: privbench's txt2img / dp-txt2img, pre-trained on {n_public} public digits, fine-tuned on
# {n_members} members (class captions "a picture of the digit <word>"), vs {n_members} non-members.
name: text-to-image
description: Stable-Diffusion-shaped pipelines (VAE, CLIP text encoder, UNet2DConditionModel) - fine-tuned outside privbench and by its txt2img / dp-txt2img methods
preset: {preset}
device: cpu
datasets: [digits]
seeds: [0]
set:
  data.public: pool
  data.n_public: {n_public}
  data.n_members: {n_members}
  data.n_nonmembers: {n_members}
  train.steps: {steps}
  sample.sampler: ddim
  sample.ddim_steps: 50
attacks: {attacks}
fid: false
samples: {{n: 40}}
methods:
  txt2img:
    role: baseline
    targets: [model]
  dp-txt2img:
    role: private
    targets: [model]
    set: {{t2i.trainable: lora, train.lr: 0.005, dp.epsilon: 10, train.steps: {dp_steps}}}
external:
  sd-finetune:
    model: pipeline
    members: members.npz
    nonmembers: heldout.npz
    attacks: {attacks}
  sd-lora:
    model: pretrained
    lora: lora
    members: members.npz
    nonmembers: heldout.npz
    attacks: {attacks}
  sd-random:                   # the control: the same architecture at random initialisation
    model: random
    members: members.npz
    nonmembers: heldout.npz
    attacks: {attacks}
"""


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--runs-dir", default=None, help="run store (default ./runs or $PRIVBENCH_HOME)")
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--out", default=None, help="report folder (default reports/text-to-image)")
    a = ap.parse_args()
    os.chdir(ROOT)
    os.environ.setdefault("OMP_NUM_THREADS", "1")

    from privbench.bench.runner import run_suite
    from privbench.reports import render_report
    from privbench.runs.store import default_runs_dir

    runs = Path(a.runs_dir) if a.runs_dir else default_runs_dir()
    outside = runs / "t2i-outside"
    t0 = time.time()
    build_outside(outside)
    print(f"outside pipelines: {outside} ({time.time() - t0:.0f} s)", flush=True)
    test = a.preset == "test"
    suite = outside / f"text-to-image{'-test' if test else ''}.yaml"
    suite.write_text(SUITE.format(preset=a.preset, n_public=128 if test else 512, n_members=32 if test else 64,
                                  steps=20 if test else 1500, dp_steps=20 if test else 300,
                                  attacks="[" + ", ".join(ATTACKS) + "]"))
    bench = runs / f"bench-text-to-image{'-test' if test else ''}"
    res = run_suite(str(suite), runs_dir=str(runs), device="cpu", out=str(bench))
    out = Path(a.out) if a.out else (ROOT / "reports" / "text-to-image" if not test else
                                     runs / "report-text-to-image-test")
    render_report(bench, out, latex_style="twocolumn")
    print(f"bench: {res['counts']}; report: {out} ({time.time() - t0:.0f} s)")
    return 0 if res["counts"].get("failed", 0) == 0 else 3


if __name__ == "__main__":
    raise SystemExit(main())
