"""Every key and value of a suite is checked before anything trains: ``privbench bench --suite FILE`` with a bad
one exits 2 with one line naming the file and the key (and the bound), and creates nothing under the runs dir.
Cases include values that would crash (``samples: {n: abc}``), fail only after training (``n: -1``,
``n: 10**12``), or be silently ignored (an unknown key under ``samples``, ``epsilons: []`` dropping every private
method, a ``seeds_by_epsilon`` entry for an ε the axis does not have, an empty or repeated ``seeds``)."""
from __future__ import annotations

import pytest
from fault_helpers import assert_one_line, cli, entries

BASE = "name: s\npreset: test\ndevice: cpu\nattacks: [loss]\nfid: false\n"
ONE = "methods: {centralized: {targets: [model]}}\n"
PRIVATE = "methods: {pfdm: {targets: [shared]}, centralized: {targets: [model]}}\n"

BAD = [
    ("samples: {n: abc}\n" + ONE, "samples.n: 'abc'; expected an integer in [1, 100000]"),
    ("samples: {n: -1}\n" + ONE, "samples.n: -1; expected an integer in [1, 100000]"),
    ("samples: {n: 1e12}\n" + ONE, "samples.n: '1e12'; expected an integer in [1, 100000]"),
    ("samples: {n: 1000000000000}\n" + ONE, "samples.n: 1000000000000; expected an integer in [1, 100000]"),
    ("samples: {n: 8, grid: 3}\n" + ONE, "samples: unknown key(s) grid; allowed: n"),
    ("samples: 5\n" + ONE, "samples: 5; expected false, true or {n: N}"),
    ("epsilons: []\n" + PRIVATE, "epsilons: empty"),
    ("methods: {pfdm: {targets: [shared], epsilons: []}}\n", "methods.pfdm.epsilons: empty"),
    ("epsilons: [10]\nseeds_by_epsilon: {4: [1]}\n" + PRIVATE,
     "seeds_by_epsilon: epsilon 4 is not on the epsilons axis (10)"),
    ("seeds_by_epsilon: {4: [1]}\n" + PRIVATE, "seeds_by_epsilon: epsilon 4 is not on the epsilons axis (none"),
    ("epsilons: [10]\nseeds_by_epsilon: {10: []}\n" + PRIVATE, "seeds_by_epsilon.10: expected a non-empty list"),
    ("seeds: []\n" + ONE, "seeds: expected a non-empty list of distinct seeds"),
    ("seeds: [0, 0]\n" + ONE, "seeds: expected a non-empty list of distinct seeds"),
    ("samples: {n: 4}\nmethods: {centralized: {targets: [model], samples: {n: 3}}}\n",
     "methods.centralized.samples: {'n': 3}; expected false"),
    ("utility: {n_per_class: 1000000000000}\n" + ONE, "utility.n_per_class: expected an integer in [1, 100000]"),
    ("utility: {epochs: 0}\n" + ONE, "utility.epochs: expected an integer in [1, 10000]"),
    ("description: [1, 2]\n" + ONE, "description: expected text"),
]


@pytest.mark.parametrize("body,needle", BAD, ids=[n.split(";")[0].split(":")[0] + f"-{i}" for i, (_, n) in
                                                  enumerate(BAD)])
def test_bad_suite_values_exit_2_before_anything_runs(tmp_path, body, needle):
    suite = tmp_path / "s.yaml"
    suite.write_text(BASE + body)
    r = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    line = assert_one_line(r, 2, needle)
    assert f"--suite {suite}" in line
    assert entries(tmp_path / "runs") == []


def test_the_shipped_suites_still_load():
    from privbench.bench.suite import SHIPPED, load_suite

    for p in sorted((SHIPPED / "suites").glob("*.yaml")):
        load_suite(str(p))


def test_utility_without_a_test_split_is_refused_before_training(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(BASE + "utility: {n_per_class: 2, epochs: 1}\n" + ONE)
    r = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "the run has no test split; set data.n_test")
    assert entries(tmp_path / "runs") == []


def test_a_method_entrys_key_it_does_not_train_from_is_refused_before_training(tmp_path):
    suite = tmp_path / "s.yaml"
    suite.write_text(BASE + "methods: {centralized: {targets: [model], set: {dp.noise_multiplier: 2}}}\n")
    r = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    assert_one_line(r, 2, "suite, methods.centralized.set: dp.noise_multiplier: not read by method centralized")
    assert entries(tmp_path / "runs") == []
    # the suite-wide set concerns the methods that read it: dpdm here, not centralized
    suite.write_text(BASE + "set: {dp.noise_multiplier: 2}\n" + ONE)
    r = cli("bench", "--suite", suite, "--runs-dir", tmp_path / "runs")
    assert r.code == 0, r
