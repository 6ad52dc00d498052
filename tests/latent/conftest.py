"""Session fixtures of the text-to-image tests: a tiny SD-shaped pipeline at random initialisation with its
records (``t2i_parts``, cheap), and (``t2i``) the same architecture pre-trained on 512 public digits, then
fine-tuned on 32 captioned members until it memorizes them, plus a LoRA adapter trained on the members over the
frozen pre-trained base."""
from __future__ import annotations

import copy

import pytest
import t2i_helpers as H


@pytest.fixture(scope="session")
def t2i_parts(tmp_path_factory):
    from privbench import load_dataset

    root = tmp_path_factory.mktemp("t2i")
    split = H.recipe_split()
    (xm, ym, cm), (xn, yn, cn), (xp, yp, cp) = split["members"], split["nonmembers"], split["public"]
    x_all, _ = load_dataset("digits")
    tok = H.tokenizer()
    te = H.text_encoder(tok, 0)
    v = H.vae(0, x_all)
    base = H.unet(0)
    return {"root": root, "xm": xm, "ym": ym, "xn": xn, "yn": yn, "xp": xp, "yp": yp, "cm": cm, "cn": cn, "cp": cp,
            "tok": tok, "te": te, "vae": v, "base": base, "random": H.save_pipeline(root / "random", base, v, tok, te),
            "members": H.write_captioned_npz(root / "members.npz", xm, cm, ym),
            "nonmembers": H.write_captioned_npz(root / "nonmembers.npz", xn, cn, yn)}


@pytest.fixture(scope="session")
def t2i(t2i_parts):
    p = dict(t2i_parts)
    tok, te, v, base, root = p["tok"], p["te"], p["vae"], p["base"], p["root"]
    zm = H.latents(v, p["xm"])
    cond = H.embed(tok, te, p["cm"])
    null = H.embed(tok, te, [""])
    pre = H.pretrain(copy.deepcopy(base), H.latents(v, p["xp"]), H.embed(tok, te, p["cp"]), null)
    tuned = H.finetune(copy.deepcopy(pre), zm, cond, null, H.FINETUNE_STEPS, lr=H.FINETUNE_LR)
    lora_unet = copy.deepcopy(pre)
    params = H.add_lora(lora_unet)
    H.finetune(lora_unet, zm, cond, null, H.LORA_STEPS, params=params, lr=H.LORA_LR)
    p.update(tuned=tuned, pipeline=H.save_pipeline(root / "pipeline", tuned, v, tok, te),
             pretrained=H.save_pipeline(root / "pretrained", pre, v, tok, te),
             lora=H.save_lora(lora_unet, root / "lora"))
    return p
