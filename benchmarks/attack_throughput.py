"""Attack throughput as a fraction of the bound set by the model itself.

The bound of an attack that makes q network evaluations per record is (raw forward throughput) ÷ q, the raw
forward throughput being records/s of the bare denoiser forward (no grad) at the attack's batch size on the same
device. PIA makes q = 2 (ε₀ at t = 0, then ε at t), SecMI_stat q = t_sec/k + 2 = 12 (paper offset) or 11
(official), the loss attack q = n_draws = 1. Ratio = attack records/s ÷ bound; goal ≥ 0.9. No assertions.

The hardware bound: the FLOPs of one record's forward are counted (``torch.utils.flop_counter``, at the
attack's batch size and precision) and the device's matmul rate in the same dtype is measured in this run
(``privbench.models.flops``); an attack's hardware bound is rate ÷ (q × FLOPs per forward), and its
``hw ratio`` = records/s ÷ that bound. Elementwise work (GroupNorm, SiLU, the schedule arithmetic) is not
counted, so small models sit far below 1 on every device.

    python benchmarks/attack_throughput.py [--preset tiny] [--n 2048] [--device cpu] [--repeats 3] [--precision bf16]
    python benchmarks/attack_throughput.py --model DIR [--arch pytorch-ddpm] ...   # an external model

With ``--model`` the target is ``privbench.models.external.load_external(DIR)`` (random records of its shape) and
the bound is the bare network's forward (diffusers ``UNet2DModel`` / pytorch-ddpm UNet) at the same batch size.
"""
from __future__ import annotations

import argparse
import os
import statistics
import sys
import tempfile
import time
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.attacks.pia import PIA  # noqa: E402
from privbench.attacks.loss import LossAttack  # noqa: E402
from privbench.attacks.base import Records  # noqa: E402
from privbench.attacks.secmi import SecMI  # noqa: E402
from privbench.attacks.secmi import secmi_nfe  # noqa: E402
from privbench.core.config import build_config  # noqa: E402
from privbench.core.threads import configure_threads  # noqa: E402
from privbench.models.flops import forward_flops, matmul_rate  # noqa: E402
from privbench.models.method import RunContext  # noqa: E402


def _sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--preset", default="tiny")
    ap.add_argument("--n", type=int, default=2048, help="records attacked per timing")
    ap.add_argument("--batch", type=int, default=0, help="attack batch size (0 = the preset's attack.batch_size)")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--repeats", type=int, default=7)
    ap.add_argument("--model", default=None, help="an external model (diffusers folder or pytorch-ddpm ckpt.pt)")
    ap.add_argument("--arch", default=None, choices=["pytorch-ddpm"])
    ap.add_argument("--threads", type=int, default=None, help="CPU threads (default: privbench's policy)")
    ap.add_argument("--precision", default="fp32", choices=["fp32", "bf16"], help="attack.precision")
    a = ap.parse_args()
    configure_threads(a.threads)
    overrides = [("attack.batch_size", a.batch)] if a.batch else []
    overrides.append(("attack.precision", a.precision))
    cfg = build_config("centralized", preset=a.preset, overrides=overrides)
    dev = torch.device(a.device)
    B = cfg.attack.batch_size
    with tempfile.TemporaryDirectory() as tmp:
        ctx = RunContext(cfg, Path(tmp), dev)
        x_all, y_all = ctx.dataset
        idx = torch.arange(a.n) % len(y_all)
        rec = Records(x_all[idx], y_all[idx].long(), (torch.arange(a.n) % 2).long(), idx)
        if a.model:
            tgt, rec, model = _external(a, dev, cfg)
        else:
            model = ctx.new_denoiser().to(dev).eval()  # weights do not change throughput
            from privbench.models.target import Target

            tgt = Target("bench", "centralized", model, ctx.schedule, dev, ctx.num_classes,
                         meta={"shape": ctx.image_shape})

        xs = rec.x.to(dev)
        ys = rec.y.to(dev)
        ts = torch.full((a.n,), 200, dtype=torch.long, device=dev)

        cast = torch.bfloat16 if a.precision == "bf16" else None

        @torch.no_grad()
        def raw():
            with torch.autocast(dev.type, dtype=cast or torch.bfloat16, enabled=cast is not None):
                for lo in range(0, a.n, B):
                    model(xs[lo:lo + B], ts[lo:lo + B], ys[lo:lo + B] if tgt.num_classes else None)

        def once(fn):
            _sync(dev)
            t0 = time.perf_counter()
            fn()
            _sync(dev)
            return time.perf_counter() - t0

        raw()  # warm-up
        fwd = a.n / statistics.median(once(raw) for _ in range(a.repeats))
        print(f"preset={a.preset} records={a.n} batch={B} device={dev} threads={torch.get_num_threads()} "
              f"image={tuple(tgt.meta['shape'])} params={sum(p.numel() for p in model.parameters())}"
              + (f" model={a.model}" if a.model else ""))
        print(f"raw forward: {fwd:10.1f} records/s")
        nb = min(B, a.n)
        flops = forward_flops(model, xs[:nb], ts[:nb], ys[:nb] if tgt.num_classes else None, autocast=cast) / nb
        dtype = cast or torch.float32
        peak = matmul_rate(dev, dtype)
        hw = peak / flops
        print(f"FLOPs: {flops / 1e6:.3f} MFLOP per record forward (torch.utils.flop_counter); matmul rate "
              f"{str(dtype).split('.')[-1]} {peak / 1e9:.2f} GFLOP/s (measured now) -> hardware bound of the forward "
              f"{hw:.1f} records/s; raw forward / hardware bound = {fwd / hw:.3f}")
        print("(each ratio is the median over repeats of attack time vs. raw-forward time measured back to back, "
              "so that machine load cancels)")
        for name, attack, q in [
            ("PIA", PIA.from_config(cfg.attack), 2),
            ("SecMI (paper offset)", SecMI.from_config(cfg.attack, secmi_offset="paper"),
             secmi_nfe(cfg.attack.secmi_t, cfg.attack.secmi_k, "paper")),
            ("SecMI (official offset)", SecMI.from_config(cfg.attack, secmi_offset="official"),
             secmi_nfe(cfg.attack.secmi_t, cfg.attack.secmi_k, "official")),
            ("loss", LossAttack.from_config(cfg.attack), cfg.attack.n_draws),
        ]:
            run = (lambda attack=attack: attack.run(tgt, rec))
            run()  # warm-up
            ratios, rates = [], []
            for _ in range(a.repeats):
                t_raw = once(raw)
                t_att = once(run)
                ratios.append((a.n / t_att) / ((a.n / t_raw) / q))
                rates.append(a.n / t_att)
            rps = statistics.median(rates)
            print(f"{name:24s} {rps:10.1f} records/s ({q} queries/record); bound = forward/{q} = {fwd / q:10.1f}; "
                  f"ratio = {statistics.median(ratios):.3f} (goal >= 0.9); hardware bound {hw / q:.1f}, "
                  f"hw ratio = {rps / (hw / q):.3f}")

def _external(a, dev, cfg):
    """(target, random records of its shape, the bare network as ``f(x, t, y)``) of ``--model``."""
    from privbench.models.external import load_external

    tgt, prov = load_external(a.model, arch=a.arch, device=dev)
    g = torch.Generator().manual_seed(0)
    x = torch.rand((a.n, *tgt.meta["shape"]), generator=g) * 2 - 1
    y = torch.randint(0, tgt.num_classes or 1, (a.n,), generator=g)
    rec = Records(x, y, (torch.arange(a.n) % 2).long(), torch.arange(a.n))
    net = tgt.model

    if prov["format"] == "pytorch-ddpm":
        def bare(xb, tb, yb):
            return net(xb, tb)
    else:
        def bare(xb, tb, yb):
            return net(xb, tb, class_labels=yb, return_dict=False)[0]
    bare.parameters = net.parameters
    return tgt, rec, bare


if __name__ == "__main__":
    main()
