"""Every setting that changes an output is hashed (a different value never reuses a cached output) and recorded;
the attack lock says what it waits for."""
from __future__ import annotations

import json

from fault_helpers import TEST, cli


def _attack(cfg):
    from privbench.runs.attack import attack_hash, make_attack

    a = make_attack(cfg, "loss")
    return attack_hash(a, cfg, "model"), a.describe()


def test_bootstrap_enters_the_attack_hash_and_is_recorded():
    from privbench.core.config import build_config

    h50, d50 = _attack(build_config("centralized", "digits", "test", 0))
    h20, d20 = _attack(build_config("centralized", "digits", "test", 0, [("attack.bootstrap", "20")]))
    assert h50 != h20
    assert d50["bootstrap"] == 50 and d20["bootstrap"] == 20


def test_a_bootstrap_change_is_not_served_from_the_cache(store):
    """Another number of resamples is computed, never the cached CIs of a different count."""
    runs, run_dir, out_dir = store
    r = cli("attack", *TEST, "--attack", "loss", "--set", "attack.bootstrap=20", "--runs-dir", runs, "--json")
    assert r.code == 0, r
    assert "attack cache hit" not in r.err
    res = json.loads(r.out)
    assert res["attack_config"]["bootstrap"] == 20
    assert res["attack_hash"] != json.loads((out_dir / "result.json").read_text())["attack_hash"]


def test_sample_batch_size_enters_the_sample_and_fid_hashes():
    """Each batch of a sampling chain draws its noise from its own generator: the batch size changes the samples."""
    from privbench.bench.plan import Cell, fid_settings_hash, samples_settings_hash
    from privbench.core.config import build_config

    a = build_config("centralized", "digits", "test", 0)
    b = build_config("centralized", "digits", "test", 0, [("sample.batch_size", "7")])
    assert samples_settings_hash(a, {}) != samples_settings_hash(b, {})
    fcfg = {"client": 0, "n_per_class": 2, "n_overall": 0, "sampler": None}
    ca, cb = (Cell("fid", "centralized", "digits", 0, "model", cfg=c) for c in (a, b))
    assert fid_settings_hash(ca, fcfg) != fid_settings_hash(cb, fcfg)


def test_the_attack_lock_says_attacked(tmp_path, privbench_log, monkeypatch):
    """A second attack process waiting for the lock says it is being attacked, not trained. The lock here is busy
    once (a fake FileLock whose non-blocking acquire times out), then granted."""
    import filelock

    from privbench.runs.store import run_lock

    class BusyOnce:
        def __init__(self, path):
            self.path = path

        def acquire(self, timeout=None):
            if timeout == 0:
                raise filelock.Timeout(self.path)

        def release(self):
            pass

    monkeypatch.setattr(filelock, "FileLock", BusyOnce)
    for what, said in (("attack", "is being attacked by another process"),
                       ("train", "is being trained by another process")):
        with run_lock(tmp_path / "run", what, lock_name=f"{what}-x"):
            pass
        err, _ = privbench_log.text, privbench_log.lines.clear()
        assert f"{said}; waiting for it" in err, err
