import numpy as np
import pytest
import torch

import privbench
from privbench.core.errors import BadInput
from privbench.data.splits import class_matched, client_split, member_split


def test_digits_embedded_scaling():
    x, y = privbench.load_dataset("digits")
    from sklearn.datasets import load_digits

    d = load_digits()
    assert x.shape == (1797, 1, 8, 8) and x.dtype == torch.float32 and y.dtype == torch.long
    assert torch.equal(x[:, 0], torch.from_numpy(d.images.astype(np.float32) / 8 - 1))
    assert x.min() == -1 and x.max() == 1 and torch.equal(y, torch.from_numpy(d.target))


def test_colored_digits_deterministic_colours():
    x, y = privbench.load_dataset("colored-digits")
    x2, _ = privbench.load_dataset("colored-digits")
    assert x.shape == (1797, 3, 8, 8) and torch.equal(x, x2)
    assert x.min() >= -1 and x.max() <= 1
    g, _ = privbench.load_dataset("digits")
    # the colour only scales intensity: where the digit is blank every channel is −1
    blank = g[:, 0] == -1
    assert torch.all(x.permute(1, 0, 2, 3)[:, blank] == -1)
    # more than one colour is used, and per-record colour is fixed by the index
    bright = [tuple((x[i].amax(dim=(1, 2)) > 0).tolist()) for i in range(40)]
    assert len(set(bright)) > 2


def test_member_split_disjoint_reproducible():
    a = member_split(1797, 256, 256, seed=0)
    b = member_split(1797, 256, 256, seed=0)
    c = member_split(1797, 256, 256, seed=1)
    assert a == b and a.members != c.members
    assert len(a.members) == 256 and len(a.nonmembers) == 256 and not set(a.members) & set(a.nonmembers)
    with pytest.raises(BadInput):
        member_split(100, 60, 60, 0)


def test_client_split_majority_minority():
    _, y = privbench.load_dataset("digits")
    s = member_split(1797, 1000, 100, 0)
    cs = client_split(s.members, y.numpy(), n_clients=4, n_classes=10, majority_classes=2, imbalance=10.0, seed=0)
    allidx = sorted(i for c in cs.clients for i in c)
    assert allidx == sorted(s.members)  # every member to exactly one client
    for m in range(4):
        assert cs.majority[m] == sorted({2 * m, 2 * m + 1})
        labs = y[cs.clients[m]].numpy()
        maj = np.mean([np.sum(labs == c) for c in cs.majority[m]])
        mino = np.mean([np.sum(labs == c) for c in cs.minority[m]])
        assert maj / max(mino, 1) > 5  # imbalance 10 (counts are small; allow slack)


def test_class_matched_nonmembers_copy_the_class_counts():
    y = privbench.load_dataset("digits")[1].numpy()
    s = member_split(len(y), 256, 256, seed=0)
    cs = client_split(s.members, y, n_clients=4, n_classes=10, majority_classes=2, imbalance=10.0, seed=0)
    mem = cs.clients[0]
    non = class_matched(mem, s.nonmembers, y, seed=0)
    assert set(non) <= set(s.nonmembers)
    mc, nc = np.bincount(y[mem], minlength=10), np.bincount(y[non], minlength=10)
    avail = np.bincount(y[s.nonmembers], minlength=10)
    assert (nc == np.minimum(mc, avail)).all()
    assert mc[cs.majority[0]].sum() > mc[cs.minority[0]].sum()  # the skew the matching removes
    assert non == class_matched(mem, s.nonmembers, y, seed=0) != class_matched(mem, s.nonmembers, y, seed=1)
