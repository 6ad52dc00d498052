"""Imports every method module so that each registers itself in METHODS."""
import importlib

for _m in ("centralized", "local", "feddm", "pfdm", "dpdm", "dpsad"):
    try:
        importlib.import_module(f"privbench.models.{_m}")
    except ModuleNotFoundError as _e:  # a method module not written yet
        if _e.name != f"privbench.models.{_m}":
            raise
