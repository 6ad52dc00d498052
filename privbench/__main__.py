"""``python -m privbench`` (and ``torchrun … -m privbench``) runs the command line."""
from .cli import main

main()
