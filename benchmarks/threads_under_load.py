"""Training speed on an idle and on a loaded machine: the old thread default vs privbench's (docs/scaling.md §1).

For the test, tiny and paper presets' UNets, one training step (forward, loss, backward, AdamW) is timed in a fresh
process per configuration (the OpenMP wait policy is read once, when torch loads):

- ``old``: torch's default pool, one thread per core, OpenMP's default (spinning) wait;
- ``new``: privbench's default — ``OMP_WAIT_POLICY=PASSIVE`` set by ``import privbench``, the count from
  ``configure_threads()`` and one thread below ``SMALL_MODEL_PARAMS`` (``fit_threads_to_model``);
- ``active-1`` / ``passive-N``: the two rules one at a time.

Each is timed idle and under a fixed background load: ``--load K`` busy-loop processes (default: one per core)
that this script starts and stops itself; each also ends itself after ``--load-limit`` seconds, so a killed run
leaves nothing spinning. Prints steps/s and the ratios: loaded ÷ idle per configuration, and new ÷ old idle (the
goal: ≥ 0.95) and loaded. The machine is never quiet where this was run: read ratios within one run.

    python benchmarks/threads_under_load.py [--models test,tiny,paper] [--seconds 4] [--load 2]
"""
from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
#: preset → training batch of the timed step (the paper UNet gets a CPU-sized one)
MODELS = {"test": 16, "tiny": 64, "paper": 2}
CONFIGS = ("old", "new", "active-1", "passive-N")


def _worker(model: str, config: str, seconds: float) -> dict:
    """Runs in a child process: time training steps of ``model`` under ``config``; returns steps/s."""
    if config in ("old", "active-1"):
        import torch  # before privbench: OpenMP loads with the environment as the parent gave it (no policy)
    sys.path.insert(0, str(ROOT))
    from privbench.core.config import build_config
    from privbench.core.threads import available_cores, configure_threads
    from privbench.data.base import dataset_info
    from privbench.models.unet import build_denoiser

    import torch

    cores = available_cores()
    configure_threads({"old": cores, "new": None, "active-1": 1, "passive-N": cores}[config])
    cfg = build_config("centralized", preset=model)
    info = dataset_info(cfg.dataset)
    torch.manual_seed(0)
    net = build_denoiser(cfg.model, info.channels, cfg.data.resolution or info.size, info.num_classes)
    B = MODELS[model]
    size = cfg.data.resolution or info.size
    x = torch.randn(B, info.channels, size, size)
    t = torch.randint(0, 1000, (B,))
    y = torch.randint(0, info.num_classes, (B,))
    opt = torch.optim.AdamW(net.parameters(), lr=1e-4)

    def step():
        loss = ((net(x, t, y) - x) ** 2).mean()
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()

    step()
    step()  # warm-up: allocator, oneDNN primitives
    n, t0 = 0, time.perf_counter()
    while time.perf_counter() - t0 < seconds or n < 2:
        step()
        n += 1
    el = time.perf_counter() - t0
    return {"steps_per_s": n / el, "threads": torch.get_num_threads(),
            "wait_policy": os.environ.get("OMP_WAIT_POLICY", "default"),
            "params": sum(p.numel() for p in net.parameters())}


def _measure(model: str, config: str, seconds: float, timeout: float) -> dict | None:
    env = {k: v for k, v in os.environ.items() if k not in ("OMP_WAIT_POLICY", "GOMP_SPINCOUNT", "OMP_NUM_THREADS",
                                                            "MKL_NUM_THREADS", "PRIVBENCH_WORKERS")}
    if config == "passive-N":
        env["OMP_WAIT_POLICY"] = "PASSIVE"
    env["PRIVBENCH_PROGRESS"] = "0"
    cmd = [sys.executable, __file__, "--worker", model, config, str(seconds)]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, env=env, timeout=timeout)
    except subprocess.TimeoutExpired:
        return None
    if r.returncode != 0:
        print(r.stderr[-1500:], file=sys.stderr)
        return None
    return json.loads(r.stdout.strip().splitlines()[-1])


def _start_load(k: int, limit: float) -> list[subprocess.Popen]:
    """``k`` busy-loop processes, each ending itself after ``limit`` seconds."""
    spin = f"import time\nend = time.monotonic() + {limit}\nwhile time.monotonic() < end:\n    pass\n"
    return [subprocess.Popen([sys.executable, "-c", spin]) for _ in range(k)]


def _stop_load(procs: list[subprocess.Popen]) -> None:
    for p in procs:
        p.terminate()
    for p in procs:
        try:
            p.wait(timeout=10)
        except subprocess.TimeoutExpired:
            p.kill()
            p.wait()


def _row(model: str, res: dict) -> None:
    def r(a, b):
        return f"{a / b:.2f}" if a and b else "-"

    for config in CONFIGS:
        i, lo = res.get((config, "idle")), res.get((config, "loaded"))
        if i is None:
            continue
        print(f"  {config:10s} threads={i['threads']} wait={i['wait_policy']:8s} idle {i['steps_per_s']:8.2f} "
              f"steps/s  loaded {lo['steps_per_s'] if lo else float('nan'):8.2f} steps/s  loaded/idle ratio = "
              f"{r(lo and lo['steps_per_s'], i['steps_per_s'])}")
    o, n = res.get(("old", "idle")), res.get(("new", "idle"))
    ol, nl = res.get(("old", "loaded")), res.get(("new", "loaded"))
    if o and n:
        print(f"  {model}: new/old idle ratio = {r(n['steps_per_s'], o['steps_per_s'])} (goal >= 0.95); "
              f"new/old loaded ratio = {r(nl and nl['steps_per_s'], ol and ol['steps_per_s'])}")


def main() -> int:
    if len(sys.argv) == 5 and sys.argv[1] == "--worker":
        print(json.dumps(_worker(sys.argv[2], sys.argv[3], float(sys.argv[4]))))
        return 0
    ap = argparse.ArgumentParser()
    ap.add_argument("--models", default="test,tiny,paper")
    ap.add_argument("--preset", default=None, help="(run_all.py passes it; ignored: --models chooses)")
    ap.add_argument("--seconds", type=float, default=4.0, help="timed seconds per configuration")
    ap.add_argument("--load", type=int, default=None, help="busy-loop processes (default: one per core)")
    ap.add_argument("--load-limit", type=float, default=900.0, help="each busy loop ends itself after this")
    ap.add_argument("--configs", default=",".join(CONFIGS))
    a = ap.parse_args()
    models = [m for m in a.models.split(",") if m]
    configs = [c for c in a.configs.split(",") if c]
    unknown = [m for m in models if m not in MODELS] + [c for c in configs if c not in CONFIGS]
    if unknown:
        ap.error(f"unknown: {', '.join(unknown)}")
    cores = len(os.sched_getaffinity(0)) if hasattr(os, "sched_getaffinity") else os.cpu_count() or 1
    k = a.load or cores
    load1 = os.getloadavg()[0] if hasattr(os, "getloadavg") else float("nan")
    print(f"threads_under_load: cores={cores} background load={k} busy loops; load average before: {load1:.2f}")
    timeout = 300 + 20 * a.seconds  # torch import included: minutes on a saturated machine
    for model in models:
        res: dict = {}
        for config in configs:  # idle and loaded back to back: the machine's other load changes slowly
            res[(config, "idle")] = _measure(model, config, a.seconds, timeout)
            procs = _start_load(k, min(a.load_limit, timeout + 10))
            try:
                time.sleep(0.5)
                res[(config, "loaded")] = _measure(model, config, a.seconds, timeout)
            finally:
                _stop_load(procs)
        params = next((v["params"] for v in res.values() if v), 0)
        print(f"[{model}] UNet {params:,} parameters, batch {MODELS[model]}")
        _row(model, res)
    return 0


if __name__ == "__main__":
    sys.exit(main())
