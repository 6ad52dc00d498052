"""A name that becomes a path cannot leave the folder it names something in. A bench suite's ``name``
(the default output ``<runs-dir>/bench-<name>``) with a separator or ``..`` is refused (exit 2) before anything is
written (target names are registered names, and go through ``safe_name`` in file names)."""
from __future__ import annotations

import pytest
from fault_helpers import assert_one_line, cli, entries

SUITE = """name: {name!r}
preset: test
datasets: [digits]
seeds: [0]
attacks: [loss]
methods: {{centralized: {{}}}}
"""


@pytest.mark.parametrize("name", ["x/../../escaped", "../escaped", "..", "a/b", ".hidden", "x\\\\..\\\\y", ""])
def test_suite_name_cannot_escape_the_runs_dir(tmp_path, name):
    root = tmp_path / "sandbox"
    runs = root / "a" / "runs"
    runs.mkdir(parents=True)
    suite = tmp_path / "s.yaml"
    suite.write_text(SUITE.format(name=name))
    r = cli("bench", "--suite", suite, "--runs-dir", runs)
    assert_one_line(r, 2, "name")
    assert entries(root) == ["a", "a/runs"], "nothing is written, inside or outside the runs dir"


def test_a_plain_suite_name_is_accepted():
    from privbench.bench.suite import check_name

    assert check_name("tiny-2.v1", "name") == "tiny-2.v1"
    assert check_name(7, "name") == "7"

