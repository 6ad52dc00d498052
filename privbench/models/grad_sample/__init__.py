"""Per-record gradients for DP-SGD and white-box attacks (privbench's own, tested against per-example autograd;
opacus' conv grad sampler returns all-zero gradients after a diffusers attention block): :mod:`.layers` (per-layer
formulas), :mod:`.ghost` (ghost clipping), :mod:`.engine` (:class:`PerSampleGrads`, :func:`frozen`).
"""
from .engine import BACKENDS, PerSampleGrads, frozen, requires_grad
from .layers import GRAD_SAMPLERS, register_grad_sampler

__all__ = ["BACKENDS", "GRAD_SAMPLERS", "PerSampleGrads", "frozen", "register_grad_sampler", "requires_grad"]
