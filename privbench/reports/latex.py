"""LaTeX tables of a report: one booktabs float per table (``tex/<key>.tex``) and ``tables.tex``, a standalone
document that inputs them all. The two ``--latex-style``s and the ASCII output: docs/benchmarks.md, "Reports".
"""
from __future__ import annotations

import unicodedata
from pathlib import Path

from ..core.errors import BadInput
from ..core.io import atomic_write_text
from .layout import drop_empty_columns, split_rows
from .present import Cell, PaperTable

_SPECIAL = {"\\": r"\textbackslash{}", "&": r"\&", "%": r"\%", "$": r"\$", "#": r"\#", "_": r"\_",
            "{": r"\{", "}": r"\}", "~": r"\textasciitilde{}", "^": r"\textasciicircum{}", "<": r"\textless{}",
            ">": r"\textgreater{}", "|": r"\textbar{}"}
_UNICODE = {
    "ε": r"$\varepsilon$", "δ": r"$\delta$", "Δ": r"$\Delta$", "σ": r"$\sigma$", "μ": r"$\mu$", "λ": r"$\lambda$",
    "α": r"$\alpha$", "ᾱ": r"$\bar\alpha$", "θ": r"$\theta$", "η": r"$\eta$", "π": r"$\pi$",
    "≤": r"$\le$", "≥": r"$\ge$", "±": r"$\pm$", "×": r"$\times$", "·": r"$\cdot$", "→": r"$\to$",
    "∞": r"$\infty$", "≈": r"$\approx$", "√": r"$\sqrt{}$", "‖": r"$\|$", "−": r"$-$", "∈": r"$\in$",
    "–": "--", "—": "---", "…": r"\ldots{}", "“": "``", "”": "''", "‘": "`", "’": "'", "\u00a0": "~",
}


def escape(text: str) -> str:
    """``text`` as LaTeX source in ASCII (specials escaped, known symbols in math mode, other accents dropped)."""
    out: list[str] = []
    for ch in str(text):
        if ch in _SPECIAL:
            tok = _SPECIAL[ch]
        elif ch in _UNICODE:
            tok = _UNICODE[ch]
        elif ord(ch) < 128:
            tok = ch
        else:
            base = unicodedata.normalize("NFKD", ch).encode("ascii", "ignore").decode("ascii")
            tok = escape(base) if base else "?"
        if out and _is_math(tok) and _is_math(out[-1]):
            out[-1] = out[-1][:-1] + tok[1:]  # adjacent symbols: one math run ($\le\varepsilon$)
        else:
            out.append(tok)
    return "".join(out)


def _is_math(tok: str) -> bool:
    return len(tok) > 2 and tok[0] == "$" and tok[-1] == "$"


def _cell(c: Cell) -> str:
    s = escape(c.text)
    if c.ci:
        s += r" {\scriptsize " + escape(c.ci) + "}"
    if c.marks:
        s += r"\textsuperscript{" + ",".join(c.marks) + "}"
    return s


LATEX_STYLES = ("single", "twocolumn")
#: lines of \footnotesize a table* part may fill in the twocolumn style: below a 10-pt two-column article's 550-pt
#: text height, with a margin (tests/reports/test_latex_fits.py)
TWOCOLUMN_LINES = 48
#: characters of a \footnotesize line across the 469-pt text width (a caption or footnote longer wraps)
_CHARS_PER_LINE = 100
#: in the single style a longer table is a longtable (page breaks inside it) instead of a float
LONGTABLE_ROWS = 40


def _head(t: PaperTable) -> list[str]:
    return [r"\toprule", " & ".join(escape(c) for c in t.columns) + r" \\", r"\midrule"]


def _body(t: PaperTable) -> list[str]:
    lines = []
    for i, row in enumerate(t.rows):
        if i in t.block_starts and i > 0:
            lines.append(r"\addlinespace")
        lines.append(" & ".join(_cell(c) for c in row) + r" \\")
    return lines


def _notes(t: PaperTable) -> list[str]:
    if not t.notes:
        return []
    return ([r"\par\smallskip", r"\noindent\parbox{\linewidth}{\footnotesize"]
            + [r"\textsuperscript{" + m + "}" + escape(text) + r"\par" for m, text in t.notes.items()] + ["}"])


def _caption(t: PaperTable) -> str:
    return r"\caption{" + escape(t.title) + (". " + escape(t.caption) if t.caption else "") + "}"


def _float_tex(t: PaperTable, env: str, size: str, sep: str) -> list[str]:
    return [rf"\begin{{{env}}}[tbp]", r"\centering", size, rf"\setlength{{\tabcolsep}}{{{sep}}}", _caption(t),
            r"\label{tab:privbench-" + t.key + "}", r"\begin{tabular}{" + t.align + "}", *_head(t), *_body(t),
            r"\bottomrule", r"\end{tabular}", *_notes(t), rf"\end{{{env}}}"]


def _longtable_tex(t: PaperTable) -> list[str]:
    n = len(t.columns)
    return ["{" + r"\small", r"\setlength{\tabcolsep}{4pt}", r"\begin{longtable}{" + t.align + "}",
            _caption(t) + r"\label{tab:privbench-" + t.key + r"}\\", *_head(t), r"\endfirsthead",
            rf"\multicolumn{{{n}}}{{l}}{{\emph{{{escape(t.title)} (continued)}}}}\\", *_head(t), r"\endhead",
            r"\bottomrule", r"\endfoot", *_body(t), r"\end{longtable}", *_notes(t), "}"]


def table_tex(t: PaperTable, style: str = "single") -> str:
    """One booktabs table with its caption, label and footnotes, typeset for ``style`` (:data:`LATEX_STYLES`)."""
    head = [f"% privbench report: {escape(t.title)} (generated; edit the numbers in privbench, not here)",
            f"% privbench latex-style: {style}"]
    if style == "twocolumn":
        body = _float_tex(t, "table*", r"\footnotesize", "2.5pt")
    elif len(t.rows) > LONGTABLE_ROWS:
        body = _longtable_tex(t)
    else:
        body = _float_tex(t, "table", r"\small", "4pt")
    return "\n".join(head + body) + "\n"


def document_tex(tables: list[PaperTable], title: str, banner: str | None, style: str = "single") -> str:
    if style == "twocolumn":
        body = [r"\documentclass[10pt,twocolumn]{article}", r"\usepackage{booktabs}"]
    else:
        body = [r"\documentclass[10pt]{article}", r"\usepackage[a4paper,landscape,margin=1.5cm]{geometry}",
                r"\usepackage{booktabs}", r"\usepackage{longtable}"]
    body += [f"% privbench latex-style: {style}", r"\begin{document}", r"\section*{" + escape(title) + "}"]
    if banner:
        body.append(r"\noindent\fbox{\parbox{0.97\linewidth}{\textbf{" + escape(banner) + "}}}")
    body += [r"\input{tex/" + t.key + "}" for t in tables]
    body.append(r"\end{document}")
    return "\n".join(body) + "\n"


def layout_tables(tables: list[PaperTable], style: str) -> list[PaperTable]:
    """The tables as ``style`` sets them: empty columns dropped; in twocolumn, long ones cut into parts."""
    tables = [drop_empty_columns(t) for t in tables]
    if style == "twocolumn":
        tables = [part for t in tables for part in split_rows(t, _row_budget(t))]
    return tables


def _lines(text: str) -> int:
    return 1 + len(text) // _CHARS_PER_LINE


def _row_budget(t: PaperTable) -> int:
    """Rows per part so that a part fits :data:`TWOCOLUMN_LINES`: the caption, every footnote of the table (an
    upper bound for a part's), four lines of rules and header; a rule between targets costs half a line."""
    fixed = _lines(t.title + t.caption) + sum(_lines(text) for _, text in t.notes.items()) + 4
    per_row = 1.0 + 0.5 * len(t.block_starts) / max(1, len(t.rows))
    return max(8, int((TWOCOLUMN_LINES - fixed) / per_row))


def write_latex(tables: list[PaperTable], out: Path, *, title: str, banner: str | None,
                style: str = "single") -> list[Path]:
    """``out/tex/<key>.tex`` per table and ``out/tables.tex``; returns the paths written. ``tex/`` files of an
    earlier rendering that this one does not write are removed."""
    if style not in LATEX_STYLES:
        raise BadInput(f"--latex-style {style}: choose from {', '.join(LATEX_STYLES)}")
    tables = layout_tables(tables, style)
    written = []
    for t in tables:
        p = out / "tex" / f"{t.key}.tex"
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, table_tex(t, style))
        written.append(p)
    doc = out / "tables.tex"
    atomic_write_text(doc, document_tex(tables, title, banner, style))
    for old in sorted((out / "tex").glob("*.tex")):
        if old not in written and old.read_text(errors="replace").startswith("% privbench report:"):
            old.unlink()
    return [doc, *written]
