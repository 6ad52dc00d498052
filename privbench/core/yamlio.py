"""The one YAML reader and writer for files privbench reads from users: ``--config``, suites, gates, a run's
``config.yaml`` and ``--set`` list values.

Refused, each as :class:`BadInput` with one line (docs/external-models.md, "Bounds"): anchors and aliases (they can
expand to gigabytes), documents over :data:`MAX_BYTES` or deeper than :data:`MAX_DEPTH`, non-YAML tags, duplicate
and merge keys (YAML keeps the last value silently), and integers beyond :data:`MAX_INT`.
"""
from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from .errors import BadInput

#: larger than any config, suite or gates file privbench ships (a few KB); a file beyond it is not one of them
MAX_BYTES = 1 << 20
#: nesting depth of sequences/mappings (privbench's files use at most 4)
MAX_DEPTH = 32
#: the largest integer magnitude read (int64's: what numpy and torch store every integer setting as)
MAX_INT = 2 ** 63 - 1
#: longest integer literal converted (2**63 in binary with its ``0b`` prefix, sign and underscores fit)
_MAX_INT_TEXT = 100


class _Refused(Exception):
    pass


class _Loader(yaml.SafeLoader):
    """SafeLoader that refuses anchors, aliases and deep nesting while composing (before any expansion)."""

    def __init__(self, stream):
        super().__init__(stream)
        self._depth = 0

    def compose_node(self, parent, index):
        event = self.peek_event()
        line = event.start_mark.line + 1 if event.start_mark is not None else "?"
        if isinstance(event, yaml.AliasEvent):
            raise _Refused(f"YAML aliases (*{event.anchor}) are not accepted (line {line})")
        if getattr(event, "anchor", None):
            raise _Refused(f"YAML anchors (&{event.anchor}) are not accepted (line {line})")
        self._depth += 1
        try:
            if self._depth > MAX_DEPTH:
                raise _Refused(f"nested deeper than {MAX_DEPTH} levels (line {line})")
            return super().compose_node(parent, index)
        finally:
            self._depth -= 1

    def construct_mapping(self, node, deep=False):
        if isinstance(node, yaml.MappingNode):
            seen: dict = {}
            for key_node, value_node in node.value:
                line = key_node.start_mark.line + 1
                if key_node.tag == "tag:yaml.org,2002:merge":
                    raise _Refused(f"YAML merge keys (<<) are not accepted (line {line})")
                key = self.construct_object(key_node, deep=True)
                try:
                    first = seen.get(key)
                except TypeError:  # an unhashable key: SafeConstructor's own error names it
                    continue
                seen.setdefault(key, line)
                if first is not None:
                    raise _Refused(f"duplicate key {key!r} at line {line} (first at line {first}): a later value "
                                   f"would silently replace the earlier one")
                if isinstance(value_node, yaml.ScalarNode) and value_node.tag == "tag:yaml.org,2002:int":
                    self._bounded_int(value_node, f"{key}: ")  # here the refusal can name the key
        return super().construct_mapping(node, deep=deep)

    def construct_yaml_int(self, node):
        return self._bounded_int(node)

    def _bounded_int(self, node, key: str = ""):
        text = str(node.value)
        if len(text) > _MAX_INT_TEXT:
            raise _Refused(f"{key}integer of {len(text)} characters at line {node.start_mark.line + 1}; integers "
                           f"are limited to magnitude {MAX_INT} (2**63 - 1)")
        value = super().construct_yaml_int(node)
        if abs(value) > MAX_INT:
            raise _Refused(f"{key}integer {text} at line {node.start_mark.line + 1} is beyond magnitude {MAX_INT} "
                           f"(2**63 - 1)")
        return value


_Loader.add_constructor("tag:yaml.org,2002:int", _Loader.construct_yaml_int)


class _Dumper(yaml.SafeDumper):
    """Never writes anchors/aliases (an object referenced twice is written twice), so our own files load back."""

    def ignore_aliases(self, data):
        del data  # part of yaml's Representer hook: no object is aliased
        return True


def load_yaml(text: str | bytes, what: str) -> Any:
    """Parse one YAML document; ``what`` names the input in the one-line BadInput (e.g. ``--config a.yaml``)."""
    if len(text) > MAX_BYTES:
        raise BadInput(f"{what}: {len(text)} bytes; YAML inputs are limited to {MAX_BYTES} bytes")
    loader = None
    try:
        loader = _Loader(text)  # reads the stream's first chunk: a NUL or control byte is refused right here
        return loader.get_single_data()
    except _Refused as e:
        raise BadInput(f"{what}: {e}") from None
    except yaml.reader.ReaderError as e:
        raise BadInput(f"{what}: not YAML text (unacceptable character #x{e.character:04x} at byte "
                       f"{e.position})") from None
    except yaml.YAMLError as e:
        mark = getattr(e, "problem_mark", None)
        at = f" at line {mark.line + 1}" if mark is not None else ""
        problem = getattr(e, "problem", None) or type(e).__name__
        raise BadInput(f"{what}: malformed YAML{at} ({problem})") from None
    except RecursionError:
        raise BadInput(f"{what}: nested too deeply") from None
    finally:
        if loader is not None:
            loader.dispose()


def read_yaml(path: str | Path, what: str) -> Any:
    """:func:`load_yaml` of a file; a missing or unreadable file (or one over the size limit) is BadInput."""
    p = Path(path)
    try:
        size = p.stat().st_size
        if size > MAX_BYTES:
            raise BadInput(f"{what}: {size} bytes; YAML inputs are limited to {MAX_BYTES} bytes")
        data = p.read_bytes()
    except FileNotFoundError:
        raise BadInput(f"{what}: file not found") from None
    except IsADirectoryError:
        raise BadInput(f"{what}: is a directory, not a YAML file") from None
    except OSError as e:
        raise BadInput(f"{what}: unreadable ({e.strerror or type(e).__name__})") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError:
        raise BadInput(f"{what}: not UTF-8 text") from None
    return load_yaml(text, what)


def dump_yaml(obj: Any) -> str:
    """YAML text of ``obj`` (safe types only, insertion order kept, no anchors)."""
    return yaml.dump(obj, Dumper=_Dumper, sort_keys=False)
