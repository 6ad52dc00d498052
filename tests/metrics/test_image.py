import importlib.util
import math

import numpy as np
import pytest
import torch

from privbench.core.errors import BadInput
from privbench.metrics import plot_image_grid, plot_roc, psnr, ssim
from privbench.metrics.image import window_size


def _imgs(seed, shape=(3, 3, 16, 16)):
    g = torch.Generator().manual_seed(seed)
    return torch.rand(shape, generator=g) * 2 - 1


def test_psnr_known_mse():
    x = torch.zeros(2, 1, 8, 8, dtype=torch.float64)  # 0.5 in [0, 1]
    y = x + 0.2  # +0.1 in [0, 1] → MSE 0.01 → 20 dB
    y[1] = x[1] - 0.02  # −0.01 → MSE 1e-4 → 40 dB
    p = psnr(x, y)
    assert p.shape == (2,)
    assert p[0].item() == pytest.approx(20.0, abs=1e-9)
    assert p[1].item() == pytest.approx(40.0, abs=1e-9)


def test_psnr_identical_capped_or_inf():
    x = _imgs(0)
    assert torch.all(psnr(x, x) == 100.0)
    assert torch.all(torch.isinf(psnr(x, x, max_db=None)))


def test_psnr_clamps_to_data_range():
    x = torch.full((1, 1, 4, 4), -1.0)
    y = torch.full((1, 1, 4, 4), 5.0)  # clamped to 1 → maximal error, MSE 1 → 0 dB
    assert psnr(x, y).item() == pytest.approx(0.0)


def test_ssim_identical_is_one():
    for shape in [(2, 3, 16, 16), (4, 1, 8, 8), (1, 3, 32, 32), (1, 1, 3, 5)]:
        x = _imgs(1, shape)
        torch.testing.assert_close(ssim(x, x), torch.ones(shape[0], dtype=torch.float64))


def test_ssim_constant_images_by_hand():
    # constant images: σ = 0, so SSIM = (2ab + C1) / (a² + b² + C1)
    a, b = 0.3, 0.7
    x = torch.full((1, 1, 12, 12), 2 * a - 1)
    y = torch.full((1, 1, 12, 12), 2 * b - 1)
    c1 = 0.01**2
    assert ssim(x, y).item() == pytest.approx((2 * a * b + c1) / (a * a + b * b + c1), rel=1e-6)


def test_ssim_hand_computation_single_window():
    # an 11×11 image has exactly one valid window: SSIM is the Gaussian-weighted formula computed by hand
    x = _imgs(2, (1, 1, 11, 11)).double()
    y = _imgs(3, (1, 1, 11, 11)).double()
    xs, ys = (x[0, 0] + 1) / 2, (y[0, 0] + 1) / 2
    r = np.arange(11) - 5.0
    g = np.exp(-(r**2) / (2 * 1.5**2))
    w = np.outer(g, g)
    w /= w.sum()
    X, Y = xs.numpy(), ys.numpy()
    mx, my = (w * X).sum(), (w * Y).sum()
    vx = (w * (X - mx) ** 2).sum()
    vy = (w * (Y - my) ** 2).sum()
    cxy = (w * (X - mx) * (Y - my)).sum()
    c1, c2 = 0.01**2, 0.03**2
    ref = ((2 * mx * my + c1) * (2 * cxy + c2)) / ((mx**2 + my**2 + c1) * (vx + vy + c2))
    assert ssim(x, y).item() == pytest.approx(ref, rel=1e-9)


def test_ssim_ordering_and_symmetry():
    x = _imgs(4)
    noise = _imgs(5)
    s_small = ssim(x, (x + 0.05 * noise).clamp(-1, 1))
    s_big = ssim(x, (x + 0.5 * noise).clamp(-1, 1))
    assert torch.all(s_small > s_big)
    torch.testing.assert_close(ssim(x, noise), ssim(noise, x))


def test_window_size():
    assert window_size(32, 32) == 11
    assert window_size(8, 8) == 7
    assert window_size(11, 40) == 11
    assert window_size(10, 10) == 9
    assert window_size(1, 1) == 1


@pytest.mark.skipif(importlib.util.find_spec("skimage") is None, reason="scikit-image not installed")
def test_ssim_psnr_match_skimage():
    from skimage.metrics import peak_signal_noise_ratio, structural_similarity

    x = _imgs(6, (2, 3, 24, 24)).double()
    y = (x + 0.2 * _imgs(7, (2, 3, 24, 24)).double()).clamp(-1, 1)
    ours_s, ours_p = ssim(x, y), psnr(x, y)
    for i in range(2):
        a = ((x[i] + 1) / 2).numpy()
        b = ((y[i] + 1) / 2).numpy()
        ref = structural_similarity(
            a, b, gaussian_weights=True, sigma=1.5, use_sample_covariance=False, data_range=1.0, channel_axis=0
        )
        assert ours_s[i].item() == pytest.approx(ref, abs=1e-6)
        assert ours_p[i].item() == pytest.approx(peak_signal_noise_ratio(a, b, data_range=1.0), abs=1e-6)


def test_image_bad_input():
    x = _imgs(0)
    with pytest.raises(BadInput):
        psnr(x, x[:, :, :8])
    with pytest.raises(BadInput):
        ssim(x[0], x[0])
    with pytest.raises(BadInput):
        psnr(x.numpy(), x)
    with pytest.raises(BadInput):
        ssim(x, x.long())


# ------------------------------------------------------------------------------------------------ plots


def _png_ok(path):
    data = path.read_bytes()
    assert len(data) > 1000
    assert data[:8] == b"\x89PNG\r\n\x1a\n"


def test_plot_roc_writes_png(tmp_path):
    rng = np.random.default_rng(0)
    y = np.r_[np.ones(300), np.zeros(300)]
    curves = {
        "strong": (y * 2 + rng.normal(size=600), y),
        "chance": (rng.normal(size=600), y),
        "perfect": (y.copy(), y),
    }
    out = plot_roc(curves, tmp_path / "sub" / "roc.png", title="test")
    assert out == tmp_path / "sub" / "roc.png"
    _png_ok(out)
    assert [p.name for p in (tmp_path / "sub").iterdir()] == ["roc.png"]  # no temp files left
    with pytest.raises(BadInput):
        plot_roc({}, tmp_path / "x.png")
    with pytest.raises(BadInput):
        plot_roc({"bad": (np.ones(3), np.ones(3))}, tmp_path / "x.png")


def test_plot_image_grid_writes_png(tmp_path):
    from PIL import Image

    imgs = _imgs(0, (10, 1, 8, 8))
    out = plot_image_grid(imgs, tmp_path / "grid.png", nrow=5)
    _png_ok(out)
    im = Image.open(out)
    # 8×8 cells are upscaled ×8 → 64 px; 5 columns and 2 rows with 2 px padding
    assert im.size == (5 * 66 + 2, 2 * 66 + 2)
    out2 = plot_image_grid(_imgs(1, (6, 3, 32, 32)), tmp_path / "grid2.png", labels=list(range(6)))
    _png_ok(out2)
    assert Image.open(out2).size[0] == 3 * 66 + 2
    with pytest.raises(BadInput):
        plot_image_grid(imgs, tmp_path / "g.png", labels=["a"])
    with pytest.raises(BadInput):
        plot_image_grid(_imgs(0, (2, 2, 8, 8)), tmp_path / "g.png")


def test_nearest_neighbour_upscaling(tmp_path):
    from PIL import Image

    img = torch.tensor([[[[-1.0, 1.0], [1.0, -1.0]]]])  # 2×2 checkerboard → ×32
    out = plot_image_grid(img, tmp_path / "c.png", nrow=1)
    a = np.asarray(Image.open(out).convert("L"))
    cell = a[2:66, 2:66]
    assert set(np.unique(cell)) == {0, 255}
    assert np.all(cell[:32, :32] == 0) and np.all(cell[:32, 32:] == 255)
    assert not math.isnan(float(a.mean()))


def test_metrics_import_is_light():
    import subprocess
    import sys

    code = "import sys, privbench.metrics; print('matplotlib' in sys.modules, 'torch' in sys.modules)"
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout.split()
    assert out == ["False", "False"]
