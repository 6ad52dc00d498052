"""``cifar10``: read from torchvision's on-disk format under ``--data-root`` (downloaded only with ``--download``;
privbench.data.torchvision_formats reads the files without running code)."""
from __future__ import annotations

from ..base import need_root, register_dataset


@register_dataset("cifar10", 3, 32, 10, "CIFAR-10 32×32 from torchvision files under --data-root (train split)")
def load(data_root=None, download=False):
    from .. import torchvision_formats  # lazy: torchvision only when cifar10 is read, not with the registry

    return torchvision_formats.load_cifar10(need_root("cifar10", data_root), download)
