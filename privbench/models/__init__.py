"""Diffusion core (UNet factory, schedule, training loop, samplers) and one module per method."""
import importlib

for _m in ("centralized", "local", "feddm", "pfdm", "dpdm", "dpsad"):
    try:
        importlib.import_module(f"{__name__}.{_m}")
    except ModuleNotFoundError as _e:  # a method module not written yet
        if _e.name != f"{__name__}.{_m}":
            raise
