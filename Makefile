# Two commands do all set-up on a fresh machine: `make demo` and `make test`.
PY      ?= python3
VENV    ?= .venv
BIN     := $(VENV)/bin
STAMP   := $(VENV)/.installed
TORCH   := torch==2.14.1 torchvision==0.29.1

.PHONY: install demo test test-fast bench docs clean

$(BIN)/python:
	$(PY) -m venv $(VENV)

# The extras: dp (opacus, dp-accounting: dpdm, dpsad, account dpsgd), fid (torch-fidelity) and ray (ray core:
# bench --executor ray, tested on a local 2-CPU cluster) are what the tests and the tiny suite use.
# torch first, pinned: pip takes it from local disk here; an unpinned torch would pull a multi-GB build.
$(STAMP): pyproject.toml | $(BIN)/python
	$(BIN)/pip install -q $(TORCH)
	$(BIN)/pip install -q -e '.[test,dp,fid,ray,official,t2i]'
	touch $(STAMP)

install: $(STAMP)

demo: install
	$(BIN)/privbench run --method pfdm --attack pia --dataset digits --preset tiny

# two pytest-xdist workers (CI has 2 cores), one thread each (tests/conftest.py); a file is one unit, so its
# fixtures are computed once, and the run store's locks let the workers share trained targets
test: install
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup tests

test-fast: install
	$(BIN)/python -m pytest -q -n 2 --dist loadgroup -m "not slow" tests

bench: install
	$(BIN)/python benchmarks/run_all.py

# the registry lists in README.md and docs/ (docs/registry.md) and README's sample outputs, rerun from this
# checkout (the samples train the tiny demo: a few minutes); tests/test_docs.py checks the lists
docs: install
	$(BIN)/python docs/generate.py --samples

clean:
	rm -rf $(VENV) runs
