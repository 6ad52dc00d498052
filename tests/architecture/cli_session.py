"""Run several privbench commands in ONE fresh Python process (the package and plug-ins found from its own
PYTHONPATH, as a user's shell would): ``python cli_session.py COMMANDS.json`` prints, as JSON, each command's exit
code, stdout and stderr. One process pays the imports once (torch, diffusers: seconds each) instead of
once per command."""
import json
import sys

from click.testing import CliRunner

from privbench.cli import main

out = []
with open(sys.argv[1]) as f:
    commands = json.load(f)
for args in commands:
    r = CliRunner().invoke(main, args)
    out.append({"args": args, "code": r.exit_code, "stdout": r.stdout, "stderr": r.stderr})
print(json.dumps(out))
