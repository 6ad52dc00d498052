"""The built-in registry entries' names and descriptions, read from their source files without importing them.

Importing the registering modules loads torch, diffusers and scikit-learn; their registrations are literal by
convention (docs/architecture.md §2), so :mod:`ast` reads them, visiting modules in Python's import order (a module's
top-level privbench imports first, packages before their modules, then :data:`privbench.builtins.MODULES`). Anything
else that touches a registry at import time raises :class:`Unresolvable`, and the caller imports the real modules;
``tests/core/test_registry_source.py`` checks that this listing equals the imported registries.
"""
from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]  # the privbench package
KINDS = {"METHODS": "method", "ATTACKS": "attack", "DATASETS": "dataset", "PRESETS": "preset",
         "FEATURE_EXTRACTORS": "feature extractor", "ACCOUNTANTS": "accountant"}
_REGISTRY_CALLS = {"register", "register_class", "add"}


class Unresolvable(Exception):
    """A registration this reader cannot evaluate without importing the module."""


def _file_of(module: str) -> Path | None:
    parts = module.split(".")[1:]
    base = ROOT.joinpath(*parts)
    if (base / "__init__.py").is_file():
        return base / "__init__.py"
    py = base.with_suffix(".py")
    return py if py.is_file() else None


def _literal(node, what: str):
    try:
        return ast.literal_eval(node)
    except ValueError:
        raise Unresolvable(what) from None


def _doc_line(cls: ast.ClassDef) -> str:
    return (ast.get_docstring(cls, clean=False) or "").strip().split("\n")[0]


#: text that may register an entry; a module without it is read for its imports only
_MARKER = re.compile(r"\b(?:" + "|".join(KINDS) + r")\b|register_dataset")
#: a top-level class statement (column 0) and its name
_CLASS = re.compile(r"^class[ \t]+(\w+)", re.M)
#: a top-level import statement (column 0), parenthesised names included
_IMPORT = re.compile(r"^(?:from[ \t]+[\w.]+[ \t]+import[ \t]*(?:\([^)]*\)|[^\n]*)|import[ \t]+[^\n]*)", re.M)


def _top_level_imports(text: str) -> list:
    """The module's column-0 import statements as ast nodes, in order (without parsing the whole file)."""
    out = []
    for m in _IMPORT.finditer(text):
        try:
            out.extend(ast.parse(m.group(0).split("#")[0] if "(" not in m.group(0) else m.group(0)).body)
        except SyntaxError:  # e.g. a line inside a multi-line string that starts with "import"
            raise Unresolvable(m.group(0)[:80]) from None
    return out


def _import_time_nodes(tree):
    """Every node that runs when the module is imported: not function bodies, but their decorators and defaults."""
    stack = [tree]
    while stack:
        node = stack.pop()
        yield node
        if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
            stack.extend(node.decorator_list)
            stack.extend(d for d in node.args.defaults + node.args.kw_defaults if d is not None)
        elif not isinstance(node, ast.Lambda):
            stack.extend(ast.iter_child_nodes(node))


#: a class-body attribute whose value is not a literal (a method, a property, an expression)
_NOT_LITERAL = object()


class _Reader:
    def __init__(self):
        self.visited: set[str] = set()
        self.entries: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        #: every top-level class of the modules read: name → [(literal class-body attributes, base names)]
        self.classes: dict[str, list[tuple[dict, list]]] = {}
        #: registry variable → entry name → the name of the class registered under it
        self.class_of: dict[str, dict[str, str]] = {kind: {} for kind in KINDS}
        #: class name → the modules read for their imports only that define it (parsed when :func:`_find` asks)
        self.deferred: dict[str, list[str]] = {}
        self.parsed: set[str] = set()

    def add(self, reg: str, name, description, where: str) -> None:
        if not isinstance(name, str) or not isinstance(description, str):
            raise Unresolvable(where)
        self.entries[reg][name] = description  # re-registration keeps the first position, as Registry.add does

    def visit(self, module: str) -> None:
        if module in self.visited or not module.startswith("privbench"):
            return
        self.visited.add(module)
        if "." in module:
            self.visit(module.rsplit(".", 1)[0])  # the parent package runs first
        path = _file_of(module)
        if path is None:
            return
        self.read(path.read_text(encoding="utf-8"), module, path.name == "__init__.py")

    def read(self, text: str, module: str, is_pkg: bool = False) -> None:
        """Record the registrations of one module's source (its privbench imports first, as Python runs them)."""
        if not _MARKER.search(text):  # registers nothing: only its imports matter (parsing is the slow part)
            for node in _top_level_imports(text):
                for target in self._imports(node, module, is_pkg):
                    self.visit(target)
            for name in _CLASS.findall(text):
                self.deferred.setdefault(name, []).append(module)
            return
        self.parsed.add(module)
        tree = ast.parse(text, module)
        handled: set[int] = set()
        for node in tree.body:
            for target in self._imports(node, module, is_pkg):
                self.visit(target)
            handled |= self._registration(node, module)
            if isinstance(node, ast.ClassDef):
                self.classes.setdefault(node.name, []).append(_class_attributes(node))
        for node in _import_time_nodes(tree):  # a registry touched anywhere else on import (a loop, a condition)
            if isinstance(node, ast.Attribute) and node.attr in _REGISTRY_CALLS and \
                    isinstance(node.value, ast.Name) and node.value.id in KINDS and id(node) not in handled:
                raise Unresolvable(f"{module}: {node.value.id}.{node.attr} at line {node.lineno}")

    def class_defs(self, cls: str) -> list[tuple[dict, list]] | None:
        """The definitions of class ``cls`` in the modules read, parsing those read for their imports only that
        define it (each module once)."""
        for module in self.deferred.pop(cls, ()):
            if module in self.parsed:
                continue
            self.parsed.add(module)
            path = _file_of(module)
            tree = ast.parse(path.read_text(encoding="utf-8"), module)
            for node in tree.body:
                if isinstance(node, ast.ClassDef):
                    self.classes.setdefault(node.name, []).append(_class_attributes(node))
        return self.classes.get(cls)

    @staticmethod
    def _imports(node, module: str, is_pkg: bool) -> list[str]:
        if isinstance(node, ast.Import):
            return [a.name for a in node.names]
        if not isinstance(node, ast.ImportFrom):
            return []
        if node.level:
            pkg = module if is_pkg else module.rsplit(".", 1)[0]
            for _ in range(node.level - 1):
                pkg = pkg.rsplit(".", 1)[0]
            base = f"{pkg}.{node.module}" if node.module else pkg
        else:
            base = node.module or ""
        # ``from pkg import name``: name may be a submodule, imported after pkg
        return [base] + [f"{base}.{a.name}" for a in node.names if _file_of(f"{base}.{a.name}") is not None]

    def _registration(self, node, module: str) -> set[int]:
        """Record the registrations of one top-level statement; the ids of the registry attributes it used."""
        used: set[int] = set()
        where = f"{module}:{getattr(node, 'lineno', '?')}"
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Call):
            f = node.value.func
            if isinstance(f, ast.Attribute) and f.attr == "add" and isinstance(f.value, ast.Name) \
                    and f.value.id in KINDS:
                args = node.value.args
                if len(args) != 3 or node.value.keywords:
                    raise Unresolvable(where)
                self.add(f.value.id, _literal(args[0], where), _literal(args[2], where), where)
                used.add(id(f))
        if isinstance(node, (ast.ClassDef, ast.FunctionDef)):
            for deco in node.decorator_list:
                used |= self._decorator(deco, node, where)
        return used

    def _decorator(self, deco, node, where: str) -> set[int]:
        if isinstance(deco, ast.Attribute) and deco.attr == "register_class" and isinstance(deco.value, ast.Name) \
                and deco.value.id in KINDS:
            if not isinstance(node, ast.ClassDef):
                raise Unresolvable(where)
            attrs = {t.id: stmt.value for stmt in node.body if isinstance(stmt, ast.Assign)
                     for t in stmt.targets if isinstance(t, ast.Name)}
            if "name" not in attrs:
                raise Unresolvable(f"{where}: name not set in the class body")
            desc = _literal(attrs["description"], where) if "description" in attrs else ""
            self.add(deco.value.id, _literal(attrs["name"], where), desc or _doc_line(node), where)
            self.class_of[deco.value.id][_literal(attrs["name"], where)] = node.name
            return {id(deco)}
        if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Attribute) and deco.func.attr == "register" \
                and isinstance(deco.func.value, ast.Name) and deco.func.value.id in KINDS:
            if len(deco.args) != 2 or deco.keywords:
                raise Unresolvable(where)
            self.add(deco.func.value.id, _literal(deco.args[0], where), _literal(deco.args[1], where), where)
            return {id(deco.func)}
        if isinstance(deco, ast.Call) and isinstance(deco.func, ast.Name) and deco.func.id == "register_dataset":
            # keywords (extractor_per_class) do not change the name or the description
            if len(deco.args) != 5 or any(k.arg is None for k in deco.keywords):
                raise Unresolvable(where)
            self.add("DATASETS", _literal(deco.args[0], where), _literal(deco.args[4], where), where)
        return set()


def _class_attributes(node: ast.ClassDef) -> tuple[dict, list]:
    """A class's body attributes (literal values; anything else :data:`_NOT_LITERAL`) and its bases' names (None
    for a base that is not a plain name)."""
    attrs: dict = {}
    for stmt in node.body:
        targets = stmt.targets if isinstance(stmt, ast.Assign) else [stmt.target] if isinstance(
            stmt, ast.AnnAssign) and stmt.value is not None else []
        for t in targets:
            if isinstance(t, ast.Name):
                try:
                    attrs[t.id] = ast.literal_eval(stmt.value)
                except ValueError:
                    attrs[t.id] = _NOT_LITERAL
        if isinstance(stmt, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
            attrs[stmt.name] = _NOT_LITERAL
    return attrs, [b.id if isinstance(b, ast.Name) else None for b in node.bases]


def _find(reader: _Reader, cls: str, attr: str, depth: int = 0) -> tuple[str, object]:
    """(the class that sets ``attr``, its value) for class ``cls``: its body, then its bases' (depth first, left to
    right); KeyError when none sets it, :class:`Unresolvable` when the source does not say."""
    defs = reader.class_defs(cls)
    if not defs or len(defs) > 1 or depth > 20:
        raise Unresolvable(f"class {cls}")
    attrs, bases = defs[0]
    if attr in attrs:
        return cls, attrs[attr]
    for base in bases:
        if base == "object":
            continue
        try:
            return _find(reader, base, attr, depth + 1)
        except KeyError:
            continue
    raise KeyError(attr)


def _registered_class(reader: _Reader, var: str, name: str) -> str:
    cls = reader.class_of[var].get(name)
    if cls is None:
        raise Unresolvable(f"{var} {name!r}: not a registered class")
    return cls


def class_attribute(reader: _Reader, var: str, name: str, attr: str):
    """The literal value of ``attr`` on the class registered as ``name`` in registry ``var`` (set in its body or
    a base's); :class:`Unresolvable` when the source does not say it."""
    cls = _registered_class(reader, var, name)
    try:
        where, value = _find(reader, cls, attr)
    except KeyError:
        raise Unresolvable(f"{cls}.{attr}: not set in its classes") from None
    if value is _NOT_LITERAL:
        raise Unresolvable(f"{where}.{attr}")
    return value


def attribute_owner(reader: _Reader, var: str, name: str, attr: str) -> str:
    """The name of the class that defines ``attr`` (a value or a method) for the class registered as ``name``."""
    cls = _registered_class(reader, var, name)
    try:
        return _find(reader, cls, attr)[0]
    except KeyError:
        raise Unresolvable(f"{cls}.{attr}: not set in its classes") from None


def _walk(module: str):
    """``module`` and, for a package, every module in it, in registry._import_all's order."""
    yield module
    path = _file_of(module)
    if path is not None and path.name == "__init__.py":
        for child in sorted(p.stem if p.suffix == ".py" else p.name for p in path.parent.iterdir()
                            if (p.suffix == ".py" and p.stem != "__init__") or (p / "__init__.py").is_file()):
            if not child.startswith("_"):
                yield from _walk(f"{module}.{child}")


def read_builtins(builtins: tuple[str, ...]) -> _Reader:
    """The reader of the built-in modules' sources; raises :class:`Unresolvable` (or SyntaxError/OSError) when
    the source cannot be read statically."""
    reader = _Reader()
    for name in builtins:
        for module in _walk(name):
            reader.visit(module)
    return reader


def builtin_listing(builtins: tuple[str, ...]) -> dict[str, list[tuple[str, str]]]:
    """{registry variable name: [(name, description)] in registration order} of the built-in modules; raises as
    :func:`read_builtins`."""
    return {reg: list(entries.items()) for reg, entries in read_builtins(builtins).entries.items()}
