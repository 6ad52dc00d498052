"""Writes the tiny Stable-Diffusion-shaped models of tests/latent (plain diffusers/transformers/peft code) to a
folder, for the README's and docs/external-models.md's text-to-image audit runs and for a suite:

    OUT/pipeline/     pre-trained on 512 public digits, then fully fine-tuned on 32 captioned members
    OUT/pretrained/   the pre-trained base alone (it never saw the members)
    OUT/random/       the same architecture at random initialisation
    OUT/lora/         pytorch_lora_weights.safetensors: a rank-16 LoRA trained on the members over OUT/pretrained
    OUT/members.npz, OUT/heldout.npz   images, labels and per-record captions ("a picture of the digit three
                                       number one seven")
    OUT/audit.yaml    a suite with the three external targets

usage: python benchmarks/tiny_sd_pipeline.py OUT
"""
from __future__ import annotations

import copy
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
sys.path[:0] = [str(ROOT / "tests" / "latent"), str(ROOT)]

import t2i_helpers as H  # noqa: E402

SUITE = """name: t2i-audit
preset: tiny
device: cpu
set: {attack.t: 100, attack.n_draws: 8}
external:
  sd-finetune: {model: pipeline, members: members.npz, nonmembers: heldout.npz, attacks: [loss, sima, pia, clid]}
  sd-lora: {model: pretrained, lora: lora, members: members.npz, nonmembers: heldout.npz, attacks: [loss, sima, pia, clid]}
  sd-random: {model: random, members: members.npz, nonmembers: heldout.npz, attacks: [loss, sima, pia, clid]}
"""


def main(out: Path) -> None:
    from privbench import load_dataset

    out.mkdir(parents=True, exist_ok=True)
    (xm, ym), (xn, yn), (xp, yp) = H.digits_split(32, 32, seed=0)
    x_all, _ = load_dataset("digits")
    tok = H.tokenizer()
    te = H.text_encoder(tok, 0)
    v = H.vae(0, x_all)
    null = H.embed(tok, te, [""])
    base = H.unet(0)
    pre = H.pretrain(copy.deepcopy(base), H.latents(v, xp), H.embed(tok, te, H.record_captions(yp, 64)), null)
    zm, cond = H.latents(v, xm), H.embed(tok, te, H.record_captions(ym))
    tuned = H.finetune(copy.deepcopy(pre), zm, cond, null, H.FINETUNE_STEPS, lr=H.FINETUNE_LR)
    lora = copy.deepcopy(pre)
    H.finetune(lora, zm, cond, null, H.LORA_STEPS, params=H.add_lora(lora), lr=H.LORA_LR)
    H.save_pipeline(out / "pipeline", tuned, v, tok, te)
    H.save_pipeline(out / "pretrained", pre, v, tok, te)
    H.save_pipeline(out / "random", base, v, tok, te)
    H.save_lora(lora, out / "lora")
    H.write_captioned_npz(out / "members.npz", xm, H.record_captions(ym), ym)
    H.write_captioned_npz(out / "heldout.npz", xn, H.record_captions(yn, 32), yn)
    (out / "audit.yaml").write_text(SUITE)
    print(f"wrote {out}")


if __name__ == "__main__":
    main(Path(sys.argv[1]))
