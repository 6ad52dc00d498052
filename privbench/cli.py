"""The ``privbench`` command line: a thin click shell; every command calls one library function.

:class:`_Group` maps every ending to one exit code and one stderr line (docs/cli.md §3). The shared option groups
and :func:`~privbench.cli_options.lib` (the library, imported when a command runs) are in cli_options.py.
"""
from __future__ import annotations

import contextlib
import errno
import json
import logging
import os
import re
import sys
import traceback
from dataclasses import replace
from pathlib import Path

import click

from . import api
from .cli_options import (
    RunOptions,
    common,
    default_target_name,
    embedding_option,
    executor_options,
    lib,
    model_folder,
    model_options,
    outside,
    precheck_inputs,
    records_range_option,
)
from .core.config import MAX_SEED, MAX_TIMESTEPS, all_keys, config_hash, parse_set_args
from .core.constants import DEFAULT_DELTA
from .core.errors import BadInput, WorkFailed
from .core.registry import ATTACKS, entry_attribute, listing
from .core.threads import check_thread_env, configure_threads, passive_wait_by_default
from .core.version import __version__
from .runs.outside_spec import OutsideSpec

#: an OSError for these reasons is about the path the user gave: exit 2; any other is the work failing, exit 3
BAD_INPUT_ERRNOS = {errno.ENOENT, errno.ENOTDIR, errno.EISDIR, errno.EACCES, errno.EPERM, errno.EROFS,
                    errno.ENAMETOOLONG, errno.EEXIST, errno.ELOOP}
EXIT_BAD_INPUT, EXIT_FAILED, EXIT_INTERRUPTED = 2, 3, 130


def _emit(obj, as_json: bool, human: str | None = None) -> None:
    if as_json:
        click.echo(json.dumps(obj, default=str))
    elif human is not None:
        click.echo(human)
    else:
        click.echo(json.dumps(obj, indent=2, default=str))


def _one_line(e: BaseException | str) -> str:
    text = " ".join(str(e).split("\n")).strip()
    return text or type(e).__name__


def _os_error(e: OSError) -> str:
    what = e.strerror or type(e).__name__
    return f"{what}: {e.filename}" if e.filename else _one_line(e)


def _is_out_of_memory(e: BaseException) -> bool:
    text = str(e).lower()
    return isinstance(e, MemoryError) or "out of memory" in text or "can't allocate memory" in text


#: libraries that install their own stderr handler (diffusers, transformers: multi-line messages at import time)
LIBRARY_ROOT_LOGGERS = ("diffusers", "transformers")


def _warning_line(record: logging.LogRecord) -> str:
    text = record.getMessage()
    if record.name == "py.warnings":  # "path:line: UserWarning: message\n  source line"
        m = re.search(r":\d+: (\w+): (.*)", text, flags=re.S)
        text = f"{m.group(1)}: {m.group(2).splitlines()[0] if m.group(2) else ''}" if m else text
    text = " ".join(text.split())
    return text if len(text) <= 300 else text[:300].rsplit(" ", 1)[0] + " ..."


class _OneLineHandler(logging.Handler):
    """Prints each warning that reaches the root logger (Python's ``warnings``, torch, PIL, diffusers) as one
    ``privbench: warning: …`` line on the current stderr."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(f"privbench: warning: {_warning_line(record)}", err=True)


class _RoutedLogger(logging.Logger):
    """A library's root logger whose records reach :class:`_OneLineHandler`: the stderr handler the library adds
    is ignored and it keeps propagating to the root logger."""

    def addHandler(self, _hdlr):  # logging's method name
        pass

    @property
    def propagate(self):
        return True

    @propagate.setter
    def propagate(self, value):
        pass


class _PrivbenchHandler(logging.Handler):
    """privbench's own progress messages (``logging.getLogger("privbench.…")``, INFO and up) as they are, on the
    current stderr: the library logs, only the CLI talks to the terminal."""

    def emit(self, record: logging.LogRecord) -> None:
        click.echo(record.getMessage(), err=True)


def _route_library_warnings() -> None:
    logging.captureWarnings(True)
    own = logging.getLogger("privbench")
    if not any(isinstance(h, _PrivbenchHandler) for h in own.handlers):
        own.addHandler(_PrivbenchHandler(logging.INFO))
        own.setLevel(logging.INFO)
        own.propagate = False  # not again through the root logger's one-line warning handler
    root = logging.getLogger()
    if not any(isinstance(h, _OneLineHandler) for h in root.handlers):
        root.addHandler(_OneLineHandler(logging.WARNING))
    for name in LIBRARY_ROOT_LOGGERS:
        if name in logging.Logger.manager.loggerDict:  # imported already (in-process use): left as it is
            continue
        old = logging.getLoggerClass()
        logging.setLoggerClass(_RoutedLogger)
        try:
            logging.getLogger(name)
        finally:
            logging.setLoggerClass(old)


def _stdout_closed() -> None:
    """The reader of stdout went away (``privbench list keys | head -1``): done, exit 0, as other Unix tools;
    stdout goes to /dev/null so the interpreter's last flush does not complain."""
    with contextlib.suppress(OSError, ValueError):
        os.dup2(os.open(os.devnull, os.O_WRONLY), sys.stdout.fileno())
    sys.exit(0)


def _exit(code: int, label: str, msg: str) -> None:
    click.echo(f"privbench: {label}: {msg}", err=True)
    sys.exit(code)


def _interrupted() -> None:
    _exit(EXIT_INTERRUPTED, "interrupted", "stopped by Ctrl-C; finished checkpoints and results are kept and a "
                                           "rerun resumes")


def _usage_error(e: click.exceptions.UsageError) -> None:
    """click's usage error as one line, exit 2; a command group called without a command still shows its help."""
    if isinstance(e, click.exceptions.NoArgsIsHelpError):
        raise e
    where = f" (see '{e.ctx.command_path} --help')" if e.ctx is not None else ""
    _exit(EXIT_BAD_INPUT, "error", _one_line(e.format_message()).rstrip(".") + where)


class _Group(click.Group):
    """Maps every way a command can end to one exit code and one line (docs/cli.md §3)."""

    def make_context(self, *args, **kwargs):
        try:
            return super().make_context(*args, **kwargs)
        except click.exceptions.UsageError as e:
            _usage_error(e)
        except KeyboardInterrupt:  # click would print "Aborted!" and exit 1, the code of a breached gate
            _interrupted()

    def invoke(self, ctx):
        try:
            return super().invoke(ctx)
        except click.exceptions.UsageError as e:
            _usage_error(e)
        except (click.exceptions.ClickException, click.exceptions.Exit, click.exceptions.Abort):
            raise  # click's own ends (--help, --version): its exit codes
        except BadInput as e:
            _exit(EXIT_BAD_INPUT, "error", _one_line(e))
        except WorkFailed as e:
            _exit(EXIT_FAILED, "failed", _one_line(e))
        except KeyboardInterrupt:
            _interrupted()
        except BrokenPipeError:
            _stdout_closed()
        except OSError as e:
            if e.errno in BAD_INPUT_ERRNOS:
                _exit(EXIT_BAD_INPUT, "error", _os_error(e))
            _exit(EXIT_FAILED, "failed", _os_error(e))
        except Exception as e:  # noqa: BLE001 - the last resort: an unexpected error is the work failing
            if _is_out_of_memory(e):
                _exit(EXIT_FAILED, "failed", f"out of memory ({_one_line(e)[:200]}); lower the batch or model sizes")
            if os.environ.get("PRIVBENCH_DEBUG") == "1":
                traceback.print_exc()
                hint = ""
            else:
                hint = " (PRIVBENCH_DEBUG=1 shows the traceback)"
            _exit(EXIT_FAILED, "failed", f"unexpected {type(e).__name__}: {_one_line(e)[:300]}{hint}")


def _print_version(ctx, _param, value):
    if not value or ctx.resilient_parsing:
        return
    click.echo(lib("core.provenance").version_line())
    ctx.exit()


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.option("--version", is_flag=True, expose_value=False, is_eager=True, callback=_print_version,
              help=f"Show the version ({__version__}) and, in a git checkout, the commit, and exit.")
def main():
    """privbench: train diffusion targets, attack them, account and report their privacy."""
    check_thread_env()
    passive_wait_by_default()  # before any command imports torch (docs/scaling.md §1)
    _route_library_warnings()


@main.command("list")
@click.argument("what", required=False, type=click.Choice(["methods", "attacks", "datasets", "presets",
                                                           "extractors", "accountants", "keys"]))
@click.option("--json", "as_json", is_flag=True, help="print one JSON object: {WHAT: [{name, description}]}")
def list_cmd(what, as_json):
    """What the registries hold, one line each (`keys`: every --set key; `list attacks` marks [text] the attacks
    that run on text-to-image targets, conditioned on each record's caption)."""
    # read from the registering files' source, not imported: `list` stays under a second (core/registry_source.py)
    regs = {"methods": "METHODS", "attacks": "ATTACKS", "datasets": "DATASETS", "presets": "PRESETS",
            "extractors": "FEATURE_EXTRACTORS", "accountants": "ACCOUNTANTS"}
    if what == "keys":
        keys = all_keys()
        if as_json:
            _emit({"keys": [{"name": k, "type": t.__name__, "default": d, "description": h} for k, t, d, h in keys]},
                  True)
            return
        for key, typ, default, help_ in keys:
            click.echo(f"{key:28s} {typ.__name__:6s} {str(default):14s} {help_}")
        return
    kinds = [what] if what else ["methods", "attacks", "datasets", "presets"]
    entries = {name: listing(regs[name]) for name in kinds}
    flags = {}
    if what == "attacks":  # the text-conditioning flag is the class's (read from its source, as the listing is)
        flags = {n: bool(entry_attribute("ATTACKS", n, "text_conditioning", False)) for n, _ in entries["attacks"]}
    if as_json:
        _emit({name: [{"name": n, "description": d,
                       **({"text_conditioning": flags.get(n, False)} if flags else {})} for n, d in entries[name]]
               for name in kinds}, True)
        return
    for name in kinds:
        if not what:
            click.echo(f"{name}:")
        for n, d in entries[name]:
            flag = ("[text] " if flags.get(n) else "[-]    ") if flags else ""
            click.echo(f"{'  ' if not what else ''}{n:16s} {flag}{d}")


@main.command()
@click.option("--method", required=True)
@click.option("--dataset", default=None, help="dataset [default: the preset's: digits; small: colored-digits; "
                                              "paper: cifar10]")
@common
def train(method, dataset, opts):
    """Train target METHOD (cached: an equal config reuses its run).

    Under ``torchrun --nproc-per-node N -m privbench train …`` the N processes train one model with DDP (global
    batch and schedule as in the config; rank 0 writes the run and prints the result)."""
    distributed, training = lib("core.distributed"), lib("runs.train")
    cfg = opts.config(method, dataset)
    if distributed.init_from_env(opts.device):
        try:
            m = training.train(cfg, opts.runs_dir, opts.device)
        finally:
            distributed.destroy()
        if distributed.rank_from_env() != 0:
            return
    else:
        m = training.train(cfg, opts.runs_dir, opts.device)
    out = {"method": cfg.method, "dataset": cfg.dataset, "preset": cfg.preset, "seed": cfg.seed,
           "run_dir": str(m.ctx.run_dir), "targets": m.target_names(), "config_hash": cfg.training_hash()}
    _emit(out, opts.as_json, f"trained {cfg.method} on {cfg.dataset}: {m.ctx.run_dir} (targets: {', '.join(out['targets'])})")


@main.command()
@click.option("--method", required=True)
@click.option("--dataset", default=None, help="dataset [default: the preset's: digits; small: colored-digits; "
                                              "paper: cifar10]")
@click.option("--n", "n", default=64, show_default=True, type=int)
@click.option("--out", default=None, help="grid PNG (default: in the run directory)")
@click.option("--target", default=None)
@click.option("--class", "klass", default=None, type=int, help="class label to condition on")
@click.option("--npz", default=None, help="also write images (N×C×H×W in [-1,1]) and labels")
@click.option("--sampler", type=click.Choice(["ddpm", "ddim"]), default=None,
              help="ddpm: all T steps; ddim: --steps network calls (pfdm pipeline: per stage) [default: sample.sampler]")
@click.option("--steps", type=click.IntRange(min=1), default=None,
              help="DDIM steps (same as --set sample.ddim_steps=N); only with the ddim sampler")
@common
def sample(method, dataset, n, out, target, klass, npz, sampler, steps, opts):
    """Draw N samples from a trained target and write an image grid."""
    sets = list(opts.sets)
    if sampler:
        sets.append(f"sample.sampler={sampler}")
    if steps is not None:
        sets.append(f"sample.ddim_steps={steps}")
    cfg = opts.config(method, dataset, sets)
    if steps is not None and cfg.sample.sampler != "ddim":
        raise BadInput(f"--steps {steps}: DDPM runs every one of the T steps; --steps needs --sampler ddim")
    res = lib("runs.train").sample(cfg, opts.runs_dir, opts.device, n=n, target=target, klass=klass, out=out, npz=npz)
    _emit(res, opts.as_json, f"wrote {res['grid']}" + (f" and {res['npz']}" if res["npz"] else ""))


def target_options(f):
    """The target and attacks of ``attack`` and ``run``: a privbench method's, or an outside model's (--model)."""
    opts = [click.option("--method", default=None, help="a privbench method to train and attack (or give --model)"),
            click.option("--dataset", default=None, help="dataset [default: the preset's, as for train]; with "
                         "--model: the dataset that --members/--nonmembers .npy indices or --split refer to"),
            click.option("--attack", "attack_name", required=True),
            click.option("--target", default=None, help="target of the method; with --model: the name results "
                         "carry [default: the model's folder name]"),
            embedding_option, model_options, common]
    for o in reversed(opts):
        f = o(f)
    return f


def _attack_results(command, method, dataset, attack_name, target, model: OutsideSpec,
                    opts: RunOptions) -> tuple[list[dict], bool]:
    """Each attack of ATTACK (comma-separated) on the method's target or on the outside model → their results, and
    whether the target is an outside model."""
    folder = None
    if model.model_path is not None:
        folder, target = model_folder(model.model_path), target or default_target_name(model.model_path)
    if outside(command, method, model, opts):
        names = _attack_list(attack_name, sets=opts.sets)
        spec = replace(model, model_path=folder, target_name=target, dataset=dataset, data_root=opts.data_root,
                       preset=opts.preset, sets=tuple(opts.sets), device=opts.device)
        results = lib("runs.external").attacks_external(spec, names, seed=opts.seed, runs_dir=opts.runs_dir)
        return [r.to_json() for r in results], True
    cfg = opts.config(method, dataset)
    names = _attack_list(attack_name, cfg)
    results = lib("runs.attack").run_attacks(cfg, names, target, runs_dir=opts.runs_dir, device=opts.device)
    return [r.to_json() for r in results], False


@main.command()
@target_options
def attack(method, dataset, attack_name, target, model, opts):
    """Train the target if needed, run ATTACK on it, write scores and metrics.

    With --model, attack that model on --members/--nonmembers instead (no training; writes
    RUNS_DIR/external-<hash>/ that audit, report and check read)."""
    results, outside = _attack_results("attack", method, dataset, attack_name, target, model, opts)
    text = lib("reports.text")
    one = results[0] if len(results) == 1 else None
    human = text.result_summary(one or results) if outside else text.format_table(results)
    _emit({"results": results} if one is None else one, opts.as_json, human)


def _attack_list(attack_name: str, cfg=None, sets=()) -> list[str]:
    """``--attack pia,sima,lira`` → the labels, each checked before any attack runs (one line, exit 2)."""
    names = [a.strip() for a in str(attack_name).split(",")]
    if not all(names):
        raise BadInput(f"--attack {attack_name!r}: an empty attack name in the comma-separated list")
    if len(set(names)) != len(names):
        raise BadInput(f"--attack {attack_name!r}: an attack is named twice")
    used: set[str] = set()
    for a in names:
        name, values = lib("attacks.base").split_label(a)
        cls = ATTACKS.get(name).factory
        cls.variant_overrides(values)
        used.update(cls.setting_names())
        if cfg is not None:
            lib("runs.attack").make_attack(cfg, a, strict=False)
    explicit = getattr(cfg, "explicit", ()) if cfg is not None else [k for k, _ in parse_set_args(list(sets or ()))]
    unused = sorted(k for k in explicit if k.startswith("attack.") and k.split(".", 1)[1] not in used)
    if unused:  # with several attacks, a key must be a setting of at least one of them
        raise BadInput(f"{', '.join(unused)}: not a setting of any of the attacks {', '.join(names)}")
    return names


def _combined_report(results: list[dict], runs_dir) -> dict:
    """The report of several attacks run by one command: every result in one table, one HTML/CSV report."""
    key = config_hash({"results": sorted(str(r["scores_path"]) for r in results)})
    folder = (Path(runs_dir) if runs_dir else lib("runs.store").default_runs_dir()) / f"combined-{key}"
    folder.mkdir(parents=True, exist_ok=True)
    paths: dict = {"markdown": str(folder / "report.md")}
    title = ", ".join(r.get("label") or r["attack"] for r in results)
    table = lib("reports.text").format_table(results, detailed=True)
    lib("core.io").atomic_write_text(folder / "report.md", f"# {title}\n\n```\n{table}\n```\n")
    try:
        files = [str(Path(r["scores_path"]).parent / "result.json") for r in results]
        rendered = lib("reports").render_report(folder, folder / "report", ["html", "csv"], results_from=files)
        paths["rendered"] = [str(p) for p in rendered or []]
    except Exception as e:  # noqa: BLE001 — the report is a convenience; the attack results stand
        paths["rendered_error"] = f"{type(e).__name__}: {e}"
    return paths


@main.command()
@target_options
def run(method, dataset, attack_name, target, model, opts):
    """The main job: train if needed, attack, print a result table, write a report for the run.

    With --model, attack that model on --members/--nonmembers instead (no training) and write the report of its
    RUNS_DIR/external-<hash>/ run."""
    results = _attack_results("run", method, dataset, attack_name, target, model, opts)[0]
    text = lib("reports.text")
    if len(results) > 1:  # one run per attack (each with its own report) and one combined report
        for r in results:
            r["report"] = text.write_run_report(r)
        combined = _combined_report(results, opts.runs_dir)
        page = next((p for p in combined.get("rendered", []) if p.endswith("index.html")), None)
        _emit({"results": results, "report": combined}, opts.as_json,
              text.format_table(results, detailed=True) + "\n" + f"report: {page or combined['markdown']}")
        return
    res = results[0]
    res["report"] = text.write_run_report(res)
    page = next((p for p in res["report"].get("rendered", []) if p.endswith("index.html")), None)
    where = f"report: {page}" if page else f"report: {res['report'].get('markdown')} (HTML report failed: " \
                                              f"{res['report'].get('rendered_error')})"
    _emit(res, opts.as_json, text.format_table([res], detailed=True) + "\n" + where)


@main.command("infer-dataset")
@click.option("--model", "model_path", required=True, type=click.Path(),
              help="the model: a diffusers pipeline or UNet2DModel folder, or a pytorch-ddpm ckpt.pt with --arch")
@click.option("--suspect", required=True, help="the suspect records (.npz, image folder, or .npy indices)")
@click.option("--reference", required=True, help="records known NOT to have trained the model (same formats)")
@click.option("--statistics", default="loss,pia,sima", show_default=True,
              help="per-record statistics combined by the test (comma-separated)")
@click.option("--dataset", default=None, help="the dataset .npy indices refer to")
@click.option("--arch", default=None, type=click.Choice(["pytorch-ddpm"]))
@click.option("--scheduler-config", default=None, type=click.Path())
@click.option("--ema/--no-ema", default=True, show_default=True)
@click.option("--seed", default=0, type=click.IntRange(0, MAX_SEED), show_default=True)
@click.option("--device", default="auto", type=click.Choice(["auto", "cpu", "cuda"]), show_default=True)
@click.option("--data-root", default=None)
@click.option("--json", "as_json", is_flag=True)
def infer_dataset(model_path, suspect, reference, statistics, dataset, arch, scheduler_config, ema, seed, device,
                  data_root, as_json):
    """Was the SUSPECT set used to train the model? One p-value (CDI-style set test), with its method."""
    precheck_inputs({"members": suspect, "nonmembers": reference})
    model_path = model_folder(model_path)
    configure_threads(None)
    res = lib("runs.dataset_inference").infer_dataset(model_path, suspect, reference, statistics=statistics.split(","), seed=seed, device=device, arch=arch,
                                                      scheduler_config=scheduler_config, use_ema=ema,
                                                      dataset=dataset, data_root=data_root)
    human = (f"p = {res['p_value']:.3g} ({res['method']}; {res['n_suspect']} suspect vs {res['n_reference']} "
             f"reference records; statistics {', '.join(res['statistics'])})\n"
             f"shift check: p = {res['shift_check']['p_value']:.3g}: {res['shift_check']['verdict']}")
    _emit(res, as_json, human)


@main.command("check-split")
@click.option("--members", default=None, help="member records (.npz/.npy images, image folder, or .npy indices)")
@click.option("--nonmembers", default=None, help="non-member records (same formats)")
@click.option("--split", default=None, type=click.Path(),
              help="PIA/SecMI member split .npz (mia_train_idxs / mia_eval_idxs) into --dataset")
@click.option("--dataset", default=None, help="the dataset that .npy indices or --split refer to")
@click.option("--data-root", default=None, help="folder with torchvision-format datasets")
@records_range_option()
@click.option("--folds", default=5, show_default=True, type=click.IntRange(2, 100), help="cross-validation folds")
@click.option("--permutations", default=1000, show_default=True, type=click.IntRange(19, 100_000),
              help="label permutations of the test against AUC 0.5 (p resolution 1/(1+N))")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0))
@click.option("--json", "as_json", is_flag=True, help="print the check's JSON object (exit codes unchanged)")
def check_split_cmd(members, nonmembers, split, dataset, data_root, records_range, folds, permutations, seed,
                    as_json):
    """Can members and non-members be told apart without the model? (a model-free classifier's AUC)

    Exit 0 when no shift is detected, 1 when a label-permutation test of the classifier's AUC against 0.5 gives
    p <= 0.05 or the AUC's 95 % CI lower bound exceeds 0.6 (an attack's AUC on these records is then not
    evidence of leakage), 2 for bad input."""
    precheck_inputs({"members": members, "nonmembers": nonmembers})
    res = lib("runs.split_check").check_split(members, nonmembers, split=split, dataset=dataset, data_root=data_root,
                                              records_range=records_range, folds=folds, seed=seed,
                                              permutations=permutations)
    human = (f"{res['verdict']} ({res['folds']}-fold, {res['permutations']} permutations, {res['n_members']} "
             f"members / {res['n_nonmembers']} non-members)")
    if lib("metrics.split_verdict").flagged(res):
        click.echo(f"SHIFT: {human}", err=True)
        if as_json:
            _emit(res, True)
        sys.exit(1)
    _emit(res, as_json, human)


@main.command("export")
@click.argument("run_dir")
@click.option("--target", default=None, help="target of the run [default: the method's default target]")
@click.option("--out", required=True, type=click.Path(), help="new folder to write (must not exist or be empty)")
@click.option("--json", "as_json", is_flag=True)
def export_cmd(run_dir, target, out, as_json):
    """Write a trained target in diffusers format (pipeline folder; UNet + scheduler config if class-conditional)."""
    res = lib("runs.export").export_target(run_dir, target, out)
    _emit(res, as_json, f"exported {res['method']}/{res['target']} as a diffusers {res['layout']} folder: {res['out']}")


@main.group()
def account():
    """Formal privacy accounting (LDP uploads, DP-SGD)."""


@account.command("ldp")
@click.option("--clip", type=float, required=True, help="L2 clip C")
@click.option("--t0", type=int, required=True, help="upload level, 1-indexed (alphas_cumprod[t0-1])")
@click.option("--delta", type=float, default=DEFAULT_DELTA, show_default=True)
@click.option("--epsilon", type=float, default=None, help="also report the smallest t0 reaching this ε")
@click.option("--steps", type=click.IntRange(1, MAX_TIMESTEPS), default=1000, show_default=True,
              help="diffusion steps T")
@click.option("--beta-start", type=float, default=1e-4, show_default=True)
@click.option("--beta-end", type=float, default=0.02, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def account_ldp_cmd(clip, t0, delta, epsilon, steps, beta_start, beta_end, as_json):
    """ε of one PFDM upload x̃ = √ᾱ·CLIP(x, C) + √(1−ᾱ)·z under each analysis."""
    res = api.account("ldp", clip=clip, t0=t0, delta=delta, epsilon=epsilon, steps=steps, beta_start=beta_start,
                     beta_end=beta_end)
    lines = [f"LDP of one upload: C={clip}, t0={t0} (1-indexed), delta={delta}, sigma={res['sigma']:.4f}"]
    for k, v in res["epsilon"].items():
        lines.append(f"  epsilon [{k:17s}] {v:.4f}")
    for k, v in (res.get("min_t0") or {}).items():
        lines.append(f"  smallest t0 with epsilon <= {epsilon} [{k}]: {v}")
    if res.get("basis"):
        lines.append(f"  basis: {res['basis']}")
    _emit(res, as_json, "\n".join(lines))


@account.command("dpsgd")
@click.option("--noise-multiplier", type=float, default=None)
@click.option("--sample-rate", type=float, required=True)
@click.option("--steps", type=int, required=True)
@click.option("--delta", type=float, default=DEFAULT_DELTA, show_default=True)
@click.option("--epsilon", type=float, default=None, help="find the smallest noise multiplier reaching ε")
@click.option("--accountant", default="prv", show_default=True, help="a registered DP-SGD accountant (privbench list accountants; built-in prv, pld, rdp)")
@click.option("--json", "as_json", is_flag=True)
def account_dpsgd_cmd(noise_multiplier, sample_rate, steps, delta, epsilon, accountant, as_json):
    """DP-SGD (Poisson-subsampled Gaussian) accounting."""
    res = api.account("dpsgd", noise_multiplier=noise_multiplier, sample_rate=sample_rate, steps=steps, delta=delta,
                     epsilon=epsilon, accountant=accountant)
    human = (f"epsilon {res['epsilon']:.4f} at delta {res['delta']} [{res['accountant']}] for noise multiplier "
             f"{res['noise_multiplier']:.4f}, sample rate {res['sample_rate']}, {res['steps']} steps")
    if res.get("fallback"):
        human += f"\n  note: {res['fallback']}"
    _emit(res, as_json, human)


@main.command()
@click.argument("results", nargs=-1, required=True)
@click.option("--delta", type=float, default=None,
              help="δ of the bounds (default: each target's formal δ, else 1e-5)")
@click.option("--confidence", type=float, default=0.95, show_default=True)
@click.option("--json", "as_json", is_flag=True)
def audit(results, delta, confidence, as_json):
    """Empirical ε lower bounds from attack results, next to the formal ε.

    Clopper–Pearson (threshold chosen on a split half) and one-run bounds, each with its assumption; a target
    whose lower bound exceeds its formal ε is flagged. RESULTS: run dirs, bench dirs or result.json files."""
    res = api.audit(list(results), delta=delta, confidence=confidence)
    _emit(res.audits if len(res.audits) != 1 else res.audits[0], as_json, res.text)


@main.command()
@click.option("--suite", required=True,
              help="suite name (./benchmarks/suites/NAME.yaml, else a shipped suite: tiny, test, paper) or a YAML path")
@click.option("--out", default=None, help="bench directory (default RUNS_DIR/bench-NAME)")
@click.option("--device", default="auto", type=click.Choice(["auto", "cpu", "cuda"]),
              help="auto: the suite's device, else cuda if available")
@click.option("--runs-dir", default=None)
@click.option("--preset", default=None,
              help="override the suite's preset")
@click.option("--set", "sets", multiple=True, metavar="KEY=VALUE", help="override a config field in every cell")
@click.option("--inception-weights", default=None, type=click.Path(dir_okay=False),
              help="FID with torch-fidelity's Inception-v3 from this weights file (default: privbench's CNN)")
@executor_options
@click.option("--threads", default=None, type=click.IntRange(min=1),
              help="CPU threads of this process [default: the cores this process may use / concurrent workers]")
@click.option("--json", "as_json", is_flag=True)
def bench(suite, out, device, runs_dir, preset, sets, inception_weights, executor, threads, as_json):
    """Run a grid of methods × attacks × datasets × seeds, side by side with the baselines.

    Cached and resumable: a rerun skips finished cells. Writes OUT/bench.json and OUT/side_by_side.csv; exits 3
    if a cell failed (the others are kept)."""
    configure_threads(threads)
    res = api.bench(suite, out=out, device=device, runs_dir=runs_dir, preset=preset, sets=sets,
                    inception_weights=inception_weights, executor=executor)
    _emit(res.data, as_json, res.text)
    if res.failed:
        click.echo(f"privbench: failed: {res.failed} bench cell(s) failed; see {res.data['bench_json']}", err=True)
        sys.exit(3)


@main.command()
@click.argument("directory")
@click.option("--out", required=True)
@click.option("--format", "formats", default="html,csv,latex,markdown", show_default=True,
              help="comma-separated: html, csv, latex, markdown")
@click.option("--latex-style", type=click.Choice(["single", "twocolumn"]), default="single", show_default=True,
              help="LaTeX for a one-column page, or table* floats that fit a two-column paper")
@click.option("--attacks", default=None, help="comma-separated: only these attacks (a base name selects its variants)")
@click.option("--targets", default=None, help="comma-separated: only these targets (METHOD/TARGET, METHOD or TARGET)")
@click.option("--json", "as_json", is_flag=True, help='print {"out", "files": [paths]}')
def report(directory, out, formats, latex_style, attacks, targets, as_json):
    """Render a run or a bench: one self-contained HTML page, CSV, LaTeX and Markdown tables, ROC figures."""
    paths = api.report([directory], out, formats, latex_style=latex_style, attacks=attacks, targets=targets)
    _emit({"out": str(out), "files": [str(p) for p in paths]}, as_json, "\n".join(str(p) for p in paths))


@main.command()
@click.option("--gates", required=True, help="gates YAML, or the name of a shipped one (tiny)")
@click.argument("results", nargs=-1, required=True)
@click.option("--json", "as_json", is_flag=True,
              help='print {"ok", "n_checked", "breaches", "optional_unmatched"} (exit codes unchanged)')
def check(gates, results, as_json):
    """CI gate: exit 1 and list every breach when a metric crosses its threshold.

    Exit 0 when every gate holds, 1 on a breach (each listed on stderr), 2 for bad input: a missing file,
    malformed YAML, an unknown metric, or a gate that matches no result (unless it says optional: true)."""
    res = api.check(list(results), gates)
    for b in res.breaches:
        click.echo(f"BREACH: {b}", err=True)
    if res.breaches:
        click.echo(f"{len(res.breaches)} of {res.n_checked} gate checks breached", err=True)
    for g in res.optional_unmatched:
        click.echo(f"note: optional {g} matched no result (not checked)", err=True)
    if as_json:
        _emit(res.to_json(), True)
    elif res.ok:
        click.echo(f"all {res.n_checked} gate checks hold")
    if not res.ok:
        sys.exit(1)

if __name__ == "__main__":
    main()
