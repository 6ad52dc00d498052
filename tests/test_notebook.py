"""docs/notebooks/audit-your-model.ipynb runs top to bottom (nbclient, the venv's python3 kernel): it trains a
small diffusers model and runs the Python API's cell sequence on it — privbench.attack, privbench.audit,
privbench.report, privbench.check — with no subprocess; it shows the ROC and the table inline, and the gate
breaches."""
from __future__ import annotations

import os
from pathlib import Path

import pytest

NOTEBOOK = Path(__file__).resolve().parents[1] / "docs" / "notebooks" / "audit-your-model.ipynb"
nbformat = pytest.importorskip("nbformat")
nbclient = pytest.importorskip("nbclient")
pytest.importorskip("ipykernel")


def _outputs(nb, kind: str) -> list:
    return [o for c in nb.cells if c.cell_type == "code" for o in c.get("outputs", []) if o.output_type == kind]


@pytest.mark.slow
def test_the_audit_notebook_runs_and_gates_the_model(tmp_path, monkeypatch):
    nb = nbformat.read(NOTEBOOK, as_version=4)
    code = "\n".join(c.source for c in nb.cells if c.cell_type == "code")
    assert "subprocess" not in code
    for call in ("privbench.attack(", "privbench.audit([r])", "privbench.report([r]", "privbench.check([r]"):
        assert call in code, call
    root = str(Path(__file__).resolve().parents[1])
    env_path = os.pathsep.join(filter(None, [root, os.environ.get("PYTHONPATH")]))
    monkeypatch.setenv("PYTHONPATH", env_path)  # the kernel imports this checkout
    nbclient.NotebookClient(nb, timeout=300, kernel_name="python3", resources={"metadata": {"path": str(tmp_path)}}
                            ).execute()
    assert not _outputs(nb, "error")
    shown = _outputs(nb, "display_data")
    assert any("image/png" in o.data for o in shown)                       # the ROC, inline
    assert any("text/html" in o.data and "AUC" in o.data["text/html"] for o in shown)   # the table
    text = "".join(o.get("text", "") for o in _outputs(nb, "stream"))
    assert "ok: False" in text and "BREACH" in text                      # the memorizing model fails the gate
    assert "family-wise" in text and "headline eps lower bound" in text   # the audit's one headline
