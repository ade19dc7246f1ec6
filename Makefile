# Everything an operator or developer runs. `make run-daemons` and `make test` work from a fresh
# clone: the first target that needs the virtualenv creates it.

PYTHON ?= python3
VENV   := .venv
BIN    := $(VENV)/bin
STAMP  := $(VENV)/.installed-stamp
CONFIG ?=

# Keep every tool's caches and Chroma's telemetry away from $HOME.
export ANONYMIZED_TELEMETRY := False
export PIP_DISABLE_PIP_VERSION_CHECK := 1

.PHONY: install test test-reliability bench lint typecheck check docs run-daemons demo demo-neo chroma clean-data clean

install: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -m pip install --quiet --upgrade pip
	$(BIN)/python -m pip install --quiet -e '.[test]'
	touch $(STAMP)

# pytest exits 5 when it collected nothing: that is a failure here, never a pass. The suite
# runs on TEST_WORKERS processes (pytest-xdist), each taking whole test files, so a module's
# fixtures are set up once; each worker starts its own PostgreSQL and Chroma servers. Three
# on 2 cores: many tests wait on child processes (9 min with 2 workers, 7 with 3).
TEST_WORKERS ?= 3
test: $(STAMP)
	@$(BIN)/python -m pytest -n $(TEST_WORKERS) --dist loadfile; status=$$?; \
	if [ $$status -eq 5 ]; then echo "make test: no tests were collected" >&2; exit 1; fi; \
	exit $$status

# The long crash, concurrency and reconciliation-safety runs, with their table (minutes).
test-reliability: $(STAMP)
	$(BIN)/python -m tests.reliability

# The benchmarks at full size: a table per benchmark, then one JSON object. SCALE=full adds
# the scale section's 1,000,000-chunk rows (see README "Performance" for how long each takes).
SCALE ?= quick
bench: $(STAMP)
	$(BIN)/python -m benchmarks --repeats 2 --scale $(SCALE)

# ruff, then the architecture: the import contracts of .importlinter (layers, pure rules,
# one Chroma adapter, one SQLite connection). A broken contract fails the target, and so CI.
# Then the shipped Prometheus files, with promtool when it is installed (skipped, said so,
# when it is not: `apt-get install prometheus` brings it).
lint: $(STAMP)
	$(BIN)/ruff check core daemons tests benchmarks
	$(BIN)/lint-imports --no-cache --no-logo
	@if command -v promtool >/dev/null 2>&1; then \
		promtool check rules deploy/prometheus/kb-rules.yml && \
		promtool check config deploy/prometheus/scrape.yml && \
		promtool test rules deploy/prometheus/kb-rules.test.yml; \
	else echo "make lint: promtool not installed; deploy/prometheus not checked" >&2; fi

typecheck: $(STAMP)
	$(BIN)/mypy

check: lint typecheck test

# Regenerate the documents derived from core/base/config/config_schema.py (the README table,
# the example file).
docs: $(STAMP)
	$(BIN)/python -m daemons.docs --example > config/kb.example.toml
	$(BIN)/python -m daemons.docs --readme README.md

# Both daemons in one process, in the foreground, on the embedded store under .kb-data/
# (or on the server that CONFIG's chromaUrl names). Ctrl-C stops them gracefully.
run-daemons: $(STAMP)
	$(BIN)/python -m daemons $(if $(CONFIG),--config $(CONFIG))

# A first run to watch: seeds demo data, one drain tick, one report-only reconcile pass, status.
# Only in a folder of its own (fresh, or its last run's untouched): any other is exit 2.
demo: $(STAMP)
	$(BIN)/python -m daemons.demo $(if $(CONFIG),--config $(CONFIG))

# The same story on a neo.mjs deployment's own graph: a made-up checkout in .kb-neo-demo/ (the
# original's latest schema, its tenant nodes and telemetry), rebuilt on every run that finds it
# as its last run left it; a folder the demo did not make, or one changed since, is exit 2.
demo-neo: $(STAMP)
	$(BIN)/python -m daemons.demo --neo

# A local Chroma server on loopback for server mode (chromaUrl = "http://127.0.0.1:8000"), its
# files owner-only like everything the commands create (umask 077).
chroma: $(STAMP)
	umask 077 && $(BIN)/chroma run --host 127.0.0.1 --port 8000 --path .kb-data/chroma-server

clean-data:
	rm -rf .kb-data .kb-neo-demo

clean: clean-data
	rm -rf $(VENV) *.egg-info .pytest_cache .mypy_cache .ruff_cache .hypothesis
