"""Progress bars inside a bench: the grid's bar on top; a cell running in this process draws its own bar on the
line below (``outer_only(nest=True)``), and executors' cells draw none (``outer_only()``)."""
from __future__ import annotations

import io

from privbench.core import progress


def test_nested_bars_sit_below_the_callers_and_quiet_ones_are_off(monkeypatch):
    monkeypatch.setenv("PRIVBENCH_PROGRESS", "tqdm")  # a StringIO is no terminal: force the bars
    monkeypatch.delenv("RANK", raising=False)
    out = io.StringIO()
    top = progress.bar(total=3, file=out, leave=True)
    with progress.outer_only(nest=True):
        inner = progress.bar(total=5, file=out, leave=True)
        assert not inner.disable and inner.pos in (1, -1) and inner.leave is False
        inner.close()
    with progress.outer_only():
        assert progress.bar(total=5, file=out).disable
    after = progress.bar(total=2, file=out)
    assert not after.disable and after.leave is False and not top.disable
    after.close()
    top.close()
