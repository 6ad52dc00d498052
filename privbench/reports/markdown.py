"""Markdown tables of a report (``tables.md``): one GitHub-flavoured pipe table per section, footnotes under each,
and links to the ROC figures written beside it."""
from __future__ import annotations

from pathlib import Path

from ..core.io import atomic_write_text
from .present import Cell, PaperTable


def _md(text: str) -> str:
    return str(text).replace("\\", "\\\\").replace("|", "\\|").replace("\n", " ")


def _cell(c: Cell) -> str:
    s = _md(c.text)
    if c.ci:
        s += " " + _md(c.ci)
    if c.marks:
        s += " [" + ",".join(c.marks) + "]"
    return s


def table_md(t: PaperTable) -> str:
    align = {"l": ":---", "r": "---:"}
    lines = [f"## {t.title}", "", _md(t.caption), "",
             "| " + " | ".join(_md(c) for c in t.columns) + " |",
             "|" + "|".join(align[a] for a in t.align) + "|"]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in t.rows]
    if t.notes:
        lines.append("")
        lines += [f"- [{m}] {_md(text)}" for m, text in t.notes.items()]
    return "\n".join(lines) + "\n"


def write_markdown(tables: list[PaperTable], path: Path, *, title: str, banner: str | None,
                   figures: list[tuple[str, Path]] = ()) -> Path:
    """``tables.md``: the banner, every table, then links to the figures (paths relative to the file)."""
    parts = [f"# {_md(title)}", ""]
    if banner:
        parts += [f"> **{_md(banner)}**", ""]
    parts += [table_md(t) for t in tables]
    if figures:
        parts += ["## Figures", ""]
        parts += [f"- [{_md(caption)}]({f.relative_to(path.parent).as_posix()})" for caption, f in figures]
        parts.append("")
    atomic_write_text(path, "\n".join(parts))
    return path
