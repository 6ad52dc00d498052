"""Hand-made Targets with analytic ε-predictors, for checking attack formulas against direct computation and for
the registry contract checks (:mod:`privbench.testing.contracts`): a model that memorised its members exactly, a
Gaussian "public" denoiser, and a call log that counts an attack's network evaluations."""
from __future__ import annotations

import torch

from ..core.schedule import Schedule
from ..models.target import Calls, Target

SCHEDULE = Schedule(1000, 1e-4, 0.02, "linear", "fixed_small")


class CallLog:
    """Counts the network evaluations (NFEs) an attack makes: one entry (timesteps, batch size) per call."""

    def __init__(self):
        self.calls: list[tuple[list[int], int]] = []
        self.labels: list[torch.Tensor | None] = []

    @property
    def timesteps(self) -> list[int]:
        return [ts[0] for ts, _ in self.calls]

    def records_evaluated(self) -> int:
        return sum(n for _, n in self.calls)


def memorizing_eps(members: torch.Tensor, ac: torch.Tensor):
    """ε of the exact optimum for the empirical distribution of ``members`` (a model that memorised them):
    x̂₀ = Σ softmax(−‖x_t − √ᾱ m_i‖²/(2(1−ᾱ))) m_i, ε = (x_t − √ᾱ x̂₀)/√(1−ᾱ)."""
    m = members.flatten(1).double()

    def fn(x_t, t, _y=None):
        a = ac.double()[t].view(-1, 1)
        xf = x_t.flatten(1).double()
        d2 = ((xf[:, None, :] - a.sqrt()[:, :, None] * m[None]) ** 2).sum(-1)
        w = torch.softmax(-d2 / (2 * (1 - a)), dim=1)
        x0 = w @ m
        eps = (xf - a.sqrt() * x0) / (1 - a).sqrt()
        return eps.view_as(x_t).to(x_t.dtype)

    return fn


def gaussian_eps(public: torch.Tensor, ac: torch.Tensor):
    """ε of the exact posterior mean under a Gaussian prior N(μ, Σ) fitted to ``public`` records (a "public"
    denoiser): E[x₀|x_t] = μ + √ᾱ Σ (ᾱΣ + (1−ᾱ)I)⁻¹ (x_t − √ᾱ μ)."""
    p = public.flatten(1).double()
    mu = p.mean(0)
    cov = torch.cov(p.T) + 1e-4 * torch.eye(p.shape[1], dtype=torch.double)
    eye = torch.eye(p.shape[1], dtype=torch.double)

    def fn(x_t, t, _y=None):
        xf = x_t.flatten(1).double()
        out = torch.empty_like(xf)
        for tv in t.unique():
            sel = t == tv
            a = ac.double()[tv]
            gain = a.sqrt() * cov @ torch.linalg.inv(a * cov + (1 - a) * eye)
            x0 = mu + (xf[sel] - a.sqrt() * mu) @ gain.T
            out[sel] = (xf[sel] - a.sqrt() * x0) / (1 - a).sqrt()
        return out.view_as(x_t).to(x_t.dtype)

    return fn


def fake_target(eps_fn, shape=(1, 8, 8), num_classes=None, log: CallLog | None = None, name="fake") -> Target:
    """A Target whose ε-predictor is ``eps_fn(x_t, t, y)``; with ``log`` every call is recorded."""

    def wrapped(x_t, t, y):
        if log is not None:
            log.calls.append((sorted(set(t.tolist())), x_t.shape[0]))
            log.labels.append(None if y is None else y.clone())
        return eps_fn(x_t, t, y)

    return Target(name, "test", None, SCHEDULE, "cpu", num_classes, calls=Calls(eps_fn=wrapped), meta={"shape": shape},
                  clip_sample=False)
