"""Writes the tiny Stable-Diffusion-shaped models of tests/latent (plain diffusers/transformers/peft code,
privbench.testing.tiny_sd_pipeline) to a folder, for the README's and docs/external-models.md's text-to-image
audit runs and for a suite:

    OUT/pipeline/     pre-trained on 512 public digits, then fully fine-tuned on 32 captioned members
    OUT/pretrained/   the pre-trained base alone (it never saw the members)
    OUT/random/       the same architecture at random initialisation
    OUT/lora/         pytorch_lora_weights.safetensors: a rank-16 LoRA trained on the members over OUT/pretrained
    OUT/members.npz, OUT/heldout.npz   images, labels and per-record captions ("a picture of the digit three
                                       number one seven"; members and held-out records numbered from one
                                       shuffled range)
    OUT/audit.yaml    a suite with the three external targets

usage: python benchmarks/tiny_sd_pipeline.py OUT
"""
from __future__ import annotations

import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))


def main(out: Path) -> None:
    from privbench.testing import tiny_sd_pipeline

    tiny_sd_pipeline(out)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
