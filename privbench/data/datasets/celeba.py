"""``celeba``: read from torchvision's on-disk format under ``--data-root`` (downloaded only with ``--download``;
privbench.data.torchvision_formats reads the files without running code)."""
from __future__ import annotations

from ..base import need_root, register_dataset


@register_dataset("celeba", 3, 64, 2, "CelebA aligned faces from torchvision files under --data-root; label = Male")
def load(data_root=None, download=False):
    from .. import torchvision_formats  # lazy: torchvision only when celeba is read, not with the registry

    return torchvision_formats.load_celeba(need_root("celeba", data_root), download)
