# Two entry points for a fresh machine:  `make verify`  and  `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed

.PHONY: verify verify-quick test test-fast typecheck bench docs install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# CPU build of torch first, so the project's `torch>=2.2` installs nothing more.
	# (not --quiet: pip names each package as it goes, and the heartbeat covers its silent unpacking, so a
	# first `make` on a fresh clone shows progress at least every 15 s)
	scripts/heartbeat.sh "pip (torch)" $(BIN)/pip install --progress-bar off torch==2.13.0
	scripts/heartbeat.sh "pip (qkdyn[test])" $(BIN)/pip install --progress-bar off -e '.[test]'
	# numba's compilation of the kernels and integrator, once here instead of in the first solves
	scripts/heartbeat.sh "numba warm-up" $(BIN)/python -m qkdyn.simulate.warm
	touch $(STAMP)

install: $(STAMP)

verify: $(STAMP)
	$(BIN)/qkdyn verify
	$(BIN)/python scripts/readme_verdicts.py    # the README's verdict table, from the new report

verify-quick: $(STAMP)
	$(BIN)/qkdyn verify --quick

# `-n auto`: one pytest worker per core (xdist); `loadgroup` keeps the tests that share the built
# API tree (docs site, type check) on one worker
test: $(STAMP)
	$(BIN)/python -m pytest tests -n auto --dist loadgroup --durations=15

# the suite without the tests marked slow (pyproject's `slow` marker); CI runs `make test`
test-fast: $(STAMP)
	$(BIN)/python -m pytest tests -n auto --dist loadgroup -m "not slow"

# mypy as pyproject's [tool.mypy] configures it (the public API, theory/ and simulate/), on the package tree
# the docs hook lays out (build/api-tree); the test suite runs the same check (tests/project/test_types.py)
typecheck: $(STAMP)
	$(BIN)/python docs/_hooks/package_tree.py && $(BIN)/mypy

bench: $(STAMP)
	$(BIN)/python -m benchmarks

docs: $(STAMP)
	$(BIN)/mkdocs build --strict    # the site under site/ (tests/project/test_docs_site.py builds it too)

clean:
	rm -rf $(VENV) build site *.egg-info
