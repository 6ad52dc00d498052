"""FID/KID through torch-fidelity with privbench's cached CNN extractor, and the per-client FID (Table 1 shape)."""
from __future__ import annotations

import pytest
import torch
from helpers import train_cfg

from privbench.bench.cells import client_fid
from privbench.core.errors import BadInput
from privbench.core.registry import FEATURE_EXTRACTORS
from privbench.metrics.extractor import cnn_path, resolve_extractor
from privbench.metrics.fid import fid
from privbench.runs import train as api


@pytest.fixture(scope="module")
def digits():
    return api.load_dataset("digits")


def test_fid_self_zero_and_grows_with_noise(digits, runs_dir):
    x = digits[0][:400]
    same = fid(x, x, dataset="digits", runs_dir=runs_dir, kid=True)
    assert same["fid"] == pytest.approx(0.0, abs=1e-3)
    assert same["extractor"].startswith("privbench-cnn[digits 8px")
    g = torch.Generator().manual_seed(0)
    z = torch.randn(x.shape, generator=g)
    vals = [fid(x, x + s * z, dataset="digits", runs_dir=runs_dir)["fid"] for s in (0.1, 0.3, 0.6, 1.0)]
    assert 0 < vals[0] < vals[1] < vals[2] < vals[3]
    noisy = fid(x, x + 0.6 * z, dataset="digits", runs_dir=runs_dir, kid=True)
    assert noisy["kid"] > same["kid"] and set(noisy) >= {"fid", "kid", "n1", "n2", "extractor"}


def test_extractor_is_cached_and_registered(runs_dir):
    import torch_fidelity.registry as tfr

    ex = resolve_extractor("digits", runs_dir)
    path = cnn_path(runs_dir, "digits", 8)
    assert ex.weights == str(path) and path.exists()
    mtime = path.stat().st_mtime_ns
    assert resolve_extractor("digits", runs_dir).weights == ex.weights and path.stat().st_mtime_ns == mtime
    assert ex.info["heldout_accuracy"] > 0.9  # a real classifier of the digits
    assert "privbench-cnn" in tfr.FEATURE_EXTRACTORS_REGISTRY
    assert {"cnn", "inception-v3-compat"} <= set(FEATURE_EXTRACTORS.names())


def test_inception_needs_a_weights_file(digits, runs_dir, tmp_path):
    x = digits[0][:10]
    with pytest.raises(BadInput):
        fid(x, x, dataset="digits", runs_dir=runs_dir, inception_weights=str(tmp_path / "missing.pth"))
    ex = FEATURE_EXTRACTORS.create("inception-v3-compat", weights=__file__)
    assert ex.tf_name == "inception-v3-compat" and ex.name.startswith("inception-v3-compat[") and ex.channels == 3


def test_client_fid_shape(runs_dir):
    m = api.train(train_cfg("local"), runs_dir, "cpu")
    assert m.fid_target(1) == "client:1"
    r = client_fid(m, client=1, n_per_class=3, sampler="ddim", ddim_steps=3, heldout=True, kid=True)
    assert set(r) >= {"majority", "minority", "average", "extractor", "target", "n_generated", "n_real"}
    assert r["target"] == "client:1" and r["extractor"].startswith("privbench-cnn")
    assert r["average"] == pytest.approx((r["majority"] + r["minority"]) / 2)
    split = m.ctx.clients
    assert r["majority_classes"] == split.majority[1] and r["minority_classes"] == split.minority[1]
    _, y = m.ctx.records(split.clients[1])
    assert r["n_real"]["majority"] == int(torch.isin(y, torch.tensor(split.majority[1])).sum())
    assert r["n_generated"]["majority"] == 3 * len(set(y[torch.isin(y, torch.tensor(split.majority[1]))].tolist()))
    ho = r["heldout"]  # the same samples against held-out non-members of those classes
    _, yh = m.ctx.records(m.ctx.split.nonmembers)
    assert ho["n_real"]["minority"] == int(torch.isin(yh, torch.tensor(split.minority[1])).sum())
    assert ho["average"] == pytest.approx((ho["majority"] + ho["minority"]) / 2)
    for part in (r, ho):  # KID beside each FID, own and held-out
        assert part["average_kid"] == pytest.approx((part["majority_kid"] + part["minority_kid"]) / 2)


def test_client_fid_targets_per_method(runs_dir):
    pf = api.train(train_cfg("pfdm"), runs_dir, "cpu")
    assert pf.fid_target(0) == "pipeline:0"
    r = client_fid(pf, client=0, n_per_class=2, sampler="ddim", ddim_steps=3)
    assert r["target"] == "pipeline:0" and r["average"] is not None
    ce = api.make_method(train_cfg("centralized"), runs_dir / "x", "cpu")
    assert ce.fid_target(0) == "model"
