"""``mnist``: read from torchvision's on-disk format under ``--data-root`` (downloaded only with ``--download``;
privbench.data.torchvision_formats reads the files without running code)."""
from __future__ import annotations

from ..base import need_root, register_dataset


@register_dataset("mnist", 1, 28, 10, "MNIST 28×28 from torchvision files under --data-root (train split)")
def load(data_root=None, download=False):
    from .. import torchvision_formats  # lazy: torchvision only when mnist is read, not with the registry

    return torchvision_formats.load_mnist(need_root("mnist", data_root), download)
