"""The tiny Stable-Diffusion-shaped pipeline builders (shipped in privbench.testing.sd; every name of that module
reads through this one) and the CLI runner of the text-to-image tests."""
from __future__ import annotations

from privbench.testing import sd


def __getattr__(name: str):
    return getattr(sd, name)


def cli(*args):
    """Run the privbench CLI in-process; (exit code, stdout, stderr)."""
    from click.testing import CliRunner

    from privbench.cli import main

    r = CliRunner().invoke(main, [str(a) for a in args])
    return r.exit_code, r.stdout, r.stderr
