"""Fixtures of the external-model tests: a diffusers UNet trained with plain diffusers + torch code (not
privbench's loop) until it memorizes 32 digits records, and the same architecture at random initialisation."""
from __future__ import annotations

import pytest
from ext_helpers import digits_split, tiny_unet, train_memorizing_unet, write_npz


@pytest.fixture(scope="session")
def memorized(tmp_path_factory):
    """{pipeline, random, members, nonmembers}: DDPMPipeline folders of the memorizing and the untrained UNet."""
    from diffusers import DDPMPipeline

    root = tmp_path_factory.mktemp("memorized")
    (xm, ym), (xn, yn), _ = digits_split(32, 32, seed=0)
    unet, sched = train_memorizing_unet(xm)
    DDPMPipeline(unet=unet, scheduler=sched).save_pretrained(str(root / "pipeline"))
    # the untrained twin: the very initialisation the training started from (tiny_unet(0))
    DDPMPipeline(unet=tiny_unet(0), scheduler=sched).save_pretrained(str(root / "random"))
    return {"pipeline": root / "pipeline", "random": root / "random", "root": root,
            "members": write_npz(root / "members.npz", xm, ym),
            "nonmembers": write_npz(root / "nonmembers.npz", xn, yn)}
