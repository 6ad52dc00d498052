"""Registries: the only place where the names of methods, attacks, datasets, accountants, presets, feature
extractors and config sections live.

:func:`load_builtins` imports the built-in entries through the loader :mod:`privbench.builtins` installs (core names
no upper layer), then the plug-ins (docs/architecture.md §2).
"""
from __future__ import annotations

import importlib
import logging
import os
from dataclasses import dataclass
from typing import Any, Callable, Generic, Iterator, Optional, TypeVar

from .errors import BadInput

LOG = logging.getLogger(__name__)


T = TypeVar("T")


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Any
    description: str


class Registry(Generic[T]):
    """Names → entries of one kind. ``require_base`` (called by the layer that defines the kind's base class, so
    core imports nothing above it) makes registration refuse a class that does not derive from it."""

    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}
        self._base: Optional[type] = None

    def require_base(self, base: type) -> None:
        """Every class registered from now on (and every one already registered) must subclass ``base``."""
        self._base = base
        for e in self._entries.values():
            self._check_type(e.name, e.factory)

    def _check_type(self, name: str, factory: Any) -> None:
        if self._base is not None and isinstance(factory, type) and not issubclass(factory, self._base):
            raise TypeError(f"{self.kind} {name!r}: {_where(factory)} must subclass {_where(self._base)}")

    def register(self, name: str, description: str) -> Callable:
        """Decorator: ``@DATASETS.register("digits", "one line")``."""

        def deco(factory: Callable) -> Callable:
            self.add(name, factory, description)
            return factory

        return deco

    def register_class(self, cls):
        """Class decorator: the class's ``name`` and ``description`` attributes name the entry."""
        self.add(cls.name, cls, getattr(cls, "description", "") or (cls.__doc__ or "").strip().split("\n")[0])
        return cls

    def add(self, name: str, factory: Any, description: str) -> None:
        self._check_type(name, factory)
        if self._base is not None and not isinstance(factory, type):
            raise TypeError(f"{self.kind} {name!r}: register a subclass of {_where(self._base)}, not "
                            f"{type(factory).__name__}")
        old = self._entries.get(name)
        if old is not None:
            if _same(old.factory, factory):  # the same module imported twice (e.g. importlib.reload)
                self._entries[name] = Entry(name, factory, description)
                return
            raise ValueError(f"{self.kind} {name!r} registered twice ({_where(old.factory)} and {_where(factory)})")
        self._entries[name] = Entry(name, factory, description)

    def get(self, name: str) -> Entry:
        load_builtins()
        if name not in self._entries:
            raise BadInput(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        return self._entries[name]

    def create(self, name: str, *args, **kwargs) -> Any:
        return self.get(name).factory(*args, **kwargs)

    def names(self) -> list[str]:
        load_builtins()
        return list(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        load_builtins()
        return iter(list(self._entries.values()))

    def __contains__(self, name: str) -> bool:
        load_builtins()
        return name in self._entries


def _where(obj) -> str:
    return f"{getattr(obj, '__module__', '?')}.{getattr(obj, '__qualname__', type(obj).__name__)}"


def _same(a, b) -> bool:
    return a is b or _where(a) == _where(b)


METHODS = Registry("method")
ATTACKS = Registry("attack")
DATASETS = Registry("dataset")
PRESETS = Registry("preset")
FEATURE_EXTRACTORS = Registry("feature extractor")
ACCOUNTANTS = Registry("accountant")

PLUGIN_GROUPS = {"privbench.attacks": ATTACKS, "privbench.methods": METHODS, "privbench.datasets": DATASETS,
                 "privbench.accountants": ACCOUNTANTS}

_loaded = False
_source_listing: dict | None = None  # registry_source's reading, once per process
_source_reader: Any = None  # registry_source's reader of the built-ins (class attributes), once per process
#: the built-ins' loader and the modules it imports, handed over by privbench/__init__.py
_builtin_loader: Callable[[], None] | None = None
BUILTIN_MODULES: tuple[str, ...] = ()


def install_builtins(loader: Callable[[], None], modules: tuple[str, ...]) -> None:
    """Set what :func:`load_builtins` calls and which modules :func:`listing` may read without importing."""
    global _builtin_loader, BUILTIN_MODULES
    _builtin_loader, BUILTIN_MODULES = loader, tuple(modules)


def load_builtins() -> None:
    """Import the built-in entries, then plug-ins (once, lazily)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    if _builtin_loader is not None:
        _builtin_loader()
    _load_plugins()


def plugins_declared() -> bool:
    """Whether a plug-in is declared: an entry point of a privbench group, or ``$PRIVBENCH_PLUGINS``."""
    from importlib.metadata import entry_points  # lazy: not needed by --help/--version (docs/scaling.md §5)

    if os.environ.get("PRIVBENCH_PLUGINS", "").strip():
        return True
    eps = entry_points()  # one scan of the installed distributions' metadata (a scan per group costs 4×)
    return any(True for group in PLUGIN_GROUPS for _ in eps.select(group=group))


def listing(var: str) -> list[tuple[str, str]]:
    """(name, description) of every entry of the registry named ``var`` (``"ATTACKS"``, …), in registration order:
    read from the source (:mod:`.registry_source`) without plug-ins and before the built-ins are imported, where it
    can be; otherwise from the imported registry."""
    global _source_listing
    reg = globals()[var]
    if not _loaded and (_source_listing is not None or not plugins_declared()):
        # lazy: looked up per call (tests/core/test_startup.py patches builtin_listing); only `list` needs it
        from .registry_source import Unresolvable, builtin_listing

        try:
            if _source_listing is None:
                _source_listing = builtin_listing(BUILTIN_MODULES)
            return _source_listing[var]
        except (Unresolvable, SyntaxError, OSError, UnicodeDecodeError):
            pass
    return [(e.name, e.description) for e in reg]


def _static_reader():
    """registry_source's reader of the built-ins while nothing imported them and no plug-in is declared (None
    otherwise, or when their source cannot be read statically)."""
    global _source_reader
    if _loaded or (_source_reader is None and plugins_declared()):
        return None
    if _source_reader is None:
        # lazy: only the light commands (report, audit, check) read the sources
        from .registry_source import Unresolvable, read_builtins

        try:
            _source_reader = read_builtins(BUILTIN_MODULES)
        except (Unresolvable, SyntaxError, OSError, UnicodeDecodeError):
            _source_reader = False
    return _source_reader or None


def has_entry(var: str, name: str) -> bool:
    """``name in REGISTRY`` for the registry named ``var``; before the built-ins are imported (and without
    plug-ins) answered from their source, so asking about a name no built-in registers imports nothing."""
    reg = globals()[var]
    if name in reg._entries:
        return True
    reader = _static_reader()
    if reader is not None:
        return any(name == n for n in reader.entries[var])
    return name in reg


def entry_attribute(var: str, name: str, attr: str, default: Any = None) -> Any:
    """``getattr(REGISTRY.get(name).factory, attr, default)`` for the registry named ``var``; read from the source
    while nothing imported the built-ins (so reports, audit and gates do not import torch)."""
    reg = globals()[var]
    reader = _static_reader() if name not in reg._entries else None
    if reader is not None:
        # lazy: registry_source is read only by the light commands
        from .registry_source import Unresolvable, class_attribute

        try:
            return class_attribute(reader, var, name, attr)
        except Unresolvable:
            pass
    return getattr(reg.get(name).factory, attr, default)


def entry_owners(var: str, name: str, attrs: tuple[str, ...]) -> set[str] | None:
    """The names of the classes that define ``attrs`` for the built-in registered as ``name``, read from the
    source while nothing imported the built-ins; None when that is not possible (then ask the imported class)."""
    reader = _static_reader() if name not in globals()[var]._entries else None
    if reader is None:
        return None
    # lazy: registry_source is read only by the light commands
    from .registry_source import Unresolvable, attribute_owner

    try:
        return {attribute_owner(reader, var, name, a) for a in attrs}
    except Unresolvable:
        return None


def _load_plugins() -> None:
    from importlib.metadata import entry_points  # lazy: not needed by --help/--version (docs/scaling.md §5)

    for group, reg in PLUGIN_GROUPS.items():
        for ep in entry_points(group=group):
            try:
                obj = ep.load()
                if isinstance(obj, type) and getattr(obj, "name", None) and obj.name not in reg._entries:
                    reg.register_class(obj)
            except Exception as e:  # noqa: BLE001 - one broken plug-in must not break privbench
                LOG.warning(f"privbench: plug-in {ep.value!r} ({group}) failed to load: {type(e).__name__}: {e}")
    for name in filter(None, (s.strip() for s in os.environ.get("PRIVBENCH_PLUGINS", "").split(","))):
        try:
            importlib.import_module(name)
        except Exception as e:  # noqa: BLE001
            LOG.warning(f"privbench: PRIVBENCH_PLUGINS module {name!r} failed to load: {type(e).__name__}: {e}")
