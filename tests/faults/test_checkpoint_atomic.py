"""A checkpoint is one atomic unit. A process killed at any instant of a checkpoint save resumes to
exactly the weights of an uninterrupted run, and what the kill left behind is cleaned up.

The kill is simulated at the k-th file-system commit (``os.replace`` / ``os.rename``) of the second checkpoint of a
20-step training (checkpoints at steps 10 and 20): no kill, not even one between the weights file and the
optimizer state or ``state.json``, resumes step-20 weights from step 10. A "hard" kill also skips every cleanup
(``os.unlink``, ``shutil.rmtree`` do nothing), as SIGKILL would.
"""
from __future__ import annotations

import os
import shutil
from types import SimpleNamespace

import pytest
import torch
from safetensors.torch import load_file


class Killed(BaseException):
    """Stands for the process dying (not an Exception: no handler in privbench may swallow it)."""


class Killer:
    """Counts file-system commits; raises Killed at call number ``at`` (None: never)."""

    def __init__(self, monkeypatch, at=None, hard=False):
        self.n, self.at, self.hard, self.mp = 0, at, hard, monkeypatch
        real_replace, real_rename = os.replace, os.rename
        self.real_unlink, self.real_rmtree = os.unlink, shutil.rmtree
        monkeypatch.setattr(os, "replace", self._wrap(real_replace))
        monkeypatch.setattr(os, "rename", self._wrap(real_rename))

    def _wrap(self, fn):
        def call(*a, **kw):
            self.n += 1
            if self.at is not None and self.n == self.at:
                if self.hard:  # SIGKILL: no finally/except cleanup runs
                    self.mp.setattr(os, "unlink", lambda *a, **k: None)
                    self.mp.setattr(shutil, "rmtree", lambda *a, **k: None)
                raise Killed(f"killed at file-system commit {self.n}")
            return fn(*a, **kw)
        return call


def _centralized(tmp_path, name):
    from privbench.core.config import build_config
    from privbench.models.training import TrainData, train_denoiser
    from privbench.runs import train as api

    cfg = build_config("centralized", "digits", "test", 0, [("train.steps", "20"), ("train.checkpoint_every", "10")])
    m = api.make_method(cfg, tmp_path / name, "cpu")
    x, y = m.training_data()  # writes split.json now, before any kill is armed
    ckpt_dir = m.ctx.ckpt_dir

    def run():
        train_denoiser(m.ctx.new_denoiser(), TrainData(x, y), m.ctx.schedule.alphas_cumprod(), cfg.train, ckpt_dir,
                       name="model", seed=0, device="cpu")

    return run, ckpt_dir


def _dp_sgd(tmp_path, name):
    from privbench.models.dp_sgd import DPPlan, dp_sgd_train

    plan = DPPlan(n_records=32, sample_rate=0.25, steps=20, epsilon_budget=10.0, delta=1e-5, noise_multiplier=1.0,
                  calibrated=False, accountant="rdp", max_grad_norm=1.0, noise_multiplicity=1)
    tcfg = SimpleNamespace(lr=1e-2, warmup=0, weight_decay=0.0, ema_decay=0.9, log_every=5, checkpoint_every=10,
                           ema_start_weight=1.0)  # the checkpoint cadence is under test, not the EMA cap
    ckpt_dir = tmp_path / name / "checkpoints"

    def run():
        torch.manual_seed(0)
        model = torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
        params = [p for p in model.parameters() if p.requires_grad]

        def step_fn(_step, _idx, g):  # a privatized-looking gradient drawn from the step's generator
            return [torch.randn(p.shape, generator=g) * 0.1 + p.detach() * 0.01 for p in params], {"loss": 1.0}

        dp_sgd_train(model, plan, tcfg, ckpt_dir, name="model", seed=0, device="cpu", step_fn=step_fn)

    return run, ckpt_dir


TRAINERS = {"train_denoiser": _centralized, "dp_sgd_train": _dp_sgd}


def _weights(ckpt_dir):
    return load_file(str(ckpt_dir / "model.safetensors"))


@pytest.fixture(scope="module")
def uninterrupted(tmp_path_factory):
    """Per trainer: the final weights of an uninterrupted run and its file-system commits per checkpoint."""
    out = {}
    for name, make in TRAINERS.items():
        mp = pytest.MonkeyPatch()
        try:
            run, ckpt_dir = make(tmp_path_factory.mktemp(name), "full")
            killer = Killer(mp)
            run()
            out[name] = (_weights(ckpt_dir), killer.n // 2)  # two identical checkpoints
        finally:
            mp.undo()
    return out


@pytest.mark.parametrize("trainer", sorted(TRAINERS))
@pytest.mark.parametrize("k", range(1, 8))
@pytest.mark.parametrize("hard", [False, True], ids=["exception", "sigkill"])
def test_a_kill_during_a_checkpoint_resumes_bit_identical(tmp_path, monkeypatch, uninterrupted, trainer, k, hard):
    full, per_ckpt = uninterrupted[trainer]
    if k > per_ckpt:
        pytest.skip(f"a checkpoint makes {per_ckpt} file-system commits")
    run, ckpt_dir = TRAINERS[trainer](tmp_path, "part")
    killer = Killer(monkeypatch, at=per_ckpt + k, hard=hard)  # the k-th commit of the step-20 checkpoint
    with pytest.raises(Killed):
        run()
    monkeypatch.undo()  # the process is gone; a new one resumes
    run()
    resumed = _weights(ckpt_dir)
    assert resumed.keys() == full.keys()
    differ = [key for key in full if not torch.equal(full[key], resumed[key])]
    assert not differ, f"{len(differ)} of {len(full)} tensors differ after a kill at commit {killer.at}"
    left = sorted(p.name for p in ckpt_dir.iterdir() if p.name.startswith("."))
    assert left == [], f"temporary files left behind: {left}"


def test_the_manifest_is_written_last_and_lists_the_hashes(tmp_path):
    """state.json (the manifest) holds the SHA-256 of the weights and optimizer files it belongs to."""
    import hashlib
    import json

    run, ckpt_dir = _centralized(tmp_path, "m")
    run()
    st = json.loads((ckpt_dir / "model.state.json").read_text())
    assert st["step"] == 20
    for key, suffix in (("weights", ".safetensors"), ("optim", ".optim.pt")):
        data = (ckpt_dir / f"model{suffix}").read_bytes()
        assert st["sha256"][key] == hashlib.sha256(data).hexdigest()


def test_weights_swapped_under_a_manifest_are_refused(tmp_path):
    """Weights that do not match their manifest (e.g. from a later step) are never resumed from."""
    from privbench.core.errors import BadInput

    run, ckpt_dir = _centralized(tmp_path, "m")
    run()
    w = ckpt_dir / "model.safetensors"
    t = load_file(str(w))
    key = next(iter(t))
    t[key] = t[key] + 1.0
    from safetensors.torch import save_file

    save_file(t, str(w))
    st = ckpt_dir / "model.state.json"
    st.write_text(st.read_text().replace('"step": 20', '"step": 10'))  # as if it stopped at 10: must resume
    with pytest.raises(BadInput, match="damaged"):
        run()
