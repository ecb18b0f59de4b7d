# Two entry points for a fresh machine:  `make verify`  and  `make test`.
PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
# three set-ups, each on the one before: qkdyn and what it runs on (all `make verify` needs), the test tools, the
# benchmarks' peers
STAMP      := $(VENV)/.installed
TEST_STAMP := $(VENV)/.installed-test
BENCH_STAMP := $(VENV)/.installed-bench

.PHONY: verify verify-quick test test-fast typecheck bench docs docs-katex install clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(BIN)/pip install --quiet --upgrade pip
	# CPU build of torch first, so the project's `torch>=2.2` installs nothing more.
	# (not --quiet: pip names each package as it goes, and the heartbeat covers its silent unpacking, so a
	# first `make` on a fresh clone shows progress at least every 15 s)
	scripts/heartbeat.sh "pip (torch)" $(BIN)/pip install --progress-bar off torch==2.13.0
	scripts/heartbeat.sh "pip (qkdyn)" $(BIN)/pip install --progress-bar off -e .
	# numba's compilation of the kernels and integrator, once here instead of in the first solves
	scripts/heartbeat.sh "numba warm-up" $(BIN)/python -m qkdyn.simulate.warm
	touch $(STAMP)

# the `test` extra on top (pytest, hypothesis, Ray, ruff, mypy, the docs and notebook tools, pandas, xarray)
$(TEST_STAMP): $(STAMP)
	scripts/heartbeat.sh "pip (qkdyn[test])" $(BIN)/pip install --progress-bar off -e '.[test]'
	touch $(TEST_STAMP)

# the `bench` extra on top: jax and diffrax, the peers benchmarks/bench_peers.py and bench_solve.py measure
# qkdyn against (without them those parts print that they were skipped)
$(BENCH_STAMP): $(TEST_STAMP)
	scripts/heartbeat.sh "pip (qkdyn[bench])" $(BIN)/pip install --progress-bar off -e '.[bench]'
	touch $(BENCH_STAMP)

install: $(STAMP)

verify: $(STAMP)
	$(BIN)/qkdyn verify
	$(BIN)/python scripts/readme_verdicts.py    # the README's verdict table, from the new report

verify-quick: $(STAMP)
	$(BIN)/qkdyn verify --quick

# `-n auto`: one pytest worker per core (xdist); `loadgroup` keeps the tests that share the built
# API tree (docs site, type check) on one worker
test: $(TEST_STAMP)
	$(BIN)/python -m pytest tests -n auto --dist loadgroup --durations=15

# the suite without the tests marked slow (pyproject's `slow` marker); CI runs `make test`
test-fast: $(TEST_STAMP)
	$(BIN)/python -m pytest tests -n auto --dist loadgroup -m "not slow"

# mypy as pyproject's [tool.mypy] configures it (the public API, theory/ and simulate/), on the package tree
# the docs hook lays out (build/api-tree); the test suite runs the same check (tests/project/test_types.py)
typecheck: $(TEST_STAMP)
	$(BIN)/python docs/_hooks/package_tree.py && $(BIN)/mypy

bench: $(BENCH_STAMP)
	$(BIN)/python -m benchmarks

docs: $(TEST_STAMP)
	$(BIN)/mkdocs build --strict    # the site under site/ (tests/project/test_docs_site.py builds it too)

# KaTeX typesets the site's formulas from files committed in docs/assets/katex (the site needs no network,
# to build or to read); this target refetches them with npm, the package checked against its pinned sha256,
# and records each file's sha256 in docs/assets/katex/SHA256SUMS (tests/project/test_docs_site.py checks them)
KATEX_VERSION := 0.16.22
KATEX_SHA256  := e9e0d167db3175481cbadaff38e8d90b130f6a3ddb451a47e43c577fd511f365
docs-katex:
	rm -rf build/katex && mkdir -p build/katex docs/assets/katex/fonts
	cd build/katex && npm pack --silent katex@$(KATEX_VERSION) >/dev/null \
		&& echo "$(KATEX_SHA256)  katex-$(KATEX_VERSION).tgz" | sha256sum --check --strict - && tar xzf katex-$(KATEX_VERSION).tgz
	cp build/katex/package/LICENSE build/katex/package/dist/katex.min.js build/katex/package/dist/katex.min.css docs/assets/katex/
	cp build/katex/package/dist/fonts/*.woff2 docs/assets/katex/fonts/
	cd docs/assets/katex && { echo "# katex@$(KATEX_VERSION) from npm, package sha256 $(KATEX_SHA256)"; \
		sha256sum LICENSE katex.min.js katex.min.css fonts/*.woff2; } > SHA256SUMS

clean:
	rm -rf $(VENV) build site *.egg-info
