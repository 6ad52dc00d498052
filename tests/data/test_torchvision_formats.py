"""MNIST / CIFAR-10 / CelebA from tiny files written here in torchvision's real on-disk formats (no download)."""
from __future__ import annotations

import os
import pickle
import struct

import numpy as np
import pytest
import torch

from privbench.core.errors import BadInput
from privbench.data import torchvision_formats as tvf
from privbench.data.base import load_dataset

# ---------------------------------------------------------------------------------------------- no network, ever


@pytest.fixture(autouse=True)
def _no_download(monkeypatch):
    """Any download torchvision tries fails at once and is recorded (tests that allow one look at the record)."""
    import torchvision.datasets.celeba as tv_celeba
    import torchvision.datasets.cifar as tv_cifar
    import torchvision.datasets.mnist as tv_mnist

    calls = []

    def refuse(*args, **kwargs):
        calls.append((args, kwargs))
        raise RuntimeError("network disabled in tests")

    monkeypatch.setattr(tv_mnist, "download_and_extract_archive", refuse)
    monkeypatch.setattr(tv_cifar, "download_and_extract_archive", refuse)
    monkeypatch.setattr(tv_celeba, "download_file_from_google_drive", refuse)
    monkeypatch.setattr(tv_celeba, "extract_archive", refuse)
    return calls


def _one_line_bad_input(excinfo, *must_contain):
    msg = str(excinfo.value)
    assert "\n" not in msg, msg
    for s in must_contain:
        assert s in msg, (s, msg)
    return msg


# ---------------------------------------------------------------------------------------------- MNIST


def _write_idx(path, arr: np.ndarray):
    """IDX ("SN3 Pascal Vincent") file, uint8 payload: magic 0x0000 08 <ndim>, big-endian dims."""
    with open(path, "wb") as f:
        f.write(struct.pack(">I", 0x0800 + arr.ndim))
        f.write(struct.pack(">" + "I" * arr.ndim, *arr.shape))
        f.write(np.ascontiguousarray(arr, dtype=np.uint8).tobytes())


def make_mnist(root, n=20, seed=0):
    rng = np.random.default_rng(seed)
    x = rng.integers(0, 256, size=(n, 28, 28), dtype=np.uint8)
    x[:, 0, 0] = np.arange(n)  # record i carries its index in a pixel: order is checkable
    x[0, 1, 1], x[0, 1, 2] = 0, 255  # both ends of the range
    y = (np.arange(n) * 7 + 3) % 10
    raw = os.path.join(root, "MNIST", "raw")
    os.makedirs(raw)
    _write_idx(os.path.join(raw, "train-images-idx3-ubyte"), x)
    _write_idx(os.path.join(raw, "train-labels-idx1-ubyte"), y.astype(np.uint8))
    return x, y


def test_mnist_direct_values_labels_order(tmp_path):
    x, y = make_mnist(tmp_path)
    imgs, labels = tvf.load_mnist(str(tmp_path), False)
    assert imgs.shape == (20, 1, 28, 28) and imgs.dtype == torch.float32
    assert labels.dtype == torch.long and labels.tolist() == y.tolist()
    assert imgs.min().item() == -1.0 and imgs.max().item() == 1.0
    torch.testing.assert_close(imgs, torch.from_numpy(x).float()[:, None] / 127.5 - 1, rtol=0, atol=1e-6)
    idx = torch.round((imgs[:, 0, 0, 0] + 1) * 127.5).long()
    assert idx.tolist() == list(range(20))


def test_mnist_through_load_dataset_and_padding(tmp_path):
    x, y = make_mnist(tmp_path)
    a, la = load_dataset("mnist", data_root=str(tmp_path), resolution=0)
    assert a.shape == (20, 1, 28, 28) and la.tolist() == y.tolist()
    b, lb = load_dataset("mnist", data_root=tmp_path, resolution=32)  # a Path works too
    assert b.shape == (20, 1, 32, 32) and lb.tolist() == y.tolist()
    torch.testing.assert_close(b[:, :, 2:30, 2:30], a)
    border = torch.ones(32, 32, dtype=torch.bool)
    border[2:30, 2:30] = False
    assert (b[:, :, border] == -1.0).all()


def test_mnist_missing_root_and_no_root(tmp_path, _no_download):
    root = tmp_path / "nope"
    with pytest.raises(BadInput) as e:
        tvf.load_mnist(str(root), False)
    _one_line_bad_input(e, str(root), "MNIST/raw/train-images-idx3-ubyte", "--download")
    with pytest.raises(BadInput) as e:
        load_dataset("mnist", data_root=str(tmp_path))  # exists, but holds no MNIST
    _one_line_bad_input(e, str(tmp_path), "no MNIST files found")
    with pytest.raises(BadInput) as e:
        load_dataset("mnist")
    _one_line_bad_input(e, "--data-root", "mnist")
    assert not _no_download  # download=False never tries the network


def test_mnist_labels_missing_and_gz_hint(tmp_path):
    make_mnist(tmp_path)
    raw = tmp_path / "MNIST" / "raw"
    (raw / "train-labels-idx1-ubyte").rename(raw / "train-labels-idx1-ubyte.gz")
    with pytest.raises(BadInput) as e:
        tvf.load_mnist(tmp_path, False)
    _one_line_bad_input(e, "train-labels-idx1-ubyte", ".gz")


def test_mnist_corrupt_file_is_one_line(tmp_path):
    make_mnist(tmp_path)
    (tmp_path / "MNIST" / "raw" / "train-images-idx3-ubyte").write_bytes(b"\x00\x00\x00\x00garbage")
    with pytest.raises(BadInput) as e:
        tvf.load_mnist(tmp_path, False)
    _one_line_bad_input(e, str(tmp_path), "cannot read the MNIST files")


def test_mnist_download_failure_is_bad_input(tmp_path, _no_download):
    with pytest.raises(BadInput) as e:
        tvf.load_mnist(tmp_path, True)
    _one_line_bad_input(e, str(tmp_path), "could not download MNIST")
    assert _no_download  # download=True did go to torchvision's downloader


# ---------------------------------------------------------------------------------------------- CIFAR-10


def _pickle(path, obj):
    with open(path, "wb") as f:
        pickle.dump(obj, f, protocol=2)


def make_cifar(root, counts=(2, 3, 1, 2, 2), seed=1):
    """cifar-10-batches-py/ as the python tarball has it: dict pickles, data = N×3072 uint8 (R plane, G, B)."""
    rng = np.random.default_rng(seed)
    folder = os.path.join(root, "cifar-10-batches-py")
    os.makedirs(folder)
    xs, ys = [], []
    k = 0
    for b, n in enumerate(counts, start=1):
        x = rng.integers(0, 256, size=(n, 3, 32, 32), dtype=np.uint8)
        for i in range(n):
            x[i, 0, 0, 0] = k  # global index in the red plane's first pixel
            k += 1
        y = [int(v) for v in rng.integers(0, 10, size=n)]
        _pickle(os.path.join(folder, f"data_batch_{b}"),
                {"batch_label": f"training batch {b} of 5", "labels": y, "data": x.reshape(n, 3072),
                 "filenames": [f"img_{b}_{i}.png" for i in range(n)]})
        xs.append(x)
        ys += y
    xt = rng.integers(0, 256, size=(2, 3072), dtype=np.uint8)
    _pickle(os.path.join(folder, "test_batch"),
            {"batch_label": "testing batch 1 of 1", "labels": [0, 1], "data": xt, "filenames": ["t0.png", "t1.png"]})
    _pickle(os.path.join(folder, "batches.meta"),
            {"num_cases_per_batch": 10000, "num_vis": 3072,
             "label_names": ["airplane", "automobile", "bird", "cat", "deer", "dog", "frog", "horse", "ship",
                             "truck"]})
    return np.concatenate(xs), np.array(ys)


def test_cifar10_direct_values_labels_order(tmp_path, _no_download):
    x, y = make_cifar(tmp_path)
    imgs, labels = tvf.load_cifar10(str(tmp_path), False)  # tiny files: md5 differs, existence suffices
    assert imgs.shape == (10, 3, 32, 32) and imgs.dtype == torch.float32
    assert labels.dtype == torch.long and labels.tolist() == y.tolist()
    torch.testing.assert_close(imgs, torch.from_numpy(x).float() / 127.5 - 1, rtol=0, atol=1e-6)
    assert imgs.min() >= -1 and imgs.max() <= 1
    idx = torch.round((imgs[:, 0, 0, 0] + 1) * 127.5).long()
    assert idx.tolist() == list(range(10))  # data_batch_1..5 in order
    assert not _no_download


def test_cifar10_through_load_dataset(tmp_path):
    x, y = make_cifar(tmp_path)
    a, la = load_dataset("cifar10", data_root=str(tmp_path), resolution=0)
    assert a.shape == (10, 3, 32, 32) and la.tolist() == y.tolist()
    b, _ = load_dataset("cifar10", data_root=str(tmp_path), resolution=16)
    assert b.shape == (10, 3, 16, 16) and b.min() >= -1 and b.max() <= 1


def test_cifar10_download_keeps_md5_check(tmp_path, _no_download):
    make_cifar(tmp_path)
    with pytest.raises(BadInput) as e:  # tiny files fail torchvision's md5 → it tries to fetch the real ones
        tvf.load_cifar10(str(tmp_path), True)
    _one_line_bad_input(e, str(tmp_path), "could not download CIFAR-10")
    assert _no_download


def test_cifar10_missing_and_incomplete(tmp_path):
    with pytest.raises(BadInput) as e:
        load_dataset("cifar10", data_root=str(tmp_path))
    _one_line_bad_input(e, str(tmp_path), "cifar-10-batches-py", "data_batch_1..5", "--download")
    make_cifar(tmp_path)
    os.remove(tmp_path / "cifar-10-batches-py" / "data_batch_3")
    with pytest.raises(BadInput) as e:
        tvf.load_cifar10(str(tmp_path), False)
    _one_line_bad_input(e, "data_batch_3", "incomplete")


def test_cifar10_corrupt_pickle_is_one_line(tmp_path):
    make_cifar(tmp_path)
    (tmp_path / "cifar-10-batches-py" / "data_batch_2").write_bytes(b"not a pickle")
    with pytest.raises(BadInput) as e:
        tvf.load_cifar10(str(tmp_path), False)
    _one_line_bad_input(e, str(tmp_path), "cannot read the CIFAR-10 files")


# ---------------------------------------------------------------------------------------------- CelebA

ATTRS = ("5_o_Clock_Shadow Arched_Eyebrows Attractive Bags_Under_Eyes Bald Bangs Big_Lips Big_Nose Black_Hair "
         "Blond_Hair Blurry Brown_Hair Bushy_Eyebrows Chubby Double_Chin Eyeglasses Goatee Gray_Hair Heavy_Makeup "
         "High_Cheekbones Male Mouth_Slightly_Open Mustache Narrow_Eyes No_Beard Oval_Face Pale_Skin Pointy_Nose "
         "Receding_Hairline Rosy_Cheeks Sideburns Smiling Straight_Hair Wavy_Hair Wearing_Earrings Wearing_Hat "
         "Wearing_Lipstick Wearing_Necklace Wearing_Necktie Young").split()
PARTITION = [0, 0, 1, 0, 2, 0]  # train = images 1, 2, 4, 6
MALE = [1, -1, 1, 1, -1, -1]
LEVELS = [30, 70, 110, 150, 190, 230]  # each face's flat grey inside the crop box; white outside it


def make_celeba(root):
    """celeba/ as torchvision expects: aligned 178×218 JPEGs and the five space-separated list files."""
    from PIL import Image

    folder = os.path.join(root, "celeba")
    img_dir = os.path.join(folder, "img_align_celeba")
    os.makedirs(img_dir)
    names = [f"{i:06d}.jpg" for i in range(1, 7)]
    for name, lev in zip(names, LEVELS):
        a = np.full((218, 178, 3), 255, dtype=np.uint8)
        a[39 - 3 : 39 + 140 + 3, 19 - 3 : 19 + 140 + 3] = lev  # the 140 center crop sits at top 39, left 19
        Image.fromarray(a).save(os.path.join(img_dir, name), quality=95)

    def write(fname, lines):
        with open(os.path.join(folder, fname), "w") as f:
            f.write("\n".join(lines) + "\n")

    write("list_eval_partition.txt", [f"{n} {p}" for n, p in zip(names, PARTITION)])
    write("identity_CelebA.txt", [f"{n} {100 + i}" for i, n in enumerate(names)])
    attr_rows = []
    for i, n in enumerate(names):
        vals = [(-1) ** (i + j) for j in range(40)]
        vals[ATTRS.index("Male")] = MALE[i]
        attr_rows.append(n + " " + " ".join(f"{v:2d}" for v in vals))
    write("list_attr_celeba.txt", ["6", " ".join(ATTRS) + " "] + attr_rows)  # the real header ends in a space
    write("list_bbox_celeba.txt", ["6", "image_id x_1 y_1 width height"]
          + [f"{n}    95  71 226 313" for n in names])
    write("list_landmarks_align_celeba.txt",
          ["6", "lefteye_x lefteye_y righteye_x righteye_y nose_x nose_y leftmouth_x leftmouth_y rightmouth_x "
                "rightmouth_y"] + [f"{n} 69  109  106  113   77  142   73  152  108  154" for n in names])
    return [os.path.join(img_dir, n) for n in names]


def test_celeba_direct_crop_resize_labels_order(tmp_path, _no_download):
    from PIL import Image
    from torchvision.transforms.v2 import functional as TF

    paths = make_celeba(tmp_path)
    imgs, labels = tvf.load_celeba(str(tmp_path), False)
    train = [i for i, p in enumerate(PARTITION) if p == 0]
    assert imgs.shape == (len(train), 3, 64, 64) and imgs.dtype == torch.float32
    assert labels.dtype == torch.long and labels.tolist() == [(MALE[i] + 1) // 2 for i in train]
    assert imgs.min() >= -1 and imgs.max() <= 1
    for k, i in enumerate(train):  # file order, and the crop keeps only the flat inner grey (JPEG: a few levels)
        want = LEVELS[i] / 127.5 - 1
        assert (imgs[k] - want).abs().max() < 8 / 127.5, (k, i)
        ref = TF.pil_to_tensor(Image.open(paths[i]).convert("RGB"))  # the usual CenterCrop(140) → Resize(64)
        ref = TF.resize(TF.center_crop(ref, [140, 140]), [64, 64], antialias=True).float() / 127.5 - 1
        assert (imgs[k] - ref).abs().max() <= 1.01 / 127.5
    assert not _no_download


def test_celeba_through_load_dataset_chunks(tmp_path):
    make_celeba(tmp_path)
    a, la = load_dataset("celeba", data_root=str(tmp_path), resolution=0)
    b, lb = tvf.load_celeba(tmp_path, False, chunk=3)  # chunk edges change nothing
    assert a.shape == (4, 3, 64, 64) and la.tolist() == lb.tolist() == [1, 0, 1, 0]
    torch.testing.assert_close(a, b, rtol=0, atol=0)
    c, _ = load_dataset("celeba", data_root=str(tmp_path), resolution=32)
    assert c.shape == (4, 3, 32, 32)


def test_celeba_missing_incomplete_and_download(tmp_path, _no_download):
    with pytest.raises(BadInput) as e:
        load_dataset("celeba", data_root=str(tmp_path))
    _one_line_bad_input(e, str(tmp_path), "no CelebA files found", "img_align_celeba", "list_attr_celeba.txt")
    make_celeba(tmp_path)
    os.remove(tmp_path / "celeba" / "identity_CelebA.txt")
    with pytest.raises(BadInput) as e:
        tvf.load_celeba(str(tmp_path), False)
    _one_line_bad_input(e, "identity_CelebA.txt", "incomplete")
    assert not _no_download
    with pytest.raises(BadInput) as e:  # download=True: torchvision's md5 checks apply → it tries to fetch
        tvf.load_celeba(str(tmp_path), True)
    _one_line_bad_input(e, "could not download CelebA")
    assert _no_download


def test_celeba_missing_image_is_one_line(tmp_path):
    paths = make_celeba(tmp_path)
    os.remove(paths[3])  # a train image
    with pytest.raises(BadInput) as e:
        tvf.load_celeba(str(tmp_path), False)
    _one_line_bad_input(e, "cannot read a CelebA image", "000004.jpg")


class _Payload:
    """Unpickling this calls pathlib.Path.touch(marker): what a crafted batch could do with plain pickle.load."""

    def __init__(self, marker):
        self.marker = marker

    def __reduce__(self):
        import pathlib
        return (pathlib.Path.touch, (pathlib.Path(self.marker),))


def test_cifar10_crafted_pickle_runs_no_code(tmp_path, _no_download):
    make_cifar(tmp_path)
    marker = tmp_path / "pwned"
    batch = tmp_path / "cifar-10-batches-py" / "data_batch_1"
    _pickle(batch, {"labels": [0], "data": np.zeros((1, 3072), np.uint8), "x": _Payload(str(marker))})
    pickle.loads(pickle.dumps(_Payload(str(tmp_path / "probe-ran")), protocol=2))  # the payload works when
    assert (tmp_path / "probe-ran").exists()                                          # plain pickle runs it
    with pytest.raises(BadInput) as e:
        tvf.load_cifar10(str(tmp_path), False)
    _one_line_bad_input(e, "cannot read the CIFAR-10 files", "only numpy arrays")
    assert not marker.exists()
