"""An accountant is one file: a plug-in GDP accountant (tests/privacy/plugins/gdp_accountant.py), loaded the
documented way (PRIVBENCH_PLUGINS), is listed, drives ``account dpsgd`` and a ``dpdm`` run, and the registry
refuses what is not an accountant."""
from __future__ import annotations

import json
import math
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PLUGINS = Path(__file__).resolve().parent / "plugins"


def _env(tmp_path):
    path = os.pathsep.join(filter(None, [str(PLUGINS), str(ROOT), os.environ.get("PYTHONPATH")]))
    return {**os.environ, "PYTHONPATH": path, "PRIVBENCH_PLUGINS": "gdp_accountant",
            "PRIVBENCH_HOME": str(tmp_path / "runs"), "PRIVBENCH_PROGRESS": "0"}


def _cli(args, env, cwd):
    return subprocess.run([sys.executable, "-m", "privbench", *args], capture_output=True, text=True, env=env,
                          cwd=cwd, timeout=900)


def test_a_plugin_accountant_drives_account_dpsgd_and_a_dpdm_run(tmp_path):
    env = _env(tmp_path)
    listed = _cli(["list", "accountants"], env, tmp_path)
    assert listed.returncode == 0 and "gdp" in listed.stdout, listed.stderr

    r = _cli(["account", "dpsgd", "--noise-multiplier", "1.0", "--sample-rate", "0.01", "--steps", "1000",
              "--accountant", "gdp", "--json"], env, tmp_path)
    assert r.returncode == 0, r.stderr
    out = json.loads(r.stdout)
    assert out["accountant"] == "gdp" and out["fallback"] is None and "GDP accountant" in out["basis"]
    from privbench.privacy.ldp import epsilon_analytic_gaussian

    # μ = q·√(T·(e^{1/σ²} − 1)), computed here (importing the plug-in would register it in this process)
    mu = 0.01 * math.sqrt(1000 * math.expm1(1.0))
    assert out["epsilon"] == pytest.approx(epsilon_analytic_gaussian(mu / 2, 1.0, 1e-5))
    prv = _cli(["account", "dpsgd", "--noise-multiplier", "1.0", "--sample-rate", "0.01", "--steps", "1000",
                "--json"], env, tmp_path)
    # the CLT is close to the tight accountant here (q·√T = 0.32): within 20 % of PRV, and not the same number
    assert out["epsilon"] == pytest.approx(json.loads(prv.stdout)["epsilon"], rel=0.2)
    assert out["epsilon"] != json.loads(prv.stdout)["epsilon"]

    # dp.accountant=gdp calibrates the dpdm run's noise with the plug-in
    run = _cli(["train", "--method", "dpdm", "--dataset", "digits", "--preset", "test", "--json",
                "--set", "dp.accountant=gdp"], env, tmp_path)
    assert run.returncode == 0, run.stderr[-2000:]
    run_dir = Path(json.loads(run.stdout)["run_dir"])
    privacy = json.loads((run_dir / "checkpoints" / "privacy-model.json").read_text())
    assert privacy["plan"]["accountant"] == "gdp" and privacy["accounting"]["accountant"] == "gdp"
    assert privacy["accounting"]["fallback"] is None and 9.9 <= privacy["accounting"]["epsilon"] <= 10.0


def test_an_ldp_accountant_is_refused_by_account_dpsgd_in_one_line(tmp_path):
    r = _cli(["account", "dpsgd", "--noise-multiplier", "1.0", "--sample-rate", "0.01", "--steps", "10",
              "--accountant", "ldp-analytic"], _env(tmp_path), tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    line = r.stderr.strip().splitlines()[-1]
    assert "gdp" in line and "prv" in line and "LDP accountant" in line, r.stderr


def test_dp_accountant_choices_come_from_the_registry(tmp_path):
    r = _cli(["train", "--method", "dpdm", "--dataset", "digits", "--preset", "test", "--set",
              "dp.accountant=nope"], _env(tmp_path), tmp_path)
    assert r.returncode == 2 and "Traceback" not in r.stderr
    assert "gdp" in r.stderr and "rdp" in r.stderr, r.stderr


def test_the_registry_refuses_a_class_that_is_not_an_accountant():
    from privbench.core.registry import ACCOUNTANTS, ATTACKS

    class NotAnAccountant:
        name, description, kind = "not-one", "x", "dpsgd"

    ACCOUNTANTS.names(), ATTACKS.names()  # the built-ins (and so the base classes) are loaded
    with pytest.raises(TypeError, match="must subclass"):
        ACCOUNTANTS.register_class(NotAnAccountant)
    with pytest.raises(TypeError, match="must subclass"):
        ATTACKS.register_class(NotAnAccountant)
    assert "not-one" not in ACCOUNTANTS.names() and "not-one" not in ATTACKS.names()


def test_account_ldp_reports_every_ldp_accountant_under_its_label():
    from privbench.privacy.accountants.base import ldp_accountants
    from privbench.privacy.ldp import account_ldp

    out = account_ldp(10.0, 690, 1e-5)
    assert list(out["epsilon"]) == [a.label for a in ldp_accountants()]
    assert {"paper_bound", "rdp", "analytic_gaussian"} <= set(out["epsilon"])
    assert out["epsilon"]["rdp"] == pytest.approx(out["epsilon"]["paper_bound"], rel=1e-9)
