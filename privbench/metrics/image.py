"""Per-image reconstruction quality: PSNR and SSIM (docs/attacks.md §5).

Images N×C×H×W in [−1, 1] are mapped to [0, 1] by (x + 1) / 2 and clamped (data range 1).

* PSNR = 10·log10(1 / MSE) per image, capped at ``max_db`` (default 100 dB; None: +inf) so means stay finite.
* SSIM (Wang et al. 2004): Gaussian window 11 (smaller images: the largest odd size that fits), σ = 1.5, per
  channel, K1 = 0.01, K2 = 0.03, population covariances, "valid" windows only, averaged over channels and
  positions. From 11×11 up it matches ``skimage.metrics.structural_similarity(gaussian_weights=True, sigma=1.5,
  use_sample_covariance=False, data_range=1, channel_axis=0)``.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F

from ..core.errors import BadInput

__all__ = ["psnr", "ssim"]

K1 = 0.01
K2 = 0.03
SIGMA = 1.5
WINDOW = 11


def _prepare(x, y) -> tuple[torch.Tensor, torch.Tensor]:
    for name, t in (("x", x), ("y", y)):
        if not isinstance(t, torch.Tensor):
            raise BadInput(f"{name}: expected a torch tensor N×C×H×W in [-1, 1], got {type(t).__name__}")
        if t.dim() != 4:
            raise BadInput(f"{name}: expected a 4-D tensor N×C×H×W, got shape {tuple(t.shape)}")
        if not t.is_floating_point():
            raise BadInput(f"{name}: expected a real floating-point tensor, got dtype {t.dtype}")
        if t.numel() == 0:
            raise BadInput(f"{name}: the tensor is empty (shape {tuple(t.shape)})")
    if x.shape != y.shape:
        raise BadInput(f"x/y: shapes differ ({tuple(x.shape)} vs {tuple(y.shape)}); they must match")
    dtype = torch.float32 if x.device.type == "mps" else torch.float64
    y = y.to(device=x.device)
    xs = ((x.to(dtype) + 1.0) / 2.0).clamp(0.0, 1.0)
    ys = ((y.to(dtype) + 1.0) / 2.0).clamp(0.0, 1.0)
    if not (torch.isfinite(xs).all() and torch.isfinite(ys).all()):
        raise BadInput("x/y: images contain NaN values; all pixels must be finite")
    return xs, ys


def psnr(x: torch.Tensor, y: torch.Tensor, *, max_db: float | None = 100.0) -> torch.Tensor:
    """Per-image PSNR in dB, shape (N,). Images in [−1, 1] are mapped to [0, 1] (data range 1)."""
    xs, ys = _prepare(x, y)
    mse = ((xs - ys) ** 2).flatten(1).mean(dim=1)
    out = 10.0 * torch.log10(1.0 / mse)  # mse == 0 → +inf
    if max_db is not None:
        out = out.clamp(max=float(max_db))
    return out


def _gaussian_window(size: int, sigma: float, dtype, device) -> torch.Tensor:
    r = torch.arange(size, dtype=dtype, device=device) - (size - 1) / 2.0
    g = torch.exp(-(r**2) / (2.0 * sigma**2))
    g = g / g.sum()
    return torch.outer(g, g)


def window_size(h: int, w: int) -> int:
    """11, or the largest odd size ≤ min(h, w) when the image is smaller."""
    k = min(WINDOW, h, w)
    if k % 2 == 0:
        k -= 1
    return max(k, 1)


def ssim(x: torch.Tensor, y: torch.Tensor) -> torch.Tensor:
    """Per-image SSIM, shape (N,). See the module docstring for the exact definition."""
    xs, ys = _prepare(x, y)
    n, c, h, w = xs.shape
    k = window_size(h, w)
    win = _gaussian_window(k, SIGMA, xs.dtype, xs.device).expand(c, 1, k, k).contiguous()

    def filt(t: torch.Tensor) -> torch.Tensor:
        return F.conv2d(t, win, groups=c)

    mu_x, mu_y = filt(xs), filt(ys)
    sxx = filt(xs * xs) - mu_x**2
    syy = filt(ys * ys) - mu_y**2
    sxy = filt(xs * ys) - mu_x * mu_y
    c1, c2 = K1**2, K2**2
    num = (2.0 * mu_x * mu_y + c1) * (2.0 * sxy + c2)
    den = (mu_x**2 + mu_y**2 + c1) * (sxx + syy + c2)
    return (num / den).flatten(1).mean(dim=1)
