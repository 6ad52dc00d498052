"""One name → factory registry, used for methods, attacks, datasets, presets and feature extractors."""
from __future__ import annotations

from dataclasses import dataclass
from typing import Any, Callable, Iterator

from .errors import BadInput


@dataclass(frozen=True)
class Entry:
    name: str
    factory: Callable[..., Any]
    description: str


class Registry:
    def __init__(self, kind: str):
        self.kind = kind
        self._entries: dict[str, Entry] = {}

    def register(self, name: str, description: str) -> Callable:
        """Decorator: ``@METHODS.register("pfdm", "one line")``."""

        def deco(factory: Callable) -> Callable:
            if name in self._entries:
                raise ValueError(f"{self.kind} {name!r} registered twice")
            self._entries[name] = Entry(name, factory, description)
            return factory

        return deco

    def add(self, name: str, factory: Callable, description: str) -> None:
        self.register(name, description)(factory)

    def get(self, name: str) -> Entry:
        _load_builtins()
        if name not in self._entries:
            raise BadInput(f"unknown {self.kind} {name!r}; choose one of: {', '.join(self.names())}")
        return self._entries[name]

    def create(self, name: str, *args, **kwargs) -> Any:
        return self.get(name).factory(*args, **kwargs)

    def names(self) -> list[str]:
        _load_builtins()
        return list(self._entries)

    def __iter__(self) -> Iterator[Entry]:
        _load_builtins()
        return iter(list(self._entries.values()))

    def __contains__(self, name: str) -> bool:
        _load_builtins()
        return name in self._entries


METHODS = Registry("method")
ATTACKS = Registry("attack")
DATASETS = Registry("dataset")
PRESETS = Registry("preset")
FEATURE_EXTRACTORS = Registry("feature extractor")
ACCOUNTANTS = Registry("accountant")

_loaded = False


def _load_builtins() -> None:
    """Import the modules whose import registers the built-in entries (once, lazily)."""
    global _loaded
    if _loaded:
        return
    _loaded = True
    import importlib

    for mod in (
        "privbench.config",
        "privbench.data.datasets",
        "privbench.models.methods",
        "privbench.attacks",
        "privbench.privacy",
        "privbench.metrics",
    ):
        try:
            importlib.import_module(mod)
        except ModuleNotFoundError as e:  # a sub-package not written yet must not break the rest
            if not (e.name or "").startswith(mod):
                raise
