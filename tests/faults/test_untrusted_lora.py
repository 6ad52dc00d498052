"""A LoRA adapter (``--lora``) is refused up front, naming its file, when its tensors are not floats, hold NaN or
infinity, or the path is not a regular file.

An adapter of integer tensors is never cast into the UNet and attacked; NaN/inf weights are refused before the
attack runs, naming the adapter; a FIFO is named as not a regular file."""
from __future__ import annotations

import os

import pytest
import torch
from fault_helpers import assert_one_line, entries
from untrusted_files import attack_model

pytest.importorskip("peft")

from untrusted_t2i import H, tiny_pipeline

LORA = "pytorch_lora_weights.safetensors"


@pytest.fixture(scope="module")
def t2i(tmp_path_factory):
    root = tmp_path_factory.mktemp("t2i")
    parts = tiny_pipeline(root)
    un = H.unet(0)
    H.add_lora(un, rank=4)
    parts["lora"] = H.save_lora(un, root / "lora")
    return parts


def _edited(t2i, dst, edit):
    from safetensors.torch import load_file, save_file

    sd = dict(load_file(str(t2i["lora"] / LORA)))
    edit(sd)
    dst.mkdir()
    save_file(sd, str(dst / LORA))
    return dst / LORA


FIRST = "unet.conv_in.lora_A.weight"


@pytest.mark.parametrize("edit,needle", [
    (lambda sd: sd.update({k: v.to(torch.int32) for k, v in sd.items()}),
     "94 tensor(s) are not floating point (unet.conv_in.lora_A.weight int"),
    (lambda sd: sd.update({FIRST: sd[FIRST].to(torch.int64)}), f"1 tensor(s) are not floating point ({FIRST} int)"),
    (lambda sd: sd.update({FIRST: torch.full_like(sd[FIRST], float("nan"))}),
     f"1 tensor(s) hold NaN or infinity ({FIRST}); the adapter's weights must be finite"),
    (lambda sd: sd.update({FIRST: sd[FIRST].index_fill(0, torch.tensor([0]), float("inf"))}),
     f"1 tensor(s) hold NaN or infinity ({FIRST})"),
], ids=["int-all", "int64-one", "nan", "inf"])
def test_bad_adapter_weights(tmp_path, t2i, edit, needle):
    lora = _edited(t2i, tmp_path / "lora", edit)
    r = attack_model(t2i["pipe"], t2i["members"], t2i["nonmembers"], tmp_path / "runs", "--lora", lora.parent)
    line = assert_one_line(r, 2, needle)
    assert f"--lora {lora}:" in line  # the file, also when its folder was given
    assert entries(tmp_path / "runs") == []


def test_a_fifo_is_not_a_missing_file(tmp_path, t2i):
    fifo = tmp_path / LORA
    os.mkfifo(fifo)
    r = attack_model(t2i["pipe"], t2i["members"], t2i["nonmembers"], tmp_path / "runs", "--lora", fifo)
    assert_one_line(r, 2, f"--lora {fifo}: not a regular file (a FIFO, socket or device is never read)")
    assert entries(tmp_path / "runs") == []


def test_the_untouched_adapter_attacks(tmp_path, t2i):
    r = attack_model(t2i["pipe"], t2i["members"], t2i["nonmembers"], tmp_path / "runs", "--lora", t2i["lora"])
    assert r.code == 0, r
