"""Utility metrics (metrics/utility.py, runs/utility.py): downstream accuracy with a test split read once,
precision/recall, class fidelity."""
from __future__ import annotations

import numpy as np
import pytest
import torch
from helpers import train_cfg

from privbench.metrics.utility import ReadOnce, bootstrap_ci, downstream_accuracy, precision_recall


class CountingSplit(ReadOnce):
    """Records every access to the real test records (a test of the protocol, not of ReadOnce's own counter)."""

    def __init__(self, x, y):
        super().__init__(x, y)
        self.accesses = 0

    def read(self):
        self.accesses += 1
        return super().read()


def _blobs(n_per_class, seed, classes=(0, 1, 2)):
    g = torch.Generator().manual_seed(seed)
    y = torch.tensor(classes).repeat_interleave(n_per_class)
    x = torch.randn((len(y), 1, 8, 8), generator=g) * 0.3
    for c in classes:  # each class lights its own row of pixels
        x[y == c, 0, c * 2] += 1.5
    return x, y


def test_downstream_accuracy_selects_on_synthetic_and_reads_the_test_split_once():
    xs, ys = _blobs(40, seed=0)
    xt, yt = _blobs(30, seed=1)
    test = CountingSplit(xt, yt)
    out = downstream_accuracy(xs, ys, test, num_classes=10, seed=0, epochs=6, batch_size=16)
    assert test.accesses == 1 and test.reads == 1
    assert out["accuracy"] > 0.9 and out["ci"][0] <= out["accuracy"] <= out["ci"][1]
    assert len(out["val_curve"]) == 6 and out["n_test"] == len(yt)
    # the epoch kept is the one with the best synthetic-validation accuracy (its weights, not the last epoch's)
    assert out["val_curve"][out["selected_epoch"] - 1] == max(out["val_curve"])
    assert out["synthetic_val_accuracy"] == max(out["val_curve"])  # the epoch chosen on synthetic validation
    with pytest.raises(RuntimeError, match="read a second time"):
        test.read()
    # labels shuffled: nothing to learn, so the real test accuracy is about chance (the metric can fail)
    bad = downstream_accuracy(xs, ys[torch.randperm(len(ys), generator=torch.Generator().manual_seed(3))],
                              ReadOnce(xt, yt), num_classes=10, seed=0, epochs=6, batch_size=16)
    assert bad["accuracy"] < 0.6


def test_precision_recall_and_bootstrap():
    g = torch.Generator().manual_seed(0)
    real = torch.randn((200, 4), generator=g)
    same = precision_recall(real, torch.randn((200, 4), generator=g))
    collapsed = precision_recall(real, torch.randn((200, 4), generator=g) * 0.05)  # mode collapse: precise, no recall
    far = precision_recall(real, torch.randn((200, 4), generator=g) + 10)
    assert same["precision"] > 0.8 and same["recall"] > 0.8
    assert collapsed["precision"] > 0.9 and collapsed["recall"] < 0.3
    assert far["precision"] == 0.0 and far["recall"] == 0.0
    lo, hi = bootstrap_ci(np.r_[np.ones(50), np.zeros(50)], seed=0)
    assert 0.38 < lo < 0.5 < hi < 0.62


def test_measure_utility_of_a_run_reads_its_test_split_once(tmp_path, monkeypatch):
    from privbench.metrics import utility as mu
    from privbench.runs.utility import measure_utility

    reads = []
    real_read = mu.ReadOnce.read
    monkeypatch.setattr(mu.ReadOnce, "read", lambda self: reads.append(len(self)) or real_read(self))
    cfg = train_cfg("centralized", "test", data__n_test=50, data__public="classes:5-9", sample__sampler="ddim")
    rec = measure_utility(cfg, tmp_path, "cpu", n_per_class=6, epochs=2)
    assert reads == [50] and rec["test_reads"] == 1
    assert rec["classes"] == [0, 1, 2, 3, 4] and rec["n_samples"] == 30 and rec["downstream"]["chance"] == 0.2
    assert 0 <= rec["downstream"]["accuracy"] <= 1 and 0 <= rec["class_fidelity"]["class_fidelity"] <= 1
    assert set(rec["precision_recall"]) >= {"precision", "recall"}
    assert measure_utility(cfg, tmp_path, "cpu", n_per_class=6, epochs=2) == rec and reads == [50]  # cached
