"""LaTeX tables of a report: one booktabs ``table`` per section (``tex/<section>.tex``, ready to ``\\input``) and
``tables.tex``, a standalone document that inputs them all (what the compile test builds).

The output is plain ASCII: every character LaTeX treats specially is escaped (``_ % & # $ { } ~ ^ \\``) and the
Greek letters and symbols of privbench's texts (ε, δ, Δ, ≤, ±, –, …) become their math-mode commands, so the
files compile with pdflatex and no package beyond booktabs.
"""
from __future__ import annotations

import unicodedata
from pathlib import Path

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


def table_tex(t: PaperTable) -> str:
    """One booktabs table (float) with its caption, label and footnotes."""
    lines = [f"% privbench report: {escape(t.title)} (generated; edit the numbers in privbench, not here)",
             r"\begin{table}[tbp]", r"\centering", r"\small", r"\setlength{\tabcolsep}{4pt}",
             r"\caption{" + escape(t.title) + ". " + escape(t.caption) + "}",
             r"\label{tab:privbench-" + t.key + "}",
             r"\begin{tabular}{" + t.align + "}", r"\toprule",
             " & ".join(escape(c) for c in t.columns) + r" \\", r"\midrule"]
    for i, row in enumerate(t.rows):
        if i in t.block_starts and i > 0:
            lines.append(r"\addlinespace")
        lines.append(" & ".join(_cell(c) for c in row) + r" \\")
    lines += [r"\bottomrule", r"\end{tabular}"]
    if t.notes:
        lines.append(r"\par\smallskip")
        lines.append(r"\parbox{\linewidth}{\footnotesize")
        lines += [r"\textsuperscript{" + m + "}" + escape(text) + r"\par" for m, text in t.notes.items()]
        lines.append("}")
    lines.append(r"\end{table}")
    return "\n".join(lines) + "\n"


def document_tex(tables: list[PaperTable], title: str, banner: str | None) -> str:
    body = [r"\documentclass[10pt]{article}", r"\usepackage[a4paper,landscape,margin=1.5cm]{geometry}",
            r"\usepackage{booktabs}", r"\begin{document}", r"\section*{" + escape(title) + "}"]
    if banner:
        body.append(r"\noindent\fbox{\parbox{0.97\linewidth}{\textbf{" + escape(banner) + "}}}")
    body += [r"\input{tex/" + t.key + "}" for t in tables]
    body.append(r"\end{document}")
    return "\n".join(body) + "\n"


def write_latex(tables: list[PaperTable], out: Path, *, title: str, banner: str | None) -> list[Path]:
    """``out/tex/<key>.tex`` per table and ``out/tables.tex``; returns the paths written."""
    from ..core.io import atomic_write_text

    written = []
    for t in tables:
        p = out / "tex" / f"{t.key}.tex"
        p.parent.mkdir(parents=True, exist_ok=True)
        atomic_write_text(p, table_tex(t))
        written.append(p)
    doc = out / "tables.tex"
    atomic_write_text(doc, document_tex(tables, title, banner))
    return [doc, *written]
