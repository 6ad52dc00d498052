"""Strict, bounded loading of a network from weight files privbench did not write (docs/external-models.md, "Bounds").

A model folder is untrusted: its config can describe a network of any size, its weights can lack tensors (diffusers
leaves them uninitialised, so scores change from run to run), hold extra ones, or integers where floats belong.
:func:`load_strict` therefore (1) builds the network on the ``meta`` device (:func:`meta_build`), (2) counts its
parameters and buffers (:func:`check_size`), (3) reads only the safetensors headers (:func:`safetensors_tensors`),
(4) compares them with the state dict (:func:`check_tensors`), and only then (5) builds the network for real and
loads it with ``strict=True``. :func:`check_state_dict` does 2–4 for tensors already in memory (a
``torch.load(weights_only=True)`` checkpoint) and refuses a tensor whose storage cannot hold its shape.
``factory`` is called twice (on ``meta``, then for real) and must build the same network each time.
"""
from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Callable, Iterable

import torch
from safetensors import safe_open

from ..core.config import MAX_PARAMETERS
from ..core.errors import BadInput

#: names shown per kind of problem (the counts are always complete)
SHOWN = 3


@dataclass(frozen=True)
class TensorInfo:
    """What a weight file says about one tensor, before its data is read."""
    dtype: str          # "float" | "int" | "bool" | "complex" (the kind matters, not the precision)
    shape: tuple
    file: str


def _kind(dtype) -> str:
    if isinstance(dtype, torch.dtype):
        return ("float" if dtype.is_floating_point else "complex" if dtype.is_complex
                else "bool" if dtype == torch.bool else "int")
    s = str(dtype).upper()  # safetensors' names: F32, F16, BF16, F8_E4M3, I64, U8, BOOL, C64
    return "bool" if s == "BOOL" else "float" if s.startswith(("F", "BF")) else "complex" if s.startswith("C") \
        else "int"


def meta_build(factory: Callable[[], torch.nn.Module], where: str) -> torch.nn.Module:
    """``factory()`` on the meta device: the network's shapes without its memory; a config it cannot build from
    is BadInput."""
    try:
        with torch.device("meta"):
            return factory()
    except BadInput:
        raise
    except (ValueError, TypeError, KeyError, IndexError, AttributeError, RuntimeError, AssertionError,
            ArithmeticError) as e:
        first = (" ".join(str(e).split()) or type(e).__name__)[:160]
        raise BadInput(f"{where}: cannot build the network its config describes ({type(e).__name__}: {first})"
                       ) from None


def check_size(module: torch.nn.Module, where: str, max_elements: int = MAX_PARAMETERS) -> int:
    """Parameters + buffers of ``module`` (on any device, meta included); BadInput above ``max_elements``."""
    n = sum(t.numel() for t in module.parameters()) + sum(t.numel() for t in module.buffers())
    if n > max_elements:
        gb = n * 4 / 1e9
        raise BadInput(f"{where}: the network would hold {n:,} parameters and buffers ({gb:,.1f} GB in float32); "
                       f"privbench loads at most {max_elements:,}")
    return n


def safetensors_tensors(files: Iterable[Path], where: str) -> dict[str, TensorInfo]:
    """name → :class:`TensorInfo` of every tensor in the safetensors ``files`` (headers only); a tensor in two
    files, or a file that is not safetensors, is BadInput."""
    out: dict[str, TensorInfo] = {}
    for f in files:
        try:
            with safe_open(str(f), framework="pt") as fh:
                for k in fh.keys():
                    if k in out:
                        raise BadInput(f"{where}: tensor {k!r} is in both {out[k].file} and {Path(f).name}")
                    s = fh.get_slice(k)
                    out[k] = TensorInfo(_kind(s.get_dtype()), tuple(int(d) for d in s.get_shape()), Path(f).name)
        except BadInput:
            raise
        except Exception as e:  # noqa: BLE001 - safetensors raises its own error types for corrupt headers
            first = (" ".join(str(e).split()) or type(e).__name__)[:120]
            raise BadInput(f"{where}: {Path(f).name} is not a readable safetensors file ({first})") from None
    return out


def _names(keys: list[str]) -> str:
    keys = sorted(keys)
    more = f" and {len(keys) - SHOWN} more" if len(keys) > SHOWN else ""
    return ", ".join(keys[:SHOWN]) + more


def check_tensors(expected: dict[str, torch.Tensor], found: dict[str, TensorInfo], where: str) -> None:
    """BadInput naming every missing, unexpected, mis-shaped or mistyped tensor of ``found`` against the
    state dict ``expected`` (meta tensors are fine: only names, shapes and dtypes are compared)."""
    missing = [k for k in expected if k not in found]
    extra = [k for k in found if k not in expected]
    shaped = [f"{k} {list(found[k].shape)} (expected {list(expected[k].shape)})" for k in expected
              if k in found and found[k].shape != tuple(expected[k].shape)]
    typed = [f"{k} {found[k].dtype} (expected {_kind(expected[k].dtype)})" for k in expected
             if k in found and found[k].dtype != _kind(expected[k].dtype)]
    problems = []
    for label, keys in (("missing", missing), ("unexpected", extra), ("of the wrong shape", shaped),
                        ("of the wrong type", typed)):
        if keys:
            problems.append(f"{len(keys)} {label}: {_names(keys)}")
    if problems:
        raise BadInput(f"{where}: the weights do not match the network ({len(expected)} tensors expected): "
                       + "; ".join(problems))


def _storage_holds(t: torch.Tensor) -> bool:
    """True when every element of ``t`` has its own bytes in its storage: no zero stride (a few-KB file claiming a
    12.8 GB table), no element beyond the storage, no more elements than stored bytes (overlapping strides)."""
    if t.numel() == 0:
        return True
    if any(st <= 0 for n, st in zip(t.shape, t.stride()) if n > 1):
        return False
    last = t.storage_offset() + sum((n - 1) * st for n, st in zip(t.shape, t.stride()))
    nbytes = t.untyped_storage().nbytes()
    return (last + 1) * t.element_size() <= nbytes and t.numel() * t.element_size() <= nbytes


def state_dict_info(sd: dict, where: str, file: str = "") -> dict[str, TensorInfo]:
    """:class:`TensorInfo` of tensors in memory; a tensor whose storage cannot hold its shape is BadInput."""
    bad = [k for k, v in sd.items() if not _storage_holds(v)]
    if bad:
        raise BadInput(f"{where}: {len(bad)} tensor(s) claim more elements than their stored bytes (zero or "
                       f"overlapping strides): {_names(bad)}")
    return {k: TensorInfo(_kind(v.dtype), tuple(v.shape), file) for k, v in sd.items()}


def check_state_dict(meta: torch.nn.Module, sd: dict, where: str, max_elements: int = MAX_PARAMETERS) -> None:
    """Steps 2–4 of the module doc for a state dict in memory, against ``meta`` (a :func:`meta_build`)."""
    check_size(meta, where, max_elements)
    check_tensors(meta.state_dict(), state_dict_info(sd, where), where)


def load_strict(factory: Callable[[], torch.nn.Module], files: list[Path], where: str, *,
                dtype: torch.dtype = torch.float32, max_elements: int = MAX_PARAMETERS) -> torch.nn.Module:
    """The network ``factory`` builds, filled from the safetensors ``files`` after every check of the module doc
    passed; float tensors are cast to ``dtype``. Returns it in eval mode on the CPU."""
    meta = meta_build(factory, where)
    check_size(meta, where, max_elements)
    expected = meta.state_dict()
    check_tensors(expected, safetensors_tensors(files, where), where)
    net = factory()
    sd = {}
    for f in files:
        with safe_open(str(f), framework="pt") as fh:
            for k in fh.keys():
                t = fh.get_tensor(k)
                sd[k] = t.to(dtype) if t.is_floating_point() else t
    net.load_state_dict(sd, strict=True)
    if any(t.is_floating_point() and t.dtype != dtype for t in net.state_dict().values()):
        torch.nn.Module.to(net, dtype)  # the plain cast (diffusers' own .to warns about fp32 modules)
    return net.eval()


def check_finite(modules: dict[str, torch.nn.Module | None], where: str) -> None:
    """BadInput naming the float tensors of ``modules`` (part name → module) that hold NaN or infinity: every score
    would be NaN, or an attack would measure an overflow."""
    bad = [f"{part}{k}" for part, m in modules.items() if m is not None for k, v in m.state_dict().items()
           if v.is_floating_point() and not bool(v.isfinite().all())]
    if bad:
        raise BadInput(f"{where}: {len(bad)} tensor(s) hold NaN or infinity ({', '.join(bad[:SHOWN])}"
                       f"{', ...' if len(bad) > SHOWN else ''}); weights must be finite")
