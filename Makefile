# Every target creates .venv on first use: torch==2.13.0 (CPU wheel) first, then this package.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-all bench lint schema-check clean browser

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pt2serde demo

# pytest-xdist: one worker per core (at most 4: each imports torch), whole test files per worker so
# module fixtures (exports, subprocess runs) run once. `make test XDIST=` runs in one process.
XDIST ?= -n auto --maxprocesses=4 --dist loadfile

test: $(STAMP) schema-check
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider $(XDIST)

schema-check: $(STAMP)
	$(VENV)/bin/pt2serde schema check

test-all: $(STAMP) browser
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q -p no:cacheprovider $(XDIST)

# The page tests of `pt2serde view` open the pages in a real headless Chromium.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "note: no chromium; the browser page test will be skipped (install chromium to run it)"; fi

bench: $(STAMP)
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests upgraders benchmarks

clean:
	rm -rf $(VENV) build src/*.egg-info
