"""DP-SGD step cost ÷ non-private step, same model and batch (goal ≤ ×1.5).

Models: the denoiser DPDM trains (``ctx.new_denoiser()`` of ``--preset``, default tiny: UNet (16, 32)), and the
paper preset's 35.7M-parameter UNet on random 32×32×3 records (``--paper-batch`` records; 0 skips it). Batch:
B records, K noise draws each (the model sees B·K noised inputs in both steps).

- non-private: forward of the B·K inputs, mean loss, backward, Adam step;
- DP-SGD, per backend of privbench.models.grad_sample (``ghost`` — the default —, ``hooks``, ``vmap``):
  per-record clipping of the K-averaged loss's gradient, Gaussian noise, / E[B], Adam step — the exact code
  path of dpdm (``dp_sgd_gradient``);
- ``opacus`` (reference only, not used by privbench): ``GradSampleModule`` hooks on the B·K rows, grad
  samples averaged over K, then the same clipping/noise/Adam. Also printed: its largest per-record gradient
  error against privbench's backend (opacus is wrong after a diffusers attention block; try --attention).

Timings are the median of interleaved repetitions; on CPU with one thread the clock is the process CPU time
(``--clock cpu``), which other jobs on a shared machine disturb much less than wall time. No assertions.

    OMP_NUM_THREADS=1 python benchmarks/dpsgd_step_cost.py [--preset tiny] [--batch 64] [--k 1 4] [--attention]
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
import warnings
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.core.config import build_config  # noqa: E402
from privbench.models.method import RunContext  # noqa: E402
from privbench.models.dp_sgd import DPPlan, dp_sgd_gradient, multi_draw_loss  # noqa: E402
from privbench.core.mechanisms import flat_norms, privatize  # noqa: E402
from privbench.models.grad_sample import BACKENDS, PerSampleGrads  # noqa: E402
from privbench.core.threads import configure_threads  # noqa: E402


def opacus_step_fn(ctx, state_dict, loss_fn, records, plan, g, dev):
    from opacus.grad_sample import GradSampleModule

    gsm = GradSampleModule(ctx.new_denoiser().to(dev), loss_reduction="sum")
    gsm._module.load_state_dict(state_dict)
    params = [p for p in gsm._module.parameters() if p.requires_grad]
    opt = torch.optim.Adam(params, lr=1e-4)
    n, k = records[2].shape

    def grads():
        for p in params:
            p.grad_sample = None
        losses = loss_fn_rows(gsm, loss_fn, records)  # (n·k,) row losses; mean over k = record loss
        (losses.sum() / k).backward()
        return [p.grad_sample.view(n, k, *p.shape).sum(1) for p in params]

    def step():
        gs = grads()
        out, _ = privatize(gs, plan.max_grad_norm, plan.noise_multiplier, plan.expected_batch, g)
        for p, o in zip(params, out):
            p.grad = o
        opt.step()
        opt.zero_grad(set_to_none=True)

    return step, grads


def loss_fn_rows(model, loss_fn, records):
    x0, y, t, noise = records
    n, k = t.shape
    # the same loss, one row per (record, draw), so that opacus' per-row grad samples can be averaged over k
    rows = (x0.repeat_interleave(k, 0), y.repeat_interleave(k), t.reshape(-1, 1), noise.reshape(n * k, 1, *noise.shape[2:]))
    return loss_fn(model, *rows)


def timed_ratios(steps: dict, reps: int, clock, sync) -> dict:
    """Median time of each step, interleaved repetitions (robust to slow drifts of machine load)."""
    times = {k_: [] for k_ in steps}
    for f in steps.values():
        f(), f()  # warm-up
    for _ in range(reps):
        for name, f in steps.items():
            sync()
            t0 = clock()
            f()
            sync()
            times[name].append(clock() - t0)
    return times


def report(label: str, times: dict) -> None:
    base = statistics.median(times["non-private"])
    print(f"{label}: non-private step {base * 1e3:.1f} ms")
    for name, ts in times.items():
        if name == "non-private":
            continue
        med = statistics.median(ts)
        print(f"  {name:28s} {med * 1e3:8.1f} ms  ratio x{med / base:.2f}  (best-of x{min(ts) / min(times['non-private']):.2f})")


def step_fns(make_model, loss_fn, records, plan, g, backends):
    model = make_model()
    opt = torch.optim.Adam(model.parameters(), lr=1e-4)

    def nonprivate():
        loss = loss_fn(model, *records).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    steps = {"non-private": nonprivate}
    for backend in backends:
        ps = PerSampleGrads(make_model(), backend)
        o = torch.optim.Adam(ps.params, lr=1e-4)

        def dp_step(ps=ps, o=o):
            grads, _ = dp_sgd_gradient(ps, loss_fn, records, plan, g)
            for p, gr in zip(ps.params, grads):
                p.grad = gr
            o.step()
            o.zero_grad(set_to_none=True)

        steps[f"dp-sgd {backend}"] = dp_step
    return steps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--batch", type=int, default=64)
    ap.add_argument("--k", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--reps", type=int, default=12)
    ap.add_argument("--attention", action="store_true", help="the variant with attention at level 1")
    ap.add_argument("--no-opacus", action="store_true")
    ap.add_argument("--backends", nargs="+", default=list(BACKENDS), choices=list(BACKENDS))
    ap.add_argument("--paper-batch", type=int, default=2, help="records per step of the paper-UNet figure (0 = skip)")
    ap.add_argument("--paper-k", type=int, nargs="+", default=[1, 4])
    ap.add_argument("--paper-reps", type=int, default=3)
    ap.add_argument("--paper-backends", nargs="+", default=["ghost", "hooks"], choices=list(BACKENDS))
    ap.add_argument("--clock", choices=["cpu", "wall"], default=None,
                    help="cpu: process CPU time (robust to other load on a shared machine; the default on CPU "
                         "with 1 thread); wall: elapsed time")
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    warnings.filterwarnings("ignore")
    threads = configure_threads(a.threads)
    sets = [("model.attention_levels", "[1]")] if a.attention else []
    cfg = build_config("dpdm", preset=a.preset, overrides=sets)
    dev = torch.device(a.device)
    sync = (lambda: torch.cuda.synchronize()) if dev.type == "cuda" else (lambda: None)
    clock_name = a.clock or ("cpu" if dev.type == "cpu" and threads == 1 else "wall")
    clock = time.process_time if clock_name == "cpu" else time.perf_counter
    print(f"preset={a.preset} attention={a.attention} batch={a.batch} device={dev} threads={threads} "
          f"clock={clock_name}")
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(cfg, Path(tmp), dev)
        ac = ctx.schedule.alphas_cumprod(dev)
        loss_fn = multi_draw_loss(ac)
        x, y = ctx.records(ctx.split.members)
        B = a.batch
        x, y = x[:B].to(dev), y[:B].to(dev)
        for K in a.k:
            g = torch.Generator(device=dev).manual_seed(0)
            t = torch.randint(0, ac.shape[0], (B, K), generator=g, device=dev)
            noise = torch.randn((B, K, *x.shape[1:]), generator=g, device=dev)
            records = (x, y, t, noise)
            plan = DPPlan(10 * B, 0.1, 1, 10.0, 1e-5, 1.0, False, "prv", 1.0, K)  # E[B] = B
            sd = {k_: v.clone() for k_, v in ctx.new_denoiser().state_dict().items()}
            steps = step_fns(lambda: ctx.new_denoiser().to(dev), loss_fn, records, plan, g, a.backends)
            opacus_err = None
            if not a.no_opacus:
                try:
                    step, og = opacus_step_fn(ctx, sd, loss_fn, records, plan, g, dev)
                    ref_ps = PerSampleGrads(ctx.new_denoiser().to(dev), "hooks")
                    ref_ps.model.load_state_dict(sd)
                    ref, _ = ref_ps.grads(loss_fn, *records)
                    got = og()
                    rel = (flat_norms([a_ - b_ for a_, b_ in zip(got, ref)]) / flat_norms(ref)).max().item()
                    opacus_err = rel
                    steps["dp-sgd opacus (reference)"] = step
                except Exception as e:  # noqa: BLE001 - reference only
                    print(f"  opacus reference unavailable: {type(e).__name__}: {e}")
            report(f"K={K} (model batch {B * K})", timed_ratios(steps, a.reps, clock, sync))
            if opacus_err is not None:
                print(f"  opacus per-record gradient error vs privbench: max relative {opacus_err:.2e}")
    if a.paper_batch > 0:
        paper_figure(a, dev, clock, sync)


def paper_figure(a, dev, clock, sync) -> None:
    """The same ratios on the paper preset's 35.7M-parameter UNet (32×32×3, 10 classes) on random records:
    timing needs the architecture, not CIFAR-10."""
    from privbench.models.unet import build_denoiser

    cfg = build_config("dpdm", preset="paper", overrides=[("model.dropout", 0.0)])  # dropout: no effect on cost
    ac = cfg_schedule(cfg).alphas_cumprod(dev)
    loss_fn = multi_draw_loss(ac)
    B = a.paper_batch

    def make_model():
        torch.manual_seed(0)
        return build_denoiser(cfg.model, 3, 32, 10).to(dev)

    n_params = sum(p.numel() for p in make_model().parameters())
    print(f"paper UNet ({n_params / 1e6:.1f}M parameters, 32x32x3), batch={B}, device={dev}")
    g = torch.Generator(device=dev).manual_seed(0)
    x = torch.rand((B, 3, 32, 32), generator=g, device=dev) * 2 - 1
    y = torch.randint(0, 10, (B,), generator=g, device=dev)
    for K in a.paper_k:
        t = torch.randint(0, ac.shape[0], (B, K), generator=g, device=dev)
        noise = torch.randn((B, K, 3, 32, 32), generator=g, device=dev)
        plan = DPPlan(10 * B, 0.1, 1, 10.0, 1e-5, 1.0, False, "prv", 1.0, K)
        steps = step_fns(make_model, loss_fn, (x, y, t, noise), plan, g, a.paper_backends)
        report(f"paper K={K} (model batch {B * K})", timed_ratios(steps, a.paper_reps, clock, sync))


def cfg_schedule(cfg):
    from privbench.core.schedule import Schedule

    return Schedule.from_config(cfg.diffusion)


if __name__ == "__main__":
    main()
