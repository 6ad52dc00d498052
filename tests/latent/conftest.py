"""Session fixtures of the text-to-image tests: a tiny SD-shaped pipeline fine-tuned on 32 captioned digits
until it memorizes them, its random-initialisation twin, a LoRA adapter trained over the frozen random base, and
the records (captions in the .npz)."""
from __future__ import annotations

import copy

import pytest

import t2i_helpers as H


@pytest.fixture(scope="session")
def t2i(tmp_path_factory):
    from privbench import load_dataset

    root = tmp_path_factory.mktemp("t2i")
    (xm, ym), (xn, yn) = H.digits_split(32, 32, seed=0)
    x_all, _ = load_dataset("digits")
    tok = H.tokenizer()
    te = H.text_encoder(tok, 0)
    v = H.vae(0, x_all)
    zm = H.latents(v, xm)
    cond = H.embed(tok, te, [H.caption(c) for c in ym])
    null = H.embed(tok, te, [""])
    base = H.unet(0)
    tuned = H.finetune(copy.deepcopy(base), zm, cond, null, H.FINETUNE_STEPS)
    lora_unet = copy.deepcopy(base)
    params = H.add_lora(lora_unet)
    H.finetune(lora_unet, zm, cond, null, H.LORA_STEPS, params=params, lr=5e-3)
    out = {"root": root, "xm": xm, "ym": ym, "xn": xn, "yn": yn, "tok": tok, "te": te, "vae": v, "base": base,
           "tuned": tuned,
           "pipeline": H.save_pipeline(root / "pipeline", tuned, v, tok, te),
           "random": H.save_pipeline(root / "random", base, v, tok, te),
           "lora": H.save_lora(lora_unet, root / "lora"),
           "members": H.write_captioned_npz(root / "members.npz", xm, [H.caption(c) for c in ym], ym),
           "nonmembers": H.write_captioned_npz(root / "nonmembers.npz", xn, [H.caption(c) for c in yn], yn)}
    return out
