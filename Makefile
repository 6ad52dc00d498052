# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
CORE    := $(VENV)/.installed-core
ALL     := $(VENV)/.installed-all
TORCH   := torch==2.14.1 torchvision==0.29.1
# --no-compile: no .pyc for every module of every package at install time (torch alone has thousands); Python
# writes them on first import, for the modules a command actually imports
PIP     := $(BIN)/pip install -q --disable-pip-version-check --no-compile
# ...so the bytecode cache must be writable: with PYTHONDONTWRITEBYTECODE set, every process the tests and
# the demo start would compile diffusers, peft and torch's Python modules from source again (twice the import time)
unexport PYTHONDONTWRITEBYTECODE
# Every extra the tests use: dp (opacus, dp-accounting: dpdm, dpsad, account dpsgd), fid (torch-fidelity), ray
# (bench --executor ray, tested on a local 2-CPU cluster), slurm (submitit: bench --executor slurm, tested with its
# local executor), official (xgboost: gsa@xgboost), t2i (transformers, peft: text-to-image models). An extra added to pyproject.toml that a test needs is added here.
EXTRAS  := test,dp,fid,ray,slurm,official,t2i

.PHONY: install install-all demo test test-all lint bench docs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# the demo needs the core only (torch first, pinned: pip takes it from local disk here; an unpinned torch would pull
# a multi-GB build); `make test` adds the extras
$(CORE): pyproject.toml | $(BIN)/python
	$(PIP) $(TORCH)
	$(PIP) -e .
	touch $(CORE)

$(ALL): $(CORE)
	$(PIP) -e '.[$(EXTRAS)]'
	touch $(ALL)

install: $(CORE)

install-all: $(ALL)

demo: install
	$(BIN)/privbench run --method pfdm --attack pia --dataset digits --preset tiny

# two pytest-xdist workers (CI has 2 cores), one thread each (tests/conftest.py); a file is one unit, so its
# fixtures are computed once, and the run store's locks let the workers share trained targets. `make test` leaves
# out the tests marked slow (minutes each: result claims at the tiny scale; the Ray cluster, submitit and torchrun
# DP-SGD equivalence runs, whose process start-ups dominate on 2 loaded cores; the wheel build); `make test-all`
# runs them too (before a release, and on a machine with cores to spare)
test: install-all lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile -m "not slow" tests

test-all: install-all lint
	$(BIN)/python -m pytest -q -n 2 --dist loadfile tests

# the linters of pyproject.toml ([tool.ruff]: pyflakes, pycodestyle, bugbear, isort, complexity <= 15, at most 50
# statements a function, unused arguments, blind excepts with their reason, no unused noqa) and dead code (vulture,
# 60 % confidence); seconds
lint: install-all
	$(BIN)/ruff check privbench tests
	$(BIN)/vulture privbench benchmarks vulture_whitelist.py --min-confidence 60

bench: install-all
	$(BIN)/python benchmarks/run_all.py

# the registry lists in README.md and docs/ (docs/registry.md) and README's sample outputs, rerun from this
# checkout (the samples train the tiny demo: a few minutes); tests/test_docs.py checks the lists
docs: install
	$(BIN)/python docs/generate.py --samples

clean:
	rm -rf $(VENV) runs
