"""The structure of a report's tables and figures, apart from their numbers: which results a report shows
(``report --attacks/--targets``), which columns carry nothing (dropped), and how a table too long for a page is
cut into parts (docs/benchmarks.md, "Reports").
"""
from __future__ import annotations

from dataclasses import replace

from ..core.errors import BadInput
from .present import Cell, Footnotes, PaperTable

#: the text of a cell that carries no value (what present._f writes for None)
EMPTY_TEXTS = ("", "–")


def parse_names(text: str | None, option: str) -> list[str] | None:
    """``"pia, sima"`` → ``["pia", "sima"]``; None or blank → None (no selection)."""
    if text is None:
        return None
    names = [n.strip() for n in str(text).split(",") if n.strip()]
    if not names:
        raise BadInput(f"{option} {text!r}: give comma-separated names")
    return names


def attack_matches(label: str, names: list[str]) -> bool:
    return label in names or label.split("@", 1)[0] in names


def target_matches(method: str, target: str, names: list[str]) -> bool:
    return f"{method}/{target}" in names or method in names or target in names


def select_results(results: list, attacks: list[str] | None, targets: list[str] | None) -> list:
    """The results the selection keeps; a name that matches no result is bad input (one line naming the
    choices), so a typo never yields a silently empty report."""
    if attacks:
        labels = sorted({r.attack for r in results})
        unknown = [n for n in attacks if not any(attack_matches(lab, [n]) for lab in labels)]
        if unknown:
            raise BadInput(f"--attacks {','.join(unknown)}: no such attack in these results; "
                           f"choose from {', '.join(labels)}")
        results = [r for r in results if attack_matches(r.attack, attacks)]
    if targets:
        have = sorted({f"{m}/{r.target}" for r in results for m in {r.method, r.method_label}})
        unknown = [n for n in targets if not any(target_matches(*h.split("/", 1), [n]) for h in have)]
        if unknown:
            raise BadInput(f"--targets {','.join(unknown)}: no such target in these results; "
                           f"choose from {', '.join(have)} (or a method name)")
        results = [r for r in results if target_matches(r.method, r.target, targets)
                   or target_matches(r.method_label, r.target, targets)]
    return results


# ------------------------------------------------------------------------------------------ columns

def _empty(c: Cell) -> bool:
    return c.text.strip() in EMPTY_TEXTS and not c.ci and not c.marks


def drop_empty_columns(t: PaperTable) -> PaperTable:
    """``t`` without the columns in which no row has a value (e.g. FID when no FID was computed)."""
    keep = [j for j in range(len(t.columns)) if any(not _empty(row[j]) for row in t.rows)]
    if len(keep) == len(t.columns):
        return t
    return replace(t, columns=[t.columns[j] for j in keep], align="".join(t.align[j] for j in keep),
                   rows=[[row[j] for j in keep] for row in t.rows])


# ------------------------------------------------------------------------------------------ rows

def _blocks(t: PaperTable) -> list[list[int]]:
    """Row indices grouped by target block (a block starts at each index of ``t.block_starts``)."""
    out: list[list[int]] = []
    for i in range(len(t.rows)):
        if i == 0 or i in t.block_starts:
            out.append([])
        out[-1].append(i)
    return out


def _chunks(t: PaperTable, max_rows: int) -> list[list[int]]:
    """Consecutive row indices, at most ``max_rows`` each, cut between blocks where a block fits."""
    chunks: list[list[int]] = [[]]
    for block in _blocks(t):
        if chunks[-1] and len(chunks[-1]) + len(block) > max_rows:
            chunks.append([])
        for i in block:
            if len(chunks[-1]) >= max_rows:
                chunks.append([])
            chunks[-1].append(i)
    return [c for c in chunks if c]


def _notes_of(t: PaperTable, rows: list[list[Cell]]) -> Footnotes:
    """The footnotes the given rows use, with the marks they carry in the whole table."""
    used = {m for row in rows for c in row for m in c.marks}
    return _FixedNotes([(m, text) for m, text in t.notes.items() if m in used])


class _FixedNotes(Footnotes):
    """Footnotes of a part of a table: the marks of the whole table, only those the part uses."""

    def __init__(self, items: list[tuple[str, str]]) -> None:
        super().__init__()
        self._items = items
        self.texts = [text for _, text in items]

    def items(self) -> list[tuple[str, str]]:
        return list(self._items)


def split_rows(t: PaperTable, max_rows: int) -> list[PaperTable]:
    """``t`` cut into parts of at most ``max_rows`` rows, between target blocks where possible: ``<key>``,
    ``<key>-2``, … ("… (continued)"), each with the footnotes its rows use; a block cut in two repeats its leading
    cells."""
    if len(t.rows) <= max_rows:
        return [t]
    parts = []
    for k, idx in enumerate(_chunks(t, max_rows)):
        rows = [list(t.rows[i]) for i in idx]
        head = idx[0]
        if head not in t.block_starts and head != 0:  # a block cut in two: repeat its leading cells
            start = max(s for s in (t.block_starts | {0}) if s <= head)
            rows[0] = [t.rows[start][j] if _empty(c) else c for j, c in enumerate(rows[0])]
        starts = {j for j, i in enumerate(idx) if i in t.block_starts}
        parts.append(PaperTable(t.key if k == 0 else f"{t.key}-{k + 1}",
                                t.title if k == 0 else f"{t.title} (continued)",
                                t.caption if k == 0 else "", t.columns, t.align, rows, starts,
                                _notes_of(t, rows)))
    return parts
