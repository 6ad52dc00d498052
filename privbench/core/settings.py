"""Config sections and their typed settings: declaring a field (:func:`setting`), adding fields to a section
(:func:`register_section`: several files may contribute to one), and parsing a value against a field's type and
range (:func:`parse_value`).
"""
from __future__ import annotations

import copy
import dataclasses
import typing
from dataclasses import dataclass, field, fields
from typing import Any

from .errors import BadInput
from .registry import load_builtins
from .yamlio import load_yaml

#: a config's fields outside its sections
TOP_LEVEL = ("method", "dataset", "preset", "seed")
#: seeds are non-negative integers below 2**32 (torch, numpy and every seeded stream accept them)
MAX_SEED = 2 ** 32 - 1


#: the metadata a setting may declare, with its defaults (the keyword arguments of :func:`setting`)
SETTING_META = dict(lo=None, hi=None, lo_open=False, hi_open=False, choices=None, help="", training=True, item=None,
                    item_lo=None, item_hi=None, min_len=None, max_len=None, hashed_at_default=True)


def setting(default, **meta):
    """A dataclass field with the range/choice metadata :func:`parse_value` checks (keywords: ``SETTING_META``).
    ``training=False``: the field never changes what is trained (out of the config hash). A list: ``item`` (its
    elements' type), ``item_lo``/``item_hi`` (their inclusive range), ``min_len``/``max_len``.
    ``hashed_at_default=False``: the field enters the config hash only when set off its default."""
    unknown = sorted(set(meta) - set(SETTING_META))
    if unknown:
        raise TypeError(f"setting() got unknown keyword(s): {', '.join(unknown)}")
    meta = {**SETTING_META, **meta}
    if isinstance(default, (list, dict, tuple)):
        return field(default_factory=lambda d=default: copy.deepcopy(d), metadata=meta)
    return field(default=default, metadata=meta)


def setting_choices(meta) -> list:
    """The allowed values of a setting: its ``choices`` list, or what its ``choices`` callable returns now (a
    registry's names: plug-ins registered later count)."""
    c = meta.get("choices")
    return list(c() if callable(c) else c or [])


def field_default(f):
    """The default value of dataclass field ``f`` (a fresh copy for a factory)."""
    if f.default is not dataclasses.MISSING:
        return f.default
    if f.default_factory is not dataclasses.MISSING:
        return f.default_factory()
    return dataclasses.MISSING


@dataclass
class Section:
    name: str
    parts: list            # dataclasses contributing fields, in registration order
    presets: dict          # preset name -> {field: value}
    training: bool
    cls: type | None = None  # the combined dataclass (rebuilt when a part is added)
    hashed_under: str | None = None  # the section whose mapping holds this one's fields in the config hash


#: every registered section, in registration order
SECTIONS: dict[str, Section] = {}


def register_section(name: str, part: type, *, presets: dict[str, dict] | None = None, training: bool = True,
                     hashed_under: str | None = None) -> type:
    """Add the fields of dataclass ``part`` to config section ``name`` (created on first use).

    ``presets``: preset name → values of ``part``'s fields. A field declared by several parts must have the same
    type and default in each. ``training=False``: as :func:`setting`'s, for the whole section. ``hashed_under``: the
    config hash holds this section's fields inside that section's mapping."""
    sec = SECTIONS.get(name)
    if sec is None:
        sec = SECTIONS[name] = Section(name, [], {}, training, hashed_under=hashed_under)
    if part in sec.parts:
        return part
    have = {f.name: f for p in sec.parts for f in fields(p)}
    hints = typing.get_type_hints(part)
    for f in fields(part):
        old = have.get(f.name)
        if old is not None:
            old_owner = next(p for p in sec.parts if f.name in {g.name for g in fields(p)})
            if typing.get_type_hints(old_owner)[f.name] is not hints[f.name] or field_default(old) != field_default(f):
                raise ValueError(f"config key {name}.{f.name}: declared differently by {old_owner.__qualname__} "
                                 f"and {part.__qualname__}")
    sec.parts.append(part)
    for preset, values in (presets or {}).items():
        unknown = set(values) - {f.name for f in fields(part)}
        if unknown:
            raise ValueError(f"presets of {part.__qualname__}: unknown fields {sorted(unknown)}")
        sec.presets.setdefault(preset, {}).update(values)
    sec.cls = None
    return part


def section_class(name: str) -> type:
    """The dataclass holding every field registered to section ``name`` (first declaration of a field wins)."""
    sec = SECTIONS[name]
    if sec.cls is None:
        seen, spec = set(), []
        for part in sec.parts:
            hints = typing.get_type_hints(part)
            for f in fields(part):
                if f.name in seen:
                    continue
                seen.add(f.name)
                fresh = (dataclasses.field(default=f.default, metadata=f.metadata)
                         if f.default_factory is dataclasses.MISSING else
                         dataclasses.field(default_factory=f.default_factory, metadata=f.metadata))
                spec.append((f.name, hints[f.name], fresh))
        sec.cls = dataclasses.make_dataclass(f"{name.capitalize()}Section", spec)
    return sec.cls


def sections() -> dict[str, type]:
    """Every registered section name → its combined dataclass (after the registries are loaded)."""
    load_builtins()
    return {n: section_class(n) for n in SECTIONS}


def all_keys() -> list[tuple[str, type, Any, str]]:
    """(key, type, default, help) for every ``--set`` key."""
    out = []
    for sec, cls in sections().items():
        hints = typing.get_type_hints(cls)
        for f in fields(cls):
            out.append((f"{sec}.{f.name}", hints[f.name], field_default(f), f.metadata.get("help", "")))
    return out


def check_seed(v: Any, what: str = "seed") -> int:
    """A seed: an integer in [0, MAX_SEED] (a YAML 1.9 or true is refused, never truncated); text is parsed."""
    if isinstance(v, str):
        try:
            v = int(v.strip())
        except ValueError:
            raise BadInput(f"{what}={v!r}: expected an integer in [0, {MAX_SEED}]") from None
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= MAX_SEED:
        raise BadInput(f"{what}={v!r}: expected an integer in [0, {MAX_SEED}]")
    return v


_BOOL_TEXT = {"1": True, "true": True, "yes": True, "on": True, "0": False, "false": False, "no": False, "off": False}


def parse_value(key: str, raw: Any, typ: type, meta: dict, source: str = "--set") -> Any:
    """Parse ``raw`` (a string from the command line, or a YAML value) into ``typ`` and range-check it; ``source``
    names where the value came from in a refusal."""
    def bad(what):
        return BadInput(f"{source} {key}={raw!r}: {what}")

    val = _from_text(key, raw.strip(), typ, bad) if isinstance(raw, str) else _typed(raw, typ, bad)
    if typ in (int, float):
        _check_number(val, meta, bad)
    choices = setting_choices(meta)
    if choices and val not in choices:
        raise bad(f"choose one of {', '.join(choices)}")
    if typ is list and not isinstance(val, list):
        raise bad("expected a list")
    if typ is list:
        _check_list(val, meta, bad)
    return val


def _from_text(key: str, text: str, typ: type, bad) -> Any:
    """A command-line string as a value of ``typ`` (a list as YAML: ``[1,2]`` or ``1,2``)."""
    if typ is bool:
        if text.lower() not in _BOOL_TEXT:
            raise bad("expected a boolean (true/false)")
        return _BOOL_TEXT[text.lower()]
    if typ in (int, float):
        try:
            return typ(text)
        except ValueError:
            raise bad("expected an integer" if typ is int else "expected a number") from None
    if typ is list:
        try:
            val = load_yaml(text if text.startswith("[") else f"[{text}]", f"--set {key}")
        except BadInput:
            raise bad("expected a list like [1,2] or 1,2 (no YAML anchors or aliases)") from None
        return [] if val is None else val
    return text


def _typed(val: Any, typ: type, bad) -> Any:
    """A YAML value checked against ``typ`` (an int where a float is expected and a tuple for a list are taken)."""
    if typ is float and isinstance(val, int) and not isinstance(val, bool):
        val = float(val)
    if typ is list and isinstance(val, tuple):
        val = list(val)
    if not isinstance(val, typ) or (typ is int and isinstance(val, bool)):
        raise bad(f"expected {typ.__name__}")
    return val


def _check_number(val, meta: dict, bad) -> None:
    """A finite number within the setting's ``lo``/``hi`` (open bounds: ``lo_open``/``hi_open``)."""
    if val != val or val in (float("inf"), float("-inf")):
        raise bad("expected a finite number")
    lo, hi = meta.get("lo"), meta.get("hi")
    if lo is not None and (val < lo or (meta.get("lo_open") and val == lo)):
        raise bad(f"must be {'>' if meta.get('lo_open') else '>='} {lo}")
    if hi is not None and (val > hi or (meta.get("hi_open") and val == hi)):
        raise bad(f"must be {'<' if meta.get('hi_open') else '<='} {hi}")


def _check_list(val: list, meta: dict, bad) -> None:
    """Length and element checks of a list setting (``item``, ``item_lo``, ``item_hi``, ``min_len``, ``max_len``)."""
    n_min, n_max = meta.get("min_len"), meta.get("max_len")
    if n_min is not None and len(val) < n_min:
        raise bad(f"expected at least {n_min} element{'s' if n_min > 1 else ''}")
    if n_max is not None and len(val) > n_max:
        raise bad(f"expected at most {n_max} elements")
    item = meta.get("item")
    if item is None:
        return
    lo, hi = meta.get("item_lo"), meta.get("item_hi")
    for v in val:
        if not isinstance(v, item) or (item is int and isinstance(v, bool)):
            raise bad(f"expected a list of {item.__name__}s, got {v!r}")
        if (lo is not None and v < lo) or (hi is not None and v > hi):
            rng = f"in [{lo}, {hi}]" if lo is not None and hi is not None else (f">= {lo}" if lo is not None else f"<= {hi}")
            raise bad(f"every element must be {rng}, got {v!r}")
