"""JSON objects declared once, as dataclasses: the fields are the keys in their order, the type hints their JSON
types, :func:`optional` marks a key a file may lack (:mod:`privbench.runs.result_schema` is built on it)."""
from __future__ import annotations

from dataclasses import MISSING, dataclass, field, fields
from functools import cache
from types import UnionType
from typing import Any, ClassVar, get_args, get_type_hints

from .errors import BadInput

#: a field that is bookkeeping, not a JSON key
_NOT_A_KEY = {"key": False}


def not_a_key(default=None):
    """A field a process keeps on the object but never writes or reads (e.g. a planned bench cell's config)."""
    return field(default=default, metadata=_NOT_A_KEY)


def extra_keys():
    """The ``details`` field: the keys of a plug-in's object that its class does not declare, kept as written."""
    return field(default_factory=dict, metadata=_NOT_A_KEY)


def given_order():
    """The ``key_order`` field: the keys in the order they were given."""
    return field(default=(), repr=False, compare=False, metadata=_NOT_A_KEY)


def optional(with_key: str | None = None):
    """A field whose key a file may lack: written when it is set (not None), or, with ``with_key``, whenever that
    key is (an outside model's result writes the keys of its provenance, nulls included)."""
    return field(default=None, metadata={"written_with": with_key})


class Schema:
    """Base of the schema classes, whose dataclass fields are the JSON keys in their order. Each key's JSON type is
    its field's type hint (a schema class: an object; ``| None``: also null; ``float``: any number); only a field made
    with :func:`optional` may be absent. A ``details`` field keeps undeclared keys (else they are refused); a
    ``key_order`` field writes the keys in the order given (a report's columns follow it), then those set since;
    ``absent_reads_default`` reads a missing key as its default; ``doc``: the page an undeclared-key error names."""

    absent_reads_default: ClassVar[bool] = False
    doc: ClassVar[str] = "docs/cli.md §5"

    @classmethod
    def from_json(cls, d, where: str = ""):
        """Parse a JSON object (``where``: its key, naming it in errors); BadInput (one line) on an undeclared,
        missing or mistyped key."""
        at, spec = f"{where}: " if where else "", _spec(cls)
        if not isinstance(d, dict):
            raise BadInput(f"{at}expected an object, got {type(d).__name__}")
        unknown = [k for k in d if k not in spec.keys]
        if unknown and "details" not in spec.types:
            raise BadInput(f"{at}undeclared key(s) {', '.join(map(repr, unknown))} ({cls.doc})")
        missing = [k for k in spec.keys if k not in d and k not in spec.optional
                   and not (cls.absent_reads_default and k in spec.defaulted)]
        if missing:
            raise BadInput(f"{at}missing keys: {', '.join(missing)}")
        kw = {}
        for k in (k for k in spec.keys if k in d):
            name = f"{where}.{k}" if where else k
            check_type(name, d[k], spec.types[k])
            kw[k] = d[k] if k not in spec.nested or d[k] is None else spec.nested[k].from_json(d[k], name)
        if unknown:
            kw["details"] = {k: d[k] for k in unknown}
        if "key_order" in spec.types:
            kw["key_order"] = tuple(d)
        return cls(**kw)

    def __post_init__(self):
        # a writer may hand over a nested object as the plain dict its producer returns (Method.privacy, timing)
        for k, kind in _spec(type(self)).nested.items():
            if isinstance(getattr(self, k), dict):
                setattr(self, k, kind.from_json(getattr(self, k), k))

    def to_json(self) -> dict:
        """The JSON object (:meth:`from_json`'s inverse: a file read and written again is unchanged)."""
        spec = _spec(type(self))
        details = getattr(self, "details", {})
        out = {k: getattr(self, k) if k in spec.keys else details[k]
               for k in getattr(self, "key_order", ()) if k in spec.keys or k in details}
        for k in spec.keys:
            if k not in out and (k not in spec.optional or getattr(self, spec.optional[k] or k) is not None):
                out[k] = getattr(self, k)
        out.update({k: v for k, v in details.items() if k not in out})
        return {k: v.to_json() if isinstance(v, Schema) else v for k, v in out.items()}


@dataclass(frozen=True)
class _Spec:
    keys: tuple[str, ...]           # the JSON keys, in order
    types: dict[str, tuple]         # each field's JSON types
    optional: dict[str, str | None]  # an optional key → the key it is written with (None: when it is set)
    nested: dict[str, type]         # a key whose value is a schema object → its class
    defaulted: frozenset[str]       # the keys whose field has a default


@cache
def _spec(cls) -> _Spec:
    """A schema class's keys, types, optional keys and nested objects, from its fields and their type hints."""
    hints = get_type_hints(cls)
    types, nested = {}, {}
    for f in fields(cls):
        args = get_args(hints[f.name]) if isinstance(hints[f.name], UnionType) else (hints[f.name],)
        nested.update((f.name, a) for a in args if isinstance(a, type) and issubclass(a, Schema))
        types[f.name] = tuple(None if a is type(None) else dict if f.name in nested else a for a in args)
    return _Spec(tuple(f.name for f in fields(cls) if f.metadata.get("key", True)), types,
                 {f.name: f.metadata["written_with"] for f in fields(cls) if "written_with" in f.metadata}, nested,
                 frozenset(f.name for f in fields(cls) if f.default is not MISSING or f.default_factory is not MISSING))


def json_keys(cls) -> tuple[str, ...]:
    """A schema class's JSON keys, in the order its files hold them."""
    return _spec(cls).keys


def check_type(key: str, v, types: tuple) -> None:
    """BadInput (one line) unless ``v`` is of one of the JSON ``types`` (None in them: also null; ``Any``: anything;
    ``float``: any number; a bool only where ``bool`` is one)."""
    if Any in types or v is None and None in types:
        return
    want = tuple(t for t in types if t is not None)
    if isinstance(v, bool) and bool not in want or not isinstance(v, want + ((int,) if float in want else ())):
        raise BadInput(f"{key}: expected {' or '.join('null' if t is None else t.__name__ for t in types)}, got "
                       f"{type(v).__name__}")
