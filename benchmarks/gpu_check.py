"""The GPU check behind benchmarks/gpu_check.sh: the paper path's throughput on one device, in one run.

No dataset is read or downloaded: the records are a seeded random tensor dataset of the preset's image shape
(CIFAR-10's 3×32×32 for ``paper``) — throughput does not depend on the pixels. Sections, each printed as soon
as it is measured:

1. **rates**: the device's achieved fp32 and bf16 FLOP/s on a large square matmul and a 3×3 convolution (NCHW
   and NHWC), measured here (privbench.models.flops.hardware_rates); a precision's bound is the best of its rates;
2. **training**, ``--steps`` steps of privbench's loop (``train_denoiser``: per-step RNG, batch gather, AdamW,
   grad clip, EMA) with the preset's UNet and batch, in fp32 and in bf16 autocast (+ channels_last on CUDA):
   step time, images/s, peak device memory, the loop ÷ raw ratio (raw = forward + backward + AdamW on a fixed
   batch, the same precision), and the achieved model FLOP rate ÷ the bound of its precision — the ratio
   benchmarks/train_throughput.py prints on CPU — and as a fraction of the bf16 matmul rate (FLOPs of one
   training step's forward and backward counted by torch.utils.flop_counter: flops.train_step_flops);
3. **DP-SGD** (``--dp-batch`` records, K = dp.noise_multiplicity, physical batches of dp.physical_batch, the
   default per-sample backend): one private step's time ÷ the non-private step on the same records;
4. **attacks**: PIA and SecMI on ``--records`` records at ``--attack-batch`` records per query batch:
   records/s, the ratio to the bound set by the bare forward (forward records/s ÷ queries per record), peak
   memory; then PIA at ``attack.precision=bf16``, batch 256, against the hardware bound (the bf16 matmul rate
   of step 1 ÷ the FLOPs of its two forwards per record; goal on a GPU: ≥ 0.5).

    bash benchmarks/gpu_check.sh                                  # paper preset, cuda
    bash benchmarks/gpu_check.sh --preset test --device cpu       # the dry run (seconds)
"""
from __future__ import annotations

import argparse
import os
import resource
import statistics
import sys
import tempfile
import time
from dataclasses import replace
from pathlib import Path

import torch

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
os.environ.setdefault("PRIVBENCH_PROGRESS", "0")

from privbench.core.config import build_config  # noqa: E402
from privbench.core.schedule import Schedule  # noqa: E402
from privbench.models.flops import bound_rate, hardware_rates, train_step_flops  # noqa: E402
from privbench.models.training import TrainData, diffusion_loss, train_denoiser  # noqa: E402
from privbench.models.unet import build_denoiser  # noqa: E402
from privbench.core.threads import configure_threads  # noqa: E402

SHAPES = {"paper": (3, 32, 32), "small": (3, 8, 8)}  # everything else: the embedded 8×8 digits


def say(msg: str = "") -> None:
    print(msg, flush=True)


def flops_str(x: float) -> str:
    return f"{x / 1e12:.2f} TFLOP/s" if x >= 1e11 else f"{x / 1e9:.2f} GFLOP/s"


def sync(dev):
    if dev.type == "cuda":
        torch.cuda.synchronize(dev)


def reset_peak(dev):
    if dev.type == "cuda":
        torch.cuda.reset_peak_memory_stats(dev)


def peak(dev) -> str:
    if dev.type == "cuda":
        return f"{torch.cuda.max_memory_allocated(dev) / 2 ** 30:.2f} GiB (device, this section)"
    return f"{resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2 ** 20:.2f} GiB (process max RSS)"


def timed(fn, dev, reps: int) -> float:
    """Median seconds of ``fn`` over ``reps`` runs after one warm-up."""
    fn()
    ts = []
    for _ in range(reps):
        sync(dev)
        t0 = time.perf_counter()
        fn()
        sync(dev)
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def main():
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--preset", default="paper")
    ap.add_argument("--device", default="cuda" if torch.cuda.is_available() else "cpu")
    ap.add_argument("--steps", type=int, default=0, help="timed training steps per precision (0: 300 on cuda, 20 on cpu)")
    ap.add_argument("--records", type=int, default=0, help="records attacked (0: 4096 on cuda, 128 on cpu)")
    ap.add_argument("--attack-batch", type=int, default=0, help="records per attack query batch (0: 1024 on cuda, "
                                                                "the preset's attack.batch_size on cpu)")
    ap.add_argument("--dp-batch", type=int, default=0, help="records of the DP-SGD step (0: 64 on cuda, 8 on cpu; "
                                                            "-1 skips it)")
    ap.add_argument("--precisions", nargs="+", default=["fp32", "bf16"], choices=["fp32", "bf16"])
    ap.add_argument("--compile", action="store_true", help="also train with train.compile=true (bf16)")
    ap.add_argument("--threads", type=int, default=None)
    a = ap.parse_args()
    dev = torch.device(a.device)
    if dev.type == "cuda" and not torch.cuda.is_available():
        sys.exit("gpu_check: no CUDA device here; dry-run with --preset test --device cpu")
    threads = configure_threads(a.threads)
    gpu = dev.type == "cuda"
    steps = a.steps or (300 if gpu else 20)
    n_rec = a.records or (4096 if gpu else 128)
    cfg = build_config("dpdm", preset=a.preset)
    attack_batch = a.attack_batch or (1024 if gpu else cfg.attack.batch_size)
    dp_batch = a.dp_batch or (64 if gpu else 8)
    shape = SHAPES.get(a.preset, (1, 8, 8))
    t_start = time.perf_counter()
    name = torch.cuda.get_device_name(dev) if gpu else "cpu"
    say(f"gpu_check: preset={a.preset} device={dev} ({name}) torch={torch.__version__} threads={threads} "
        f"image={shape} batch={cfg.train.batch_size}")
    if gpu:
        torch.backends.cudnn.benchmark = True

    # 1. rates -------------------------------------------------------------------------------------------------
    n_mm, conv = (8192, (256, 32, 128)) if gpu else (256, (64, 16, 64))
    rates = {p: hardware_rates(dev, dt, n=n_mm, conv=conv) for p, dt in (("fp32", torch.float32),
                                                                        ("bf16", torch.bfloat16))}
    bounds = {p: bound_rate(r) for p, r in rates.items()}
    rate_bf16 = rates["bf16"]["matmul"]
    for p, r in rates.items():
        say(f"[rates {p}] matmul {n_mm}x{n_mm} {flops_str(r['matmul'])}, conv3x3 {conv[0]}ch {conv[1]}px "
            f"batch {conv[2]} {flops_str(r['conv'])} (NHWC {flops_str(r['conv_nhwc'])}); bound = {bounds[p][0]}")
    if gpu:
        say(f"[rates] torch.backends.cuda.matmul.allow_tf32={torch.backends.cuda.matmul.allow_tf32}, "
            f"torch.backends.cudnn.allow_tf32={torch.backends.cudnn.allow_tf32}")

    # 2. training ----------------------------------------------------------------------------------------------
    g = torch.Generator().manual_seed(0)
    n_data = max(cfg.train.batch_size * 4, 1024)
    x = (torch.rand((n_data, *shape), generator=g) * 2 - 1).to(dev)
    y = torch.randint(0, 10, (n_data,), generator=g).to(dev)
    data = TrainData(x, y)
    ac = Schedule.from_config(cfg.diffusion).alphas_cumprod(dev)
    B = cfg.train.batch_size

    def new_model():
        torch.manual_seed(0)
        return build_denoiser(cfg.model, shape[0], shape[1], 10).to(dev)

    n_params = sum(p.numel() for p in new_model().parameters())
    say(f"[model] UNet {list(cfg.model.block_out_channels)}, {n_params:,} parameters")
    runs = [(p, p == "bf16" and gpu, False) for p in a.precisions]
    if a.compile:
        runs.append(("bf16", gpu, True))
    trained = None
    with tempfile.TemporaryDirectory() as tmp:
        for precision, channels_last, compiled in runs:
            tcfg = replace(cfg.train, steps=steps, precision=precision, channels_last=channels_last, compile=compiled,
                           checkpoint_every=10 ** 9, log_every=steps)
            bf16 = precision == "bf16"
            label = precision + (" channels_last" if channels_last else "") + (" compiled" if compiled else "")
            # raw: forward + backward + AdamW on one fixed batch, the same precision and memory format
            model = new_model()
            if channels_last:
                model = model.to(memory_format=torch.channels_last)
            opt = torch.optim.AdamW(model.parameters(), lr=tcfg.lr)
            xb, yb = x[:B], y[:B]
            t = torch.randint(0, ac.shape[0], (B,), device=dev)
            noise = torch.randn_like(xb)
            if channels_last:
                xb, noise = xb.contiguous(memory_format=torch.channels_last), noise.contiguous(memory_format=torch.channels_last)
            batch = (xb, yb, None, t, noise, ac)
            flops = train_step_flops(model, diffusion_loss, *batch, autocast=torch.bfloat16 if bf16 else None)
            net = torch.compile(model) if compiled else model

            def raw_steps(k=20):
                for _ in range(k):
                    with torch.autocast(dev.type, dtype=torch.bfloat16, enabled=bf16):
                        loss = diffusion_loss(net, *batch).mean()
                    opt.zero_grad(set_to_none=True)
                    loss.backward()
                    opt.step()

            k_raw = min(20, steps)
            raw = k_raw / timed(lambda: raw_steps(k_raw), dev, 2)
            model = opt = net = None  # free the raw run before the loop run
            reset_peak(dev)
            sync(dev)
            t0 = time.perf_counter()
            ema = train_denoiser(new_model(), data, ac, tcfg, Path(tmp) / f"ckpt-{label.replace(' ', '-')}",
                                 name="m", seed=0, device=dev)
            sync(dev)
            wall = time.perf_counter() - t0
            sps = steps / wall
            say(f"[train {label}] {steps} steps: {wall / steps * 1e3:.1f} ms/step, {sps * B:.0f} images/s, "
                f"loop/raw = {sps / raw:.3f} (raw {raw:.2f} steps/s), peak {peak(dev)}, "
                f"{flops / 1e9:.2f} GFLOP/step -> {flops_str(flops * sps)}; achieved / bound ratio = "
                f"{flops * sps / bounds[precision][1]:.3f} (bound: {precision} {bounds[precision][0]}), "
                f"{flops * sps / rate_bf16:.1%} of the bf16 matmul rate")
            trained = ema

        # 3. DP-SGD ----------------------------------------------------------------------------------------------
        if dp_batch > 0:
            from privbench.models.dp_sgd import DPPlan, dp_sgd_gradient, multi_draw_loss
            from privbench.models.grad_sample import PerSampleGrads

            K, pb = cfg.dp.noise_multiplicity, cfg.dp.physical_batch
            loss_fn = multi_draw_loss(ac)
            gd = torch.Generator(device=dev).manual_seed(1)
            td = torch.randint(0, ac.shape[0], (dp_batch, K), generator=gd, device=dev)
            nd = torch.randn((dp_batch, K, *shape), generator=gd, device=dev)
            recs = (x[:dp_batch], y[:dp_batch], td, nd)
            plan = DPPlan(10 * dp_batch, 0.1, 1, 10.0, 1e-5, 1.0, False, "prv", 1.0, K)
            model = new_model()
            opt = torch.optim.Adam(model.parameters(), lr=1e-4)

            def nonprivate():
                loss = loss_fn(model, *recs).mean()
                opt.zero_grad(set_to_none=True)
                loss.backward()
                opt.step()

            t_np = timed(nonprivate, dev, 3)
            ps = PerSampleGrads(new_model(), cfg.dp.grad_sample)
            opt2 = torch.optim.Adam(ps.params, lr=1e-4)

            def private():
                grads, _ = dp_sgd_gradient(ps, loss_fn, recs, plan, gd, pb)
                for p_, gr in zip(ps.params, grads):
                    p_.grad = gr
                opt2.step()
                opt2.zero_grad(set_to_none=True)

            reset_peak(dev)
            t_dp = timed(private, dev, 3)
            say(f"[dp-sgd {cfg.dp.grad_sample}] {dp_batch} records x K={K} (physical batch {pb or dp_batch}): "
                f"{t_dp * 1e3:.0f} ms/step vs non-private {t_np * 1e3:.0f} ms -> ratio x{t_dp / t_np:.2f}, "
                f"peak {peak(dev)}")
            del model, ps, opt, opt2

    # 4. attacks -----------------------------------------------------------------------------------------------
    from privbench.attacks.base import Records
    from privbench.attacks.pia import PIA
    from privbench.attacks.secmi import SecMI
    from privbench.attacks.secmi import secmi_nfe
    from privbench.models.target import Target

    acfg = replace(cfg.attack, batch_size=attack_batch)
    tgt = Target("gpu-check", "centralized", trained, Schedule.from_config(cfg.diffusion), dev, 10,
                 meta={"shape": shape})
    gr = torch.Generator().manual_seed(2)
    xr = torch.rand((n_rec, *shape), generator=gr) * 2 - 1
    rec = Records(xr, torch.randint(0, 10, (n_rec,), generator=gr), (torch.arange(n_rec) % 2).long(),
                  torch.arange(n_rec))
    xs, ys = xr.to(dev), rec.y.to(dev)
    ts = torch.full((n_rec,), acfg.t, dtype=torch.long, device=dev)

    @torch.no_grad()
    def forward_all():
        for lo in range(0, n_rec, attack_batch):
            trained(xs[lo:lo + attack_batch], ts[lo:lo + attack_batch], ys[lo:lo + attack_batch])

    fwd = n_rec / timed(forward_all, dev, 3)
    say(f"[attack] {n_rec} records, batch {attack_batch}: bare forward {fwd:.0f} records/s")
    for label, attack, q in [("PIA", PIA.from_config(acfg), 2),
                             ("SecMI", SecMI.from_config(acfg), secmi_nfe(acfg.secmi_t, acfg.secmi_k, acfg.secmi_offset))]:
        reset_peak(dev)
        rps = n_rec / timed(lambda: attack.run(tgt, rec), dev, 2)
        say(f"[attack {label}] {rps:.0f} records/s ({q} queries/record); bound forward/{q} = {fwd / q:.0f}; "
            f"ratio = {rps / (fwd / q):.3f}; peak {peak(dev)}")
    pia_bf16_vs_matmul(trained, tgt, rec, acfg, rate_bf16, dev)
    say(f"gpu_check: done in {time.perf_counter() - t_start:.0f} s")


def pia_bf16_vs_matmul(net, tgt, rec, acfg, rate_bf16: float, dev) -> None:
    """PIA at attack.precision=bf16, batch 256, against the hardware bound: the bf16 matmul rate measured in this
    run ÷ the FLOPs of PIA's two forwards per record (the GPU goal: ratio ≥ 0.5 on the paper victim)."""
    from privbench.attacks.pia import PIA
    from privbench.models.flops import forward_flops

    nb = min(256, len(rec))
    xs, ys = rec.x[:nb].to(dev), rec.y[:nb].to(dev)
    ts = torch.full((nb,), acfg.t, dtype=torch.long, device=dev)
    per_record = 2 * forward_flops(net, xs, ts, ys, autocast=torch.bfloat16) / nb
    bound = rate_bf16 / per_record
    attack = PIA.from_config(acfg, batch_size=256, precision="bf16")
    attack.run(tgt, rec)  # warm-up (autocast kernels)
    rps = len(rec) / timed(lambda: attack.run(tgt, rec), dev, 2)
    say(f"[attack PIA bf16 batch 256] {rps:.0f} records/s; {per_record / 1e9:.3f} GFLOP/record (2 forwards); "
        f"bf16 matmul bound {bound:.0f} records/s; ratio = {rps / bound:.3f} (goal >= 0.5 on a GPU)")


if __name__ == "__main__":
    main()
