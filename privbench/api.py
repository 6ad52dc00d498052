"""privbench's workflow as Python functions (docs/api.md §8): ``audit``, ``report``, ``check``, ``bench`` and
``account``, each the function its command calls (cli.py only parses options and prints).

Heavy modules are imported inside the functions: ``import privbench`` stays light (docs/scaling.md §5).
"""
from __future__ import annotations

import inspect
import os
import types
from dataclasses import dataclass, field
from pathlib import Path
from typing import TYPE_CHECKING, Any, Iterable, Union

from .bench.executor_options import ExecutorOptions
from .core.constants import DEFAULT_CONFIDENCE, DEFAULT_DELTA
from .core.errors import BadInput
from .core.validation import path_arg

if TYPE_CHECKING:  # for the annotations only: runs.external imports torch
    from .runs.external import InMemoryResult

#: what ``results`` may hold: a path (str or PathLike) or a ``privbench.attack`` result
ResultLike = Union[str, "os.PathLike[str]", "InMemoryResult"]

#: the text that stands for the temporary folder in-memory results were written to
IN_MEMORY_TEXT = "<in memory>"


@dataclass(frozen=True)
class Audit:
    """What ``privbench.audit`` returns (and ``privbench audit`` prints).

    ``headlines``: one headline ε lower bound per model; ``audits``: the command's ``--json`` object of each
    membership result; ``text``: the command's output (docs/api.md §8, docs/cli.md §4.6)."""
    headlines: list[dict[str, Any]]
    audits: list[dict[str, Any]]
    text: str

    @property
    def headline(self) -> dict[str, Any]:
        """The headline of the only model audited; BadInput when there were several (see ``headlines``)."""
        if len(self.headlines) != 1:
            raise BadInput(f"audit: {len(self.headlines)} models were audited, each with its headline; read "
                           f"Audit.headlines")
        return self.headlines[0]

    def __str__(self) -> str:
        return self.text


@dataclass(frozen=True)
class CheckResult:
    """What ``privbench.check`` returns: ``ok`` (no breach), ``n_checked`` (gate × result checks made),
    ``breaches`` (one line each, as ``privbench check`` prints after ``BREACH:``) and ``optional_unmatched``
    (optional gates that matched no result)."""
    ok: bool
    n_checked: int
    breaches: list[str] = field(default_factory=list)
    optional_unmatched: list[str] = field(default_factory=list)

    def to_json(self) -> dict[str, Any]:
        """The ``privbench check --json`` object."""
        return {"ok": self.ok, "n_checked": self.n_checked, "breaches": list(self.breaches),
                "optional_unmatched": list(self.optional_unmatched)}


@dataclass(frozen=True)
class BenchResult:
    """What ``privbench.bench`` returns: ``data`` (the ``privbench bench --json`` object: counts, cells, the
    bench folder and its tables) and ``text`` (the side-by-side table the command prints)."""
    data: dict[str, Any]
    text: str

    @property
    def failed(self) -> int:
        """How many cells failed (the command then exits 3; the other cells are kept)."""
        return int((self.data.get("counts") or {}).get("failed") or 0)


def _scrub(obj: Any, tmp: Path | None) -> Any:
    """``obj`` with the temporary folder of in-memory results replaced by :data:`IN_MEMORY_TEXT` in every string
    (it is gone once the call returns)."""
    if tmp is None:
        return obj
    from .reports.sources import IN_MEMORY  # lazy: reports.sources imports torch (runs); only with in-memory results

    if isinstance(obj, str):
        for root in (tmp.resolve() / IN_MEMORY, tmp / IN_MEMORY, tmp.resolve(), tmp):
            obj = obj.replace(str(root), IN_MEMORY_TEXT)
        return obj
    if isinstance(obj, dict):
        return {k: _scrub(v, tmp) for k, v in obj.items()}
    if isinstance(obj, list):
        return [_scrub(v, tmp) for v in obj]
    return obj


def audit(results: Iterable[ResultLike] | ResultLike, *, delta: float | None = None,
          confidence: float = DEFAULT_CONFIDENCE) -> Audit:
    """Empirical ε lower bounds of every membership result, with one headline per model, family-wise at
    ``confidence`` (docs/accountants.md §3.4). ``delta``: default each model's formal or claimed δ, else 1e-5."""
    # lazy: reports.audit loads numpy and safetensors; `import privbench` stays light
    from .reports.audit import audit_results, format_audit
    from .reports.sources import as_paths

    with as_paths(results) as (paths, tmp):
        audits = audit_results([str(p) for p in paths], delta=delta, confidence=confidence)
        text = format_audit(audits)
        audits, text = _scrub(audits, tmp), _scrub(text, tmp)
    heads: dict[str, dict] = {}
    for a in audits:
        h = a.get("headline")
        if h is not None:
            heads.setdefault(h["statement"], h)
    return Audit(list(heads.values()), audits, text)


def report(results: Iterable[ResultLike] | ResultLike, out: str | os.PathLike, formats: list[str] | None = None, *,
           latex_style: str = "single", attacks: list[str] | None = None,
           targets: list[str] | None = None) -> list[Path]:
    """Render a report of ``results`` into the folder ``out`` (``formats`` ⊆ html, csv, latex, markdown) and return
    the files written; in-memory results are written under ``out``/results first."""
    # lazy: reports.render_report imports pandas (and torch for figures); `import privbench` stays light
    from .reports import output_folder, render_report
    from .reports.layout import parse_names
    from .reports.sources import check_sources, is_in_memory, write_in_memory

    items = check_sources(results)
    out = path_arg(out, "out")
    # a string is the command line's comma-separated list, not a sequence of its characters
    if isinstance(formats, str):
        formats = [f.strip() for f in formats.split(",") if f.strip()]
    attacks = parse_names(attacks, "--attacks") if isinstance(attacks, str) else attacks
    targets = parse_names(targets, "--targets") if isinstance(targets, str) else targets
    if any(is_in_memory(x) for x in items):
        paths = write_in_memory(items, output_folder(out) / "results")
    else:
        paths = [Path(x) for x in items]
    for p in paths:
        if not p.exists():
            raise BadInput(f"{p}: no such file or directory")
    if len(paths) == 1 and paths[0].is_dir():
        return render_report(paths[0], out, formats, latex_style=latex_style, attacks=attacks, targets=targets)
    base = Path(os.path.commonpath([str((p if p.is_dir() else p.parent).resolve()) for p in paths]))
    while base.name == "attacks" or base.parent.name == "attacks":  # the run folder, not one of its attack folders
        base = base.parent
    return render_report(base, out, formats, results_from=paths, latex_style=latex_style, attacks=attacks,
                         targets=targets)


def check(results: Iterable[ResultLike] | ResultLike, gates: str | os.PathLike) -> CheckResult:
    """The CI gate: every gate of ``gates`` (a YAML path or a shipped name) against every result it matches
    (docs/cli.md §10); returns the breaches."""
    # lazy: reports.gates loads the results (numpy); `import privbench` stays light
    from .reports.gates import check_gates, skipped_optional
    from .reports.sources import as_paths

    with as_paths(results) as (paths, tmp):
        names = [str(p) for p in paths]
        breaches, n_checked = check_gates(gates, names)
        unmatched = [] if breaches else skipped_optional(gates, names)
        breaches = _scrub(breaches, tmp)
    return CheckResult(not breaches, n_checked, breaches, unmatched)


def bench(suite: str, *, out: str | None = None, device: str = "auto", runs_dir: str | None = None,
          preset: str | None = None, sets: Iterable[str] = (), inception_weights: str | None = None,
          executor: str | ExecutorOptions = "local") -> BenchResult:
    """Run (or resume) a suite (a shipped name or a YAML path) and write its bench folder and tables; the options
    are ``privbench bench``'s; ``executor``: a name or an :class:`ExecutorOptions` (docs/api.md §8)."""
    # lazy: bench.runner imports torch; `import privbench` stays light
    from .bench.runner import run_suite
    from .reports.text import format_bench, write_bench_tables

    if isinstance(executor, str):
        executor = ExecutorOptions(executor)
    if not isinstance(executor, ExecutorOptions):
        raise BadInput(f"executor: expected 'local', 'ray', 'slurm' or privbench.api.ExecutorOptions, got "
                       f"{type(executor).__name__}")
    if isinstance(sets, str):  # one KEY=VALUE pair, not its characters
        sets = [sets]
    res = write_bench_tables(run_suite(suite, out=out, device=device, runs_dir=runs_dir, preset=preset,
                                       sets=tuple(sets), inception_weights=inception_weights, executor=executor))
    text = format_bench(res)
    res.pop("_rows", None)
    return BenchResult(res, text)


class BenchPackage(types.ModuleType):
    """The class of the subpackage ``privbench.bench``: the module, callable as :func:`bench` (``privbench.bench(
    suite, ...)``, docs/api.md §8), so the name is both the workflow function and the package of the bench code."""

    def __call__(self, suite: str, **options: Any) -> BenchResult:
        return bench(suite, **options)


def _accountants() -> dict[str, Any]:
    """mechanism → the accountant function of ``privbench account <mechanism>``."""
    # lazy: privacy.dpsgd / privacy.ldp load scipy; `import privbench` stays light
    from .privacy.dpsgd import account_dpsgd
    from .privacy.ldp import account_ldp

    return {"dpsgd": account_dpsgd, "ldp": account_ldp}


def account(mechanism: str, **settings: Any) -> dict[str, Any]:
    """The formal ε of a mechanism (``"dpsgd"`` or ``"ldp"``) — the ``privbench account <mechanism> --json``
    object; ``settings`` as docs/api.md §8."""
    funcs = _accountants()
    if mechanism not in funcs:
        raise BadInput(f"account: mechanism {mechanism!r}; choose from {', '.join(funcs)}")
    fn = funcs[mechanism]
    settings.setdefault("delta", DEFAULT_DELTA)
    if mechanism == "dpsgd" and settings.get("noise_multiplier") is None and settings.get("epsilon") is None:
        raise BadInput("account dpsgd: give --noise-multiplier, or --epsilon to calibrate one")
    if mechanism == "dpsgd":
        settings.setdefault("noise_multiplier", None)
    sig = inspect.signature(fn)
    try:
        sig.bind(**settings)
    except TypeError as e:
        allowed = ", ".join(n for n in sig.parameters if n != "rdp_orders")
        raise BadInput(f"account {mechanism}: {e}; settings: {allowed}") from None
    return fn(**settings)
