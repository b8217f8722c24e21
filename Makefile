# Every target creates .venv on first use: torch==2.13.0 (CPU wheel) first, then this package.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-all bench lint schema-check clean

$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet torch==2.13.0
	$(PY) -m pip install --quiet -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pt2serde demo

test: $(STAMP) schema-check
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider

schema-check: $(STAMP)
	$(VENV)/bin/pt2serde schema check

test-all: $(STAMP)
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q -p no:cacheprovider

bench: $(STAMP)
	$(PY) benchmarks/run.py

lint: $(STAMP)
	$(VENV)/bin/ruff check src tests upgraders benchmarks

clean:
	rm -rf $(VENV) build src/*.egg-info
