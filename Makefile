# Every target creates .venv on first use: torch==2.13.0 (CPU wheel) first, then this package.
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp

.PHONY: demo test test-all bench lint contracts schema-check clean browser native

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

test: $(STAMP) schema-check contracts native
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider $(XDIST)

schema-check: $(STAMP)
	$(VENV)/bin/pt2serde schema check

test-all: $(STAMP) browser native
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q -p no:cacheprovider $(XDIST)

# The page tests of `pt2serde view` open the pages in a real headless Chromium.
browser:
	@command -v chromium >/dev/null 2>&1 || command -v chromium-browser >/dev/null 2>&1 || \
	  if [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && apt-get install -y -qq chromium; \
	  else echo "note: no chromium; the browser page test will be skipped (install chromium to run it)"; fi

bench: $(STAMP) native
	$(PY) benchmarks/run.py

# The C++ runtime (native_cpp/) into build/native: the pt2serde-run CLI and the _pt2n_cpp
# extension behind native.load(..., engine="cpp"). Build tools and the two header libraries are
# installed with apt-get when missing and root; without a compiler it says so, and the C++ tests
# skip with the same message.
NATIVE_BUILD := build/native
native: $(STAMP)
	@pyinc=$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['include'])"); \
	  missing=""; for t in c++ cmake ninja; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	  [ -f /usr/include/msgpack.hpp ] || missing="$$missing msgpack"; \
	  [ -f /usr/include/openssl/evp.h ] || missing="$$missing openssl"; \
	  [ -f "$$pyinc/Python.h" ] || missing="$$missing python-headers"; \
	  if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ cmake ninja-build \
	      libmsgpack-cxx-dev libssl-dev python3-dev >/dev/null || true; \
	    missing=""; for t in c++ cmake ninja; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	    [ -f /usr/include/msgpack.hpp ] || missing="$$missing msgpack"; \
	    [ -f /usr/include/openssl/evp.h ] || missing="$$missing openssl"; \
	    [ -f "$$pyinc/Python.h" ] || missing="$$missing python-headers"; \
	  fi; \
	  if [ -n "$$missing" ]; then \
	    echo "note: the C++ runtime is not built (missing:$$missing); its tests will be skipped. Install a C++ compiler, cmake, ninja, libmsgpack-cxx-dev, libssl-dev and the Python headers to build it."; \
	    exit 0; fi; \
	  torch_dir=$$($(PY) -c "import os, torch; print(os.path.dirname(torch.__file__))") && \
	  abi=$$($(PY) -c "import torch; print(int(torch._C._GLIBCXX_USE_CXX11_ABI))") && \
	  cmake -S native_cpp -B $(NATIVE_BUILD) -G Ninja -DCMAKE_BUILD_TYPE=Release -DTORCH_DIR=$$torch_dir \
	    -DTORCH_CXX11_ABI=$$abi -DPython3_EXECUTABLE=$(abspath $(PY)) >/dev/null && \
	  ninja -C $(NATIVE_BUILD)

lint: $(STAMP) contracts
	$(VENV)/bin/ruff check src tests upgraders benchmarks

# The import contracts in pyproject.toml: layers import only downward, no cycles, no torch below the bridge.
contracts: $(STAMP)
	PYTHONPATH=src:. $(VENV)/bin/lint-imports --no-logo

clean:
	rm -rf $(VENV) build src/*.egg-info
