"""The one training loop (models/loop.py): the warm-up it takes from diffusers gives lr·min(1, (s+1)/W) at step s
bit for bit (also after a resume), a training stopped after a checkpoint resumes to the uninterrupted weights, and a
non-finite loss stops the run.
The end-to-end resume tests of each strategy: tests/core/test_training.py (PlainStep), tests/models/test_dpdm.py
(DPSGDStep), tests/models/test_dpsad.py (DistillStep), tests/faults/test_checkpoint_atomic.py (a kill mid-save)."""
from __future__ import annotations

from types import SimpleNamespace

import pytest
import torch

from privbench.models.loop import StepStrategy, Summary, train_loop, warmup_schedule


@pytest.mark.parametrize("warmup", [0, 1, 5])
@pytest.mark.parametrize("start", [0, 3])
def test_warmup_schedule_is_linear_from_the_first_step(warmup, start):
    lr = 2e-3
    p = torch.nn.Parameter(torch.zeros(1))
    opt = torch.optim.Adam([p], lr=123.0)  # what a resumed optimizer state may hold: overwritten
    schedule = warmup_schedule(opt, SimpleNamespace(lr=lr, warmup=warmup), start)
    for s in range(start, 12):
        assert opt.param_groups[0]["lr"] == (lr * min(1.0, (s + 1) / warmup) if warmup else lr)
        p.grad = torch.zeros(1)
        opt.step()
        schedule.step()


class _Toy(StepStrategy):
    """A step whose gradient is drawn from the step's seed (and a dropout layer from the default RNG)."""

    def optimizer(self, model, tcfg):
        return torch.optim.AdamW(model.parameters(), lr=tcfg.lr)

    def gradients(self, step, run):
        g = torch.Generator().manual_seed(1000 * run.seed + step)
        loss = run.model(torch.randn(8, 6, generator=g)).pow(2).mean()
        loss.backward()
        return {"loss": loss.detach()}

    def summarize(self, sums, n, step, run):
        del step, run  # part of the StepStrategy.summarize interface
        return Summary(float(sums["loss"]) / n)


def _toy_model():
    torch.manual_seed(0)
    return torch.nn.Sequential(torch.nn.Linear(6, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))


def test_resume_equals_uninterrupted(tmp_path):
    from safetensors.torch import load_file

    tcfg = SimpleNamespace(lr=1e-2, warmup=4, weight_decay=0.0, ema_decay=0.9, log_every=3, checkpoint_every=5)
    train_loop(_toy_model(), _Toy(), tcfg, tmp_path / "full", name="m", seed=0, device="cpu", steps=12)
    train_loop(_toy_model(), _Toy(), tcfg, tmp_path / "part", name="m", seed=0, device="cpu", steps=5)
    ema = train_loop(_toy_model(), _Toy(), tcfg, tmp_path / "part", name="m", seed=0, device="cpu", steps=12)
    assert "resumed from checkpoint at step 5/12" in (tmp_path / "part" / "log.txt").read_text()
    full, part = (load_file(str(tmp_path / d / "m.safetensors")) for d in ("full", "part"))
    assert full.keys() == part.keys() and all(torch.equal(full[k], part[k]) for k in full)
    assert not ema.training and all(torch.equal(v, full[f"ema.{k}"]) for k, v in ema.state_dict().items())


def test_divergence_stops_the_run(tmp_path):
    from privbench.core.errors import WorkFailed

    class Nan(_Toy):
        def summarize(self, sums, n, step, run):
            del sums, n, step, run  # part of the StepStrategy.summarize interface: this step always diverges
            return Summary(float("nan"))

    tcfg = SimpleNamespace(lr=1e-2, warmup=0, weight_decay=0.0, ema_decay=0.9, log_every=2, checkpoint_every=5)
    with pytest.raises(WorkFailed, match="training m diverged .* at step 2"):
        train_loop(_toy_model(), Nan(), tcfg, tmp_path, name="m", seed=0, device="cpu", steps=4)
    assert "diverged" in (tmp_path / "log.txt").read_text()
