"""The docs in docs/ are the contract users read: no pointer leaves the repository, every cited page and section
exists, and every command, option and registered name of the CLI is documented."""
from __future__ import annotations

import os
import re
import subprocess
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

ROOT = Path(__file__).resolve().parents[1]
DOCS = ROOT / "docs"
TEXT_SUFFIXES = {".py", ".md", ".yaml", ".yml", ".html", ".txt", ".toml", ".cfg", ".ini"}

_SECS = r"§\d+(?:\.\d+)*(?:\s*(?:,|–|-|and)\s*§\d+(?:\.\d+)*)*"
# in code: docs/<page>.md, optionally followed by sections ("§4", "§4.6", "§1, §2", "§5–§6")
CODE_CITATION = re.compile(r"docs/([A-Za-z0-9_-]+)\.md((?:\s*" + _SECS + r")?)")
# inside docs/: "<page>.md §N" or a bare "§N" (a section of the same page)
DOCS_CITATION = re.compile(r"(?:([A-Za-z0-9_-]+)\.md\s*)?(" + _SECS + r")")
DOC_LINK = re.compile(r"\]\(([A-Za-z0-9_.-]+\.(?:md|yml))\)")
SECTION = re.compile(r"§(\d+(?:\.\d+)*)")
HEADING = re.compile(r"^#+\s+(\d+(?:\.\d+)*)\.?\s", re.MULTILINE)


def _text_files(*roots: Path) -> list[Path]:
    out = []
    for root in roots:
        if root.is_file():
            out.append(root)
            continue
        out += [p for p in sorted(root.rglob("*")) if p.is_file() and p.suffix in TEXT_SUFFIXES
                and "__pycache__" not in p.parts]
    return out


def _sections(page: Path) -> set[str]:
    return set(HEADING.findall(page.read_text()))


def _problems(where: str, page: str, secs: list[str]) -> list[str]:
    path = DOCS / f"{page}.md"
    if not path.is_file():
        return [f"{where}: cites docs/{page}.md, which does not exist"]
    missing = [s for s in secs if s not in _sections(path)]
    return [f"{where}: cites docs/{page}.md §{', §'.join(missing)}, not a numbered heading there"] if missing else []


def test_nothing_points_outside_the_repository():
    bad = []
    for f in _text_files(ROOT / "privbench", ROOT / "README.md", DOCS):
        text = f.read_text(errors="replace")
        for needle in ("shared/specs", "../shared"):
            if needle in text:
                bad.append(f"{f.relative_to(ROOT)}: mentions {needle!r}")
    assert not bad, "\n".join(bad)


def test_cited_docs_pages_and_sections_exist():
    files = _text_files(ROOT / "privbench", ROOT / "benchmarks", ROOT / "README.md", ROOT / "tests")
    files = [f for f in files if f.resolve() != Path(__file__).resolve()]
    bad, n = [], 0
    for f in files:
        for m in CODE_CITATION.finditer(f.read_text(errors="replace")):
            n += 1
            bad += _problems(str(f.relative_to(ROOT)), m.group(1), SECTION.findall(m.group(2)))
    assert n, "no docs/<page>.md citation found: the pattern no longer matches the code's citations"
    assert not bad, "\n".join(bad)


def test_links_and_sections_inside_docs_resolve():
    bad = []
    for f in _text_files(DOCS):
        text = f.read_text()
        for m in DOC_LINK.finditer(text):
            if not (DOCS / m.group(1)).is_file():
                bad.append(f"docs/{f.name}: links to {m.group(1)}, which does not exist")
        if f.suffix != ".md":
            continue
        for m in DOCS_CITATION.finditer(text):
            bad += _problems(f"docs/{f.name}", m.group(1) or f.stem, SECTION.findall(m.group(2)))
    assert not bad, "\n".join(bad)


def _commands(args: list[str]) -> list[str]:
    """Command names listed under 'Commands:' by ``privbench <args> --help``."""
    from privbench.cli import main

    res = CliRunner().invoke(main, [*args, "--help"])
    assert res.exit_code == 0, res.output
    body = res.output.split("Commands:", 1)
    if len(body) == 1:
        return []
    return [line.split()[0] for line in body[1].splitlines() if line.startswith("  ") and line.strip()]


def _all_commands() -> list[tuple[str, ...]]:
    out, todo = [], [()]
    while todo:
        path = todo.pop()
        for name in _commands(list(path)):
            sub = (*path, name)
            out.append(sub)
            todo.append(sub)
    return out


def test_every_command_is_documented_in_cli_md():
    text = (DOCS / "cli.md").read_text()
    commands = _all_commands()
    assert ("train",) in commands and ("account", "ldp") in commands  # the help parsing still works
    missing = [" ".join(c) for c in commands
               if not re.search(rf"privbench {re.escape(' '.join(c))}(?![\w-])", text)]
    assert not missing, f"docs/cli.md does not document: {', '.join(missing)}"


def test_every_option_is_documented_in_cli_md():
    import click

    from privbench.cli import main

    text = (DOCS / "cli.md").read_text()
    missing = []

    def walk(cmd: click.Command, path: str) -> None:
        for p in cmd.params:
            for opt in getattr(p, "opts", []):
                if opt.startswith("--") and opt != "--help" and not re.search(rf"{re.escape(opt)}(?![\w-])", text):
                    missing.append(f"{path} {opt}")
        for name, sub in getattr(cmd, "commands", {}).items():
            walk(sub, f"{path} {name}")

    walk(main, "privbench")
    assert not missing, f"docs/cli.md does not mention: {', '.join(missing)}"


@pytest.mark.parametrize("what, page", [("methods", "methods.md"), ("attacks", "attacks.md")])
def test_every_builtin_name_has_its_docs(what, page):
    # a fresh process: names registered by other tests in this one must not count
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    out = subprocess.run([sys.executable, "-m", "privbench.cli", "list", what], capture_output=True, text=True,
                         cwd=ROOT, env=env, check=True).stdout
    names = [line.split()[0] for line in out.splitlines() if line.strip()]
    assert names, f"privbench list {what} printed nothing"
    text = (DOCS / page).read_text()
    missing = [n for n in names if f"`{n}`" not in text]
    assert not missing, f"docs/{page} does not document: {', '.join(missing)}"
    if what == "attacks":  # each attack has a row in the threat-model table
        table = text.split("THREAT-MODEL TABLE", 1)[1].split("END THREAT-MODEL TABLE", 1)[0]
        rows = [line for line in table.splitlines() if line.startswith("| `")]
        no_row = [n for n in names if not any(f"`{n}`" in r.split("|")[1] for r in rows)]
        assert not no_row, f"docs/attacks.md §6 has no threat-model row for: {', '.join(no_row)}"


def _generator():
    import importlib.util

    spec = importlib.util.spec_from_file_location("docs_generate", DOCS / "generate.py")
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


def test_registry_lists_in_the_docs_are_generated_from_the_registries():
    """README.md, docs/cli.md and docs/registry.md list what the registries hold (`make docs` rewrites them)."""
    # a fresh process: entries registered by other tests in this one (plug-ins, user records) must not count
    env = {**os.environ, "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    r = subprocess.run([sys.executable, str(DOCS / "generate.py"), "--check"], capture_output=True, text=True,
                       cwd=ROOT, env=env)
    assert r.returncode == 0, r.stdout + r.stderr
    for page in ("README.md", "docs/cli.md"):
        assert "<!-- generated: registry-names -->" in (ROOT / page).read_text(), page
    # the registry's names from a fresh process too, for the same reason
    listing = subprocess.run(
        [sys.executable, "-c", "from privbench.core.registry import ACCOUNTANTS, ATTACKS, DATASETS, METHODS\n"
         "for r in (METHODS, ATTACKS, DATASETS, ACCOUNTANTS): print(*r.names())"],
        capture_output=True, text=True, cwd=ROOT, env=env, check=True).stdout.split()
    text = (ROOT / "README.md").read_text()
    assert listing and [n for n in listing if f"`{n}`" not in text] == []
    page = (DOCS / "registry.md").read_text()
    from privbench.core.config import all_keys

    assert all(f"| `{k}` |" in page for k, *_ in all_keys())


def test_a_stale_registry_block_is_caught():
    gen = _generator()
    block = "<!-- generated: registry-names -->\n- attacks (6): `loss`\n<!-- end generated: registry-names -->\n"
    assert gen.render_blocks(block) != block and "`gsa`" in gen.render_blocks(block)
    fresh = gen.render_blocks(block)
    assert gen.render_blocks(fresh) == fresh


def test_every_public_function_of_privbench_has_a_section_in_api_md():
    import inspect

    import privbench

    public = [n for n, f in vars(privbench).items() if inspect.isfunction(f) and not n.startswith("_")]
    assert {"load_dataset", "load_target", "wrap", "attack"} <= set(public)
    headings = [line for line in (DOCS / "api.md").read_text().splitlines() if line.startswith("## ")]
    missing = [n for n in public if not any(f"privbench.{n}(" in h for h in headings)]
    assert not missing, f"docs/api.md has no section for: {', '.join(missing)}"


#: a fenced block that shows what privbench printed: a command transcript, a result table, a gate or shift verdict
OUTPUT_BLOCK = re.compile(r"^(?:\$ privbench |target +attack +AUC|BREACH: |SHIFT: |privbench: error: )", re.M)


def _unmarked_output_blocks(gen, text: str) -> list[str]:
    covered = {m.end(1) - len("```text\n") for m in gen.SAMPLE.finditer(text)}
    covered |= {m.end(1) - len("```text\n") for m in gen.TRANSCRIPT.finditer(text)}
    out = []
    for m in re.finditer(r"^```\w*\n(.*?)^```", text, re.S | re.M):
        if OUTPUT_BLOCK.search(m.group(1)) and m.start() not in covered:
            out.append(m.group(1).splitlines()[0])
    return out


def test_every_sample_output_in_the_docs_is_generated():
    """A block showing privbench's output is a `<!-- sample: … -->` or `<!-- transcript: … -->` block, which
    `make docs` (docs/generate.py --samples) reruns, so no hand-kept output goes stale."""
    gen = _generator()
    bad = []
    for f in gen.doc_files():
        name = str(f.relative_to(ROOT))
        for first in _unmarked_output_blocks(gen, f.read_text()):
            bad.append(f"{name}: a hand-written output block starting {first[:90]!r}")
        for m in gen.TRANSCRIPT.finditer(f.read_text()):
            if m.group(2) not in gen.SCENARIOS:
                bad.append(f"{name}: transcript scenario {m.group(2)!r} is not in docs/generate.py's SCENARIOS")
    assert not bad, "\n".join(bad) + "\n(mark them as transcripts and run `make docs`)"


def test_a_hand_written_output_block_is_caught_and_a_transcript_is_rendered(tmp_path, monkeypatch):
    gen = _generator()
    stale = "Text.\n\n```text\n$ privbench attack --model m --attack pia\ntarget  attack  AUC\n```\n"
    assert _unmarked_output_blocks(gen, stale) == ["$ privbench attack --model m --attack pia"]
    monkeypatch.setitem(gen.SCENARIOS, "versions", lambda _folder: {"word": "--version"})
    doc = "<!-- transcript: versions\n$ privbench {word}\n-->\n```text\nold output\n```\n"
    assert _unmarked_output_blocks(gen, doc) == []
    out = gen.render_transcripts(doc, tmp_path)
    assert "old output" not in out and "$ privbench --version\nprivbench, version " in out


def test_the_github_actions_examples_pin_torch_as_the_makefile_does():
    pin = re.search(r"^TORCH\s*:=\s*(.+)$", (ROOT / "Makefile").read_text(), re.M).group(1).split()
    assert pin and all("==" in p for p in pin)
    for example in sorted(DOCS.glob("github-actions-*.yml")):
        installs = [line for line in example.read_text().splitlines() if re.search(r"pip install .*\btorch\b", line)]
        assert installs, example.name
        assert all(all(p in line for p in pin) for line in installs), f"{example.name}: {installs} (pin: {pin})"
    assert all(p in (ROOT / "README.md").read_text() for p in pin)


def test_docs_api_md_lists_every_exported_name():
    """Every name in ``privbench.__all__`` (functions, the plug-in base classes and registries, ``__version__``)
    appears in docs/api.md as code, and the workflow functions are exported."""
    import privbench

    page = (DOCS / "api.md").read_text()
    assert {"audit", "report", "check", "bench", "account"} <= set(privbench.__all__)
    missing = [n for n in privbench.__all__ if f"`{n}" not in page and f"privbench.{n}" not in page]
    assert not missing, f"docs/api.md does not mention: {', '.join(missing)}"
