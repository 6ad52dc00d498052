"""Attacks on diffusion targets: :mod:`privbench.attacks.base` defines the one interface; every other module is one
attack that registers itself in ``privbench.core.registry.ATTACKS`` (docs/attacks.md)."""
