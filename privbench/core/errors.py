"""Error types the CLI maps to exit codes (docs/cli.md §3): BadInput → 2, WorkFailed → 3."""


class BadInput(ValueError):
    """The user asked for something invalid: unknown name, out-of-range value, unreadable file.
    The message is one line that names the input and what is allowed."""


class WorkFailed(RuntimeError):
    """The work itself failed (e.g. training diverged); the run directory keeps what was done."""
