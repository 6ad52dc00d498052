"""The architecture: import layers (import-linter), no private names across packages, and the
registries as the only source of method and attack names."""
from __future__ import annotations

import ast
import io
import re
import subprocess
import sys
import tokenize
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PKG = ROOT / "privbench"

#: the few places that spell a registered name for another reason, each with that reason
NAME_LITERAL_EXCEPTIONS = {
    # the vocabulary of result kinds (membership | memorization | reconstruction) shares two words with attacks
    ("privbench/attacks/base.py", "memorization"), ("privbench/attacks/base.py", "reconstruction"),
    # the same vocabulary readable without importing the attacks (reports, audit and gates stay torch-free)
    ("privbench/core/constants.py", "memorization"), ("privbench/core/constants.py", "reconstruction"),
    # the config hash holds the client split's keys inside the pfdm mapping (register_section(hashed_under="pfdm"))
    ("privbench/data/splits.py", "pfdm"),
    # reconstruction inverts PFDM's uploads: it reads PFDM's own settings pfdm.t0 and pfdm.clip from its section
    ("privbench/attacks/reconstruction.py", "pfdm"),
    # the public Python API's documented default attack: privbench.attack(target, members, nonmembers, attack="pia")
    ("privbench/__init__.py", "pia"),
    # the training loss statistic of the training loop's steps (plain, DP-SGD) shares its word with the loss attack
    ("privbench/models/dp_sgd.py", "loss"), ("privbench/models/methods/dpsad.py", "loss"),
    ("privbench/models/training.py", "loss"),
    # the bench executor `--executor local` (the cells in this process, vs ray) shares its word with the method local
    ("privbench/bench/runner.py", "local"), ("privbench/bench/executor_options.py", "local"),
    ("privbench/cli_options.py", "local"), ("privbench/api.py", "local"),
    # attack.statistic names the attack whose distance lira/rmia/qmia calibrate; its default "loss" is LiRA's own
    # fixed-noise loss statistic, not the loss attack (``sima`` is the stronger one: docs/attacks.md §13)
    ("privbench/attacks/references.py", "loss"), ("privbench/attacks/qmia.py", "loss"),
    ("privbench/attacks/statistics.py", "loss"),
    # infer-dataset's default per-record statistics (docs/attacks.md §12)
    ("privbench/runs/dataset_inference.py", "loss"), ("privbench/runs/dataset_inference.py", "pia"),
    ("privbench/runs/dataset_inference.py", "sima"),
    # the shipped attack contract check builds its config (attack settings, schedule) from the plain baseline's
    # test preset
    ("privbench/testing/contracts.py", "centralized"),
    # the same executor (--jobs N) and submitit's local cluster (--slurm-cluster local)
    ("privbench/bench/pool_executor.py", "local"), ("privbench/bench/slurm_executor.py", "local"),
}


def _modules():
    for p in sorted(PKG.rglob("*.py")):
        yield p, ast.parse(p.read_text(), filename=str(p))


def _package_of(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts  # ("privbench", "core", "io")
    return ".".join(parts[:2]) if len(parts) > 2 else parts[0]


def _resolve(path: Path, node: ast.ImportFrom) -> str:
    if node.level == 0:
        return node.module or ""
    parts = list(path.relative_to(ROOT).with_suffix("").parts)
    base = parts[:-node.level] if path.name != "__init__.py" else parts[:len(parts) - node.level]
    if path.name == "__init__.py":
        base = parts[:-1][:len(parts) - node.level]
    return ".".join(base + ([node.module] if node.module else []))


def test_import_linter_layers_hold():
    exe = Path(sys.executable).parent / "lint-imports"
    if not exe.exists():
        pytest.skip("import-linter is not installed (pip install 'privbench[test]')")
    r = subprocess.run([str(exe)], cwd=ROOT, capture_output=True, text=True)
    assert r.returncode == 0, r.stdout[-3000:]


def test_no_private_name_is_imported_from_another_package():
    bad = []
    for path, tree in _modules():
        mine = _package_of(path)
        for node in ast.walk(tree):
            if isinstance(node, ast.ImportFrom):
                src = _resolve(path, node)
                if not src.startswith("privbench"):
                    continue
                theirs = ".".join(src.split(".")[:2])
                for alias in node.names:
                    if alias.name.startswith("_") and not alias.name.startswith("__") and theirs != mine:
                        bad.append(f"{path.relative_to(ROOT)}:{node.lineno} imports {alias.name} from {src}")
    assert not bad, "\n".join(bad)


#: a comment that is only a linter directive gives no reason
_DIRECTIVE = re.compile(r"#\s*(noqa(:\s*[A-Z]+[0-9]+(\s*,\s*[A-Z]+[0-9]+)*)?|type:\s*ignore(\[[^\]]*\])?|pragma:.*)\s*")


def _reasons(source: str) -> dict[int, bool]:
    """Line number → True for a line that is only a comment, False for code with a trailing comment (linter
    directives alone do not count)."""
    out = {}
    for tok in tokenize.generate_tokens(io.StringIO(source).readline):
        if tok.type == tokenize.COMMENT and not _DIRECTIVE.fullmatch(tok.string.strip()):
            out[tok.start[0]] = tok.line[:tok.start[1]].strip() == ""
    return out


def _function_level_imports(tree: ast.AST):
    """(import, first import of its block) for every import statement inside a function; a block is a run of
    consecutive import statements in one body (blank lines between them allowed)."""

    def walk(node: ast.AST, in_function: bool):
        for _field, value in ast.iter_fields(node):
            first = None
            for child in value if isinstance(value, list) else [value]:
                if not isinstance(child, ast.AST):
                    continue
                if isinstance(child, (ast.Import, ast.ImportFrom)):
                    first = first or child
                    if in_function:
                        yield child, first
                else:
                    first = None
                yield from walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    yield from walk(tree, False)


def _imports_without_reason(source: str, filename: str = "<string>") -> list[ast.stmt]:
    """The function-level imports of ``source`` with no comment on their own line(s), on the line directly above,
    or directly above the block of consecutive imports they belong to."""
    comments = _reasons(source)
    return [node for node, first in _function_level_imports(ast.parse(source, filename=filename))
            if not any(line in comments for line in range(node.lineno, node.end_lineno + 1))
            and comments.get(node.lineno - 1) is not True and comments.get(first.lineno - 1) is not True]


@pytest.mark.parametrize("source, unexplained", [
    ("import os\ndef f():\n    import torch\n", ["import torch"]),
    ("def f():\n    import torch  # lazy: torch\n", []),
    ("def f():\n    # lazy: torch and sklearn\n    import torch\n\n    import sklearn\n    x = 1\n    import os\n",
     ["import os"]),
    ("def f():\n    x = 1  # a comment about x\n    import torch\n", ["import torch"]),
    ("def f():\n    import torch  # noqa: F401\n", ["import torch"]),
    ("class A:\n    def f(self):\n        if x:\n            from a import (b,  # lazy: b\n                c)\n", []),
    ("class A:\n    import os\n", []),
])
def test_the_reason_check_reads_comments_as_documented(source, unexplained):
    assert [ast.unparse(n) for n in _imports_without_reason(source)] == unexplained


def test_function_level_imports_say_why():
    """An import inside a function (lazy: torch, diffusers, sklearn, an optional extra, a name tests patch, ...)
    carries its reason in a comment: on its own line(s), on the line directly above, or directly above the block of
    consecutive imports it belongs to. Anything that need not be lazy is imported at the top of its module."""
    bad = [f"{path.relative_to(ROOT)}:{node.lineno} {ast.unparse(node)}"
           for path in sorted(PKG.rglob("*.py"))
           for node in _imports_without_reason(path.read_text(), str(path))]
    assert not bad, ("function-level imports without a reason (import them at the top of the module, or say in a "
                     "comment why they are lazy):\n" + "\n".join(bad))


def _registered():
    from privbench.core.registry import ATTACKS, METHODS

    out = {}
    for reg in (METHODS, ATTACKS):
        for e in reg:
            mod = sys.modules[e.factory.__module__].__file__
            out[e.name] = Path(mod).resolve()
    return out


def test_method_and_attack_names_live_in_their_own_module_only():
    """A string equal to a method or attack name appears only in the module that registers it."""
    names = _registered()
    bad = []
    for path, tree in _modules():
        rel = str(path.relative_to(ROOT))
        for node in ast.walk(tree):
            if isinstance(node, ast.Constant) and isinstance(node.value, str) and node.value in names:
                if path.resolve() == names[node.value] or (rel, node.value) in NAME_LITERAL_EXCEPTIONS:
                    continue
                bad.append(f"{rel}:{node.lineno} spells {node.value!r} (registered in "
                           f"{names[node.value].relative_to(ROOT)})")
    assert not bad, "\n".join(bad)


def _calls(tree: ast.AST):
    for node in ast.walk(tree):
        if isinstance(node, ast.Call):
            yield node


def test_the_library_logs_and_leaves_the_process_alone():
    """Only the CLI talks to the terminal: no ``print(`` in the library (it logs on ``privbench.*``), no
    ``contextlib.redirect_stderr/stdout``, and the process environment is written only by core/threads.py (OpenMP
    reads it when torch loads; docs/scaling.md §1)."""
    found = []
    for path in sorted(PKG.rglob("*.py")):
        rel = path.relative_to(ROOT).as_posix()
        tree = ast.parse(path.read_text(), rel)
        for call in _calls(tree):
            f = call.func
            name = f.id if isinstance(f, ast.Name) else f.attr if isinstance(f, ast.Attribute) else ""
            if name == "print" and isinstance(f, ast.Name) and rel != "privbench/cli.py":
                found.append(f"{rel}:{call.lineno} print(")
            if name in ("redirect_stderr", "redirect_stdout"):
                found.append(f"{rel}:{call.lineno} {name}")
        if rel == "privbench/core/threads.py":
            continue
        for node in ast.walk(tree):
            targets = node.targets if isinstance(node, ast.Assign) else [node.target] \
                if isinstance(node, (ast.AugAssign, ast.AnnAssign)) else []
            for t in targets:
                if isinstance(t, ast.Subscript) and ast.unparse(t.value) == "os.environ":
                    found.append(f"{rel}:{node.lineno} os.environ[...] =")
            if isinstance(node, ast.Call) and ast.unparse(node.func) in (
                    "os.environ.update", "os.environ.setdefault", "os.putenv", "os.environ.pop"):
                found.append(f"{rel}:{node.lineno} {ast.unparse(node.func)}")
    assert found == []


def test_no_import_cycles_between_modules():
    """No two modules of privbench import each other, directly or through others — function-level imports
    included (grimp sees them; the layers contract alone does not catch a cycle inside one layer)."""
    import grimp

    graph = grimp.build_graph("privbench")
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    cycles: list[list[str]] = []

    def visit(v: str) -> None:  # Tarjan's strongly connected components
        index[v] = low[v] = len(index)
        stack.append(v)
        on_stack.add(v)
        for w in graph.find_modules_directly_imported_by(v):
            if w not in index:
                visit(w)
                low[v] = min(low[v], low[w])
            elif w in on_stack:
                low[v] = min(low[v], index[w])
        if low[v] == index[v]:
            comp = []
            while True:
                w = stack.pop()
                on_stack.discard(w)
                comp.append(w)
                if w == v:
                    break
            if len(comp) > 1:
                cycles.append(sorted(comp))

    for m in sorted(graph.modules):
        if m not in index:
            visit(m)
    assert cycles == []
