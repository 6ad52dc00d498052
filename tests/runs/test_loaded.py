"""Targets loaded once per shared_targets scope, one run's at a time."""
from __future__ import annotations

from pathlib import Path
from types import SimpleNamespace

from privbench.runs.loaded import load_target, release, shared_targets


class _Method:
    def __init__(self, run_dir: Path, device: str = "cpu"):
        self.ctx = SimpleNamespace(run_dir=run_dir, device=device)
        self.loads = 0
        self.names: list[str] = []

    def load_target(self, name):
        self.loads += 1
        self.names.append(name)
        return object()


def test_a_scope_loads_each_target_once_and_holds_one_runs_targets(tmp_path):
    a, ref, b = _Method(tmp_path / "a"), _Method(tmp_path / "a" / "references" / "ref-0"), _Method(tmp_path / "b")
    assert load_target(a, "model") is not load_target(a, "model")  # no scope: loaded anew
    assert a.loads == 2
    with shared_targets():
        t, r = load_target(a, "model"), load_target(ref, "model", run=a.ctx.run_dir)
        with shared_targets():  # a nested scope is the outer one
            assert load_target(a, "model") is t and load_target(ref, "model", run=a.ctx.run_dir) is r
        assert load_target(a, "shared") is not t  # another target of the run
        assert (a.loads, ref.loads) == (4, 1) and a.names[-2:] == ["model", "shared"]
        load_target(b, "model")  # another run: a's targets are dropped
        assert load_target(a, "model") is not t and a.loads == 5
    load_target(a, "model")
    assert a.loads == 6
    cuda = _Method(tmp_path / "a", device="cuda")
    with shared_targets():
        load_target(a, "model")
        load_target(cuda, "model")  # another device is another object
        assert cuda.loads == 1
        release()  # e.g. before a bench's FID cell: nothing held
        load_target(cuda, "model")
        assert cuda.loads == 2
