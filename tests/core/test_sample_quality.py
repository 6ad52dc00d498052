"""The tiny centralized target draws digits that a plain classifier reads as the requested class."""
import numpy as np
import pytest
from helpers import train_cfg


@pytest.fixture(scope="module")
def digit_classifier():
    from sklearn.datasets import load_digits
    from sklearn.linear_model import LogisticRegression

    d = load_digits()
    x = d.images.reshape(len(d.images), -1) / 8.0 - 1.0
    return LogisticRegression(max_iter=2000, C=1.0).fit(x, d.target)


@pytest.mark.slow
@pytest.mark.parametrize("klass,sampler", [(3, "ddpm"), (7, "ddim")])  # the full chain, and DDIM's 100 calls
def test_class_conditional_samples_are_read_as_k(runs_dir, overfit_centralized, digit_classifier, klass, sampler):
    """On the session's tiny centralized target (128 members, 1500 steps; conftest.py). Read as k here: 0.995
    (class 3, DDPM) and 0.925 (class 7, DDIM)."""
    from privbench.runs import train as api

    cfg = train_cfg("centralized", "tiny", data__n_members=128, data__n_nonmembers=128, train__steps=1500,
                    sample__sampler=sampler)
    assert cfg.training_hash() == overfit_centralized.cfg.training_hash()  # the trained target, not a new one
    out = api.sample(cfg, runs_dir, "cpu", n=200, klass=klass, out=str(runs_dir / f"g{klass}.png"),
                     npz=str(runs_dir / f"s{klass}.npz"))
    d = np.load(out["npz"])
    pred = digit_classifier.predict(d["images"].reshape(200, -1))
    assert (pred == klass).mean() >= 0.85, (pred == klass).mean()
