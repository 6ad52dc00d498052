"""Test helpers importable from any test module (tests/ is on pythonpath)."""
from __future__ import annotations

import os


def train_cfg(method="centralized", preset="test", seed=0, dataset="digits", **sets):
    """build_config with ``section__key=value`` keyword overrides."""
    from privbench.core.config import build_config

    return build_config(method, dataset, preset, seed, [(k.replace("__", "."), v) for k, v in sets.items()])


def shared_tmp(tmp_path_factory, name: str):
    """A folder shared by the xdist workers of this session (the run store locks and caches across processes, so
    a target one worker trained is a cache hit for the other); a fresh temp folder without xdist."""
    if not os.environ.get("PYTEST_XDIST_WORKER"):
        return tmp_path_factory.mktemp(name)
    from filelock import FileLock

    root = tmp_path_factory.getbasetemp().parent
    path = root / f"shared-{name}"
    with FileLock(str(root / f"shared-{name}.lock")):
        path.mkdir(exist_ok=True)
    return path


def per_example_grads(model, loss_fn, records):
    """The reference per-record gradients: one backward pass per record (a parameter without a gradient: zeros);
    one stacked tensor per trainable parameter."""
    import torch

    out = []
    params = [p for p in model.parameters() if p.requires_grad]
    for i in range(records[0].shape[0]):
        model.zero_grad(set_to_none=True)
        loss_fn(model, *[r[i:i + 1] for r in records]).sum().backward()
        out.append([p.grad.detach().clone() if p.grad is not None else torch.zeros_like(p) for p in params])
    model.zero_grad(set_to_none=True)
    return [torch.stack([o[j] for o in out]) for j in range(len(params))]


def assert_clipped_sum_matches(ps, loss_fn, records, ref, names, rel: float, rel_b: float) -> None:
    """``ps.clipped_sum`` at C = the median per-record norm equals the clipped sum of the reference gradients
    ``ref`` (per_example_grads): the norms to ``rel``, each parameter's sum to ``rel``·C + ``rel_b``·|sum|."""
    import torch

    from privbench.core.mechanisms import clip_factors, flat_norms

    ref_norms = flat_norms(ref)
    assert ps.names == names
    C = float(ref_norms.median())
    summed, norms, _ = ps.clipped_sum(loss_fn, *records, max_norm=C)
    assert torch.allclose(norms, ref_norms, rtol=rel)
    f = clip_factors(ref_norms, C)
    for name, a, r in zip(names, summed, ref):
        b = torch.tensordot(f, r, dims=([0], [0]))
        assert torch.linalg.vector_norm(a - b) <= rel * C + rel_b * torch.linalg.vector_norm(b), name


def interrupt_at_call(monkeypatch, module, name: str, n: int = 15):
    """``module.name`` raises KeyboardInterrupt on its ``n``-th call (a training killed mid-run); returns the real
    function, to put back with ``monkeypatch.setattr(module, name, real)``."""
    real = getattr(module, name)
    calls = {"n": 0}

    def flaky(*args, **kw):
        calls["n"] += 1
        if calls["n"] == n:
            raise KeyboardInterrupt
        return real(*args, **kw)

    monkeypatch.setattr(module, name, flaky)
    return real
