"""One model trained by several processes: torch.distributed set up from torchrun's environment (docs/scaling.md
§2). Without torchrun (``WORLD_SIZE`` unset or 1) everything here is a no-op: rank 0 of a world of 1.
"""
from __future__ import annotations

import os
import secrets
from collections.abc import Sequence

import torch
import torch.distributed as dist

from .errors import BadInput
from .mechanisms import SECURE, poisson_sample
from .threads import env_world_size


def init_from_env(device="auto") -> bool:
    """Join the process group torchrun describes (NCCL on CUDA, each process on GPU ``LOCAL_RANK``; gloo on CPU);
    True when running distributed. ``device``: the training device asked for (auto/cpu/cuda)."""
    if env_world_size() <= 1:
        return False
    if dist.is_initialized():
        return True
    if not dist.is_available():
        raise BadInput("torchrun with WORLD_SIZE > 1: this torch build has no torch.distributed")
    use_cuda = (device in ("auto", None) and torch.cuda.is_available()) or str(device).startswith("cuda")
    if use_cuda:
        if not torch.cuda.is_available():
            raise BadInput("--device cuda under torchrun: no CUDA device is available here; use --device cpu")
        local = local_rank()
        if local >= torch.cuda.device_count():
            raise BadInput(f"torchrun: LOCAL_RANK {local} but only {torch.cuda.device_count()} CUDA device(s); "
                           f"lower --nproc-per-node")
        torch.cuda.set_device(local)
    dist.init_process_group(backend="nccl" if use_cuda else "gloo")
    return True


def is_distributed() -> bool:
    return dist.is_available() and dist.is_initialized() and dist.get_world_size() > 1


def rank() -> int:
    return dist.get_rank() if is_distributed() else 0


def world_size() -> int:
    return dist.get_world_size() if is_distributed() else 1


def rank_from_env() -> int:
    """RANK as torchrun set it (0 without torchrun); valid after the process group is gone."""
    return int(os.environ.get("RANK", "0") or 0)


def local_rank() -> int:
    return int(os.environ.get("LOCAL_RANK", "0") or 0)


def is_main() -> bool:
    """True on the one process that writes checkpoints, logs and results (rank 0, or no torchrun)."""
    return rank() == 0


def barrier() -> None:
    if is_distributed():
        dist.barrier()


def shard(n: int, rank_: int | None = None, world: int | None = None) -> tuple[int, int]:
    """[lo, hi) of rank ``rank_``'s contiguous slice of n items; the slices are disjoint, cover [0, n) in
    rank order and differ in size by at most one."""
    r = rank() if rank_ is None else rank_
    w = world_size() if world is None else world
    base, extra = divmod(n, w)
    lo = r * base + min(r, extra)
    return lo, lo + base + (1 if r < extra else 0)


def rank_seed(seed: int, step: int) -> int:
    """Seed of this rank's default RNG from ``step`` on (dropout masks): distinct per rank, fixed by the run's
    seed (draws that must agree across ranks come from the step generator)."""
    return (seed * 1_000_003 + (rank() + 1) * 104_729 + step * 7_919) % (2 ** 63)


def all_reduce_sum(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Σ over ranks of each tensor (one flat all-reduce; the inputs are not modified). Identity when not
    distributed."""
    if not is_distributed() or not tensors:
        return list(tensors)
    dtypes = {t.dtype for t in tensors}
    # one dtype for the flat buffer; mixed or integer inputs go through float64 so that counts stay exact
    dtype = tensors[0].dtype if len(dtypes) == 1 and tensors[0].is_floating_point() else torch.float64
    flat = torch.cat([t.reshape(-1).to(dtype) for t in tensors])
    dist.all_reduce(flat)
    out, i = [], 0
    for t in tensors:
        out.append(flat[i:i + t.numel()].view(t.shape).to(t.dtype))
        i += t.numel()
    return out


def _collective_device() -> torch.device:
    return torch.device("cuda", torch.cuda.current_device()) if dist.get_backend() == "nccl" else torch.device("cpu")


def agree(flag: bool) -> bool:
    """Rank 0's ``flag`` on every rank, so all ranks take the same branch (else some wait forever in a collective)."""
    if not is_distributed():
        return bool(flag)
    t = torch.tensor([1 if flag else 0], dtype=torch.int32, device=_collective_device())
    dist.broadcast(t, src=0)
    return bool(t.item())


def broadcast_from_main(tensors: Sequence[torch.Tensor]) -> list[torch.Tensor]:
    """Rank 0's values of ``tensors`` on every rank (one flat broadcast; same shapes and dtype on every rank;
    the inputs are not modified). Identity when not distributed."""
    if not is_distributed() or not tensors:
        return list(tensors)
    dtype = tensors[0].dtype
    dev = tensors[0].device
    flat = torch.cat([t.reshape(-1).to(dtype) for t in tensors]).to(_collective_device())
    dist.broadcast(flat, src=0)
    flat = flat.to(dev)
    out, i = [], 0
    for t in tensors:
        out.append(flat[i:i + t.numel()].view(t.shape).to(t.dtype))
        i += t.numel()
    return out


def secure_generator_from_main(device) -> torch.Generator:
    """:func:`~privbench.core.mechanisms.secure_generator` seeded on rank 0 and the same on every rank, so that
    every rank draws the step's other draws for the same records."""
    seed = torch.tensor([secrets.randbits(63) if is_main() else 0], dtype=torch.int64)
    (seed,) = broadcast_from_main([seed])
    g = torch.Generator(device=device)
    g.manual_seed(int(seed.item()))
    return g


def poisson_sample_from_main(n: int, rate: float, device=None) -> torch.Tensor:
    """The secure Poisson sample (:func:`~privbench.core.mechanisms.poisson_sample`), drawn on rank 0 and broadcast:
    every rank agrees on who was sampled."""
    mask = torch.zeros(n, dtype=torch.uint8)
    if is_main():
        mask[poisson_sample(n, rate, SECURE)] = 1
    (mask,) = broadcast_from_main([mask])
    return mask.nonzero().squeeze(1).to(device)


def check_global_batch(batch: int, what: str = "train.batch_size") -> None:
    """Every rank needs at least one record of each global batch."""
    w = world_size()
    if batch < w:
        raise BadInput(f"{what}={batch} is smaller than the {w} torchrun processes: every process needs at "
                       f"least one record of the global batch")


def destroy() -> None:
    if dist.is_available() and dist.is_initialized():
        dist.destroy_process_group()
