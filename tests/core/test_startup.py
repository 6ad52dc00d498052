"""Start-up: the command line imports torch, diffusers and scikit-learn only where a command uses them, and
`privbench list` reads the registries from their source (docs/scaling.md §5)."""
from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
HEAVY = ("torch", "diffusers", "sklearn", "scipy", "opacus", "matplotlib")

PROBE = """
import json, sys
from click.testing import CliRunner
import privbench.cli
after_import = sorted(m for m in {heavy!r} if m in sys.modules)
runs = {{}}
for args in (["--version"], ["--help"], ["list"], ["list", "accountants"], ["list", "extractors", "--json"],
             ["list", "attacks", "--json"]):
    r = CliRunner().invoke(privbench.cli.main, args)
    runs[" ".join(args)] = [r.exit_code, sorted(m for m in {heavy!r} if m in sys.modules)]
print(json.dumps({{"after_import": after_import, "runs": runs}}))
"""


def _probe(env_extra: dict | None = None) -> dict:
    env = {k: v for k, v in os.environ.items() if k != "PRIVBENCH_PLUGINS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    env.update(env_extra or {})
    r = subprocess.run([sys.executable, "-c", PROBE.format(heavy=HEAVY)], capture_output=True, text=True, env=env,
                       timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout.strip().splitlines()[-1])


def test_cli_import_and_light_commands_do_not_import_heavy_modules():
    out = _probe()
    assert out["after_import"] == []
    for args, (code, loaded) in out["runs"].items():
        assert code == 0, args
        assert loaded == [], f"`privbench {args}` imported {loaded}"


def test_source_listing_equals_the_imported_registries():
    """In a fresh interpreter: a test that registers a plug-in in this process must not make the lists differ."""
    code = ("import json\n"
            "from privbench.core import registry\n"
            "from privbench.core.registry_source import builtin_listing\n"
            "static = builtin_listing(registry.BUILTIN_MODULES)\n"
            "flag = lambda n: bool(registry.entry_attribute('ATTACKS', n, 'text_conditioning', False))\n"
            "static_flags = {n: flag(n) for n, _ in static['ATTACKS']}\n"
            "registry.load_builtins()\n"
            "names = ('METHODS', 'ATTACKS', 'DATASETS', 'PRESETS', 'FEATURE_EXTRACTORS', 'ACCOUNTANTS')\n"
            "out = {v: [static[v], [[e.name, e.description] for e in getattr(registry, v)]] for v in names}\n"
            "out['text_conditioning'] = [static_flags, {e.name: bool(e.factory.text_conditioning) "
            "for e in registry.ATTACKS}]\n"
            "print(json.dumps(out))\n")
    env = {k: v for k, v in os.environ.items() if k != "PRIVBENCH_PLUGINS"}
    env["PYTHONPATH"] = str(ROOT) + os.pathsep + env.get("PYTHONPATH", "")
    r = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert r.returncode == 0, r.stderr[-2000:]
    out = json.loads(r.stdout.strip().splitlines()[-1])
    static_flags, imported_flags = out.pop("text_conditioning")
    assert static_flags == imported_flags  # `list attacks` marks [text] from the source too
    for var, (static, imported) in out.items():
        assert [list(e) for e in static] == imported, var
        assert static, var


def test_listing_falls_back_to_importing(monkeypatch):
    """A registration the source reader cannot evaluate (or a plug-in) makes `list` import the real modules."""
    from privbench.core import registry, registry_source

    def unresolvable(_builtins):
        raise registry_source.Unresolvable("dynamic")

    monkeypatch.setattr(registry, "_loaded", False)
    monkeypatch.setattr(registry, "_source_listing", None)
    monkeypatch.setattr(registry_source, "builtin_listing", unresolvable)
    got = registry.listing("ATTACKS")
    assert got == [(e.name, e.description) for e in registry.ATTACKS._entries.values()] and got


@pytest.mark.parametrize("code", ["@ATTACKS.register_class\nclass A:\n    name = 'a' + SUFFIX\n",
                                  "for n in NAMES:\n    METHODS.add(n, f, 'x')\n",
                                  "if X:\n    @DATASETS.register('d', 'x')\n    def f(): pass\n"])
def test_reader_refuses_a_registration_it_cannot_evaluate(code):
    from privbench.core.registry_source import Unresolvable, _Reader

    with pytest.raises(Unresolvable):
        _Reader().read(code, "privbench.plugin_like")


def test_reader_reads_the_literal_forms():
    from privbench.core.registry_source import _Reader

    r = _Reader()
    r.read('@ATTACKS.register_class\nclass A:\n    """Doc line.\n\n    more"""\n    name = "a"\n'
           'PRESETS.add("p", f, "a preset")\n@register_dataset("d", 1, 8, 10, "a dataset")\ndef load(): pass\n'
           'def later():\n    METHODS.add(name, f, desc)  # runs when called, not on import\n', "privbench.x")
    assert r.entries["ATTACKS"] == {"a": "Doc line."} and r.entries["PRESETS"] == {"p": "a preset"}
    assert r.entries["DATASETS"] == {"d": "a dataset"} and r.entries["METHODS"] == {}
