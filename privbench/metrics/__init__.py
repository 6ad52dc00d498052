"""Metrics: membership-inference ROC metrics, image quality, plots (numpy only; torch, matplotlib, PIL lazily)."""

from __future__ import annotations

from typing import Any

from .roc import (
    asr,
    auc,
    calibrated_metrics,
    fpr_key,
    membership_metrics,
    roc_points,
    tpr_at_fpr,
)

_LAZY = {
    "psnr": "privbench.metrics.image",
    "ssim": "privbench.metrics.image",
    "plot_roc": "privbench.metrics.plots",
    "plot_image_grid": "privbench.metrics.plots",
}

__all__ = [
    "roc_points",
    "auc",
    "asr",
    "tpr_at_fpr",
    "membership_metrics",
    "calibrated_metrics",
    "fpr_key",
    *_LAZY,
]


def __getattr__(name: str) -> Any:
    if name in _LAZY:
        # lazy: at the top, `importlib` would be listed by this package's __dir__
        import importlib

        value = getattr(importlib.import_module(_LAZY[name]), name)
        globals()[name] = value
        return value
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def __dir__() -> list[str]:
    return sorted(set(globals()) | set(__all__))
