"""Diffusion core (UNet factory, schedule, training loop, samplers) and one module per method.

Kept import-light: the method modules register themselves when ``privbench.models.methods`` is imported
(the registry does that lazily), so ``privbench account`` never pays for torch/diffusers imports it
does not need.
"""
