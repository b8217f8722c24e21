# Every target creates its venv on first use: torch first (so pip never pulls another build), then
# this package with a constraint that keeps that torch. `make test` uses torch $(TORCH) in .venv;
# `make test-torch TORCH=2.14.1` builds .venv-torch-2.14.1 (and build/native-torch-2.14.1) and
# runs the same fast suite under that torch.
PYTHON ?= python3
TORCH ?= 2.13.0
# The torch releases the suite supports (serde.core.version.SUPPORTED_TORCH): `make test-all` runs the
# thorough suite under each.
SUPPORTED_TORCH_VERSIONS := 2.13.0 2.14.1
VENV ?= .venv
PY := $(VENV)/bin/python
STAMP := $(VENV)/.installed-stamp
NATIVE_BUILD ?= build/native
export PT2SERDE_NATIVE_BUILD := $(abspath $(NATIVE_BUILD))

.PHONY: demo test test-unit test-all test-thorough test-torch test-cross bench lint contracts schema-check clean browser native

# --no-compile: pip would byte-compile every module of torch and transformers (40 of the 50 CPU
# seconds of installing torch); Python compiles the modules a run imports, on first use, instead.
$(STAMP): pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --no-compile torch==$(TORCH)
	echo "torch==$(TORCH)" > $(VENV)/torch-constraint.txt
	$(PY) -m pip install --quiet --no-compile -c $(VENV)/torch-constraint.txt -e '.[dev]'
	touch $(STAMP)

demo: $(STAMP)
	$(VENV)/bin/pt2serde demo

# pytest-xdist: one worker per core (at most 4: each imports torch), whole test files per worker so
# module fixtures (exports, subprocess runs) run once. `make test XDIST=` runs in one process.
XDIST ?= -n auto --maxprocesses=4 --dist loadfile

test: $(STAMP) schema-check contracts native
	$(PY) -m pytest -q -m "not slow" -p no:cacheprovider $(XDIST) $(TESTS)

# The torch-free unit tier: the tests marked `unit`, in one process that refuses to import torch
# (tests/conftest.py), so a unit test that reaches torch fails instead of quietly getting slow.
test-unit: $(STAMP)
	PT2SERDE_UNIT_TIER=1 $(PY) -m pytest -q -m "unit and not torch and not slow" -p no:cacheprovider -p no:xdist $(TESTS)

# The fast suite (or TESTS=...) under another torch release, in its own venv and C++ build.
test-torch:
	$(MAKE) test TORCH=$(TORCH) VENV=.venv-torch-$(TORCH) NATIVE_BUILD=build/native-torch-$(TORCH)

# What CI runs beside `make test`: under CROSS_TORCH, in its own venv, the tests whose outcome can
# differ between releases: artifacts written by every supported release (tests/compat), the version
# range, the operator sets and upgraders, the guards torch prints. Only pure-Python loading differs
# here: the C++ runtime built against CROSS_TORCH's libtorch (a 4-minute build) is left to `make
# test-all`, and so are the schema and import checks, which do not depend on torch.
CROSS_TORCH ?= $(lastword $(SUPPORTED_TORCH_VERSIONS))
CROSS_VENV := .venv-torch-$(CROSS_TORCH)
CROSS_TESTS ?= tests/compat tests/serde/bridge/test_torch_range.py tests/serde/opsets/test_opsets.py tests/serde/core/test_guards.py \
  tests/serde/bridge/test_guard_ranges.py tests/native/test_native_opsets.py
test-cross:
	$(MAKE) TORCH=$(CROSS_TORCH) VENV=$(CROSS_VENV) $(CROSS_VENV)/.installed-stamp
	PT2SERDE_NATIVE_BUILD=$(abspath build/native-torch-$(CROSS_TORCH)) $(CROSS_VENV)/bin/python -m pytest -q \
	  -m "not slow" -p no:cacheprovider $(XDIST) $(CROSS_TESTS)

schema-check: $(STAMP)
	$(VENV)/bin/pt2serde schema check

# The thorough suite (slow tests and the thorough hypothesis profile) under every supported torch.
test-all: test-thorough
	@for t in $(filter-out $(TORCH),$(SUPPORTED_TORCH_VERSIONS)); do \
	  $(MAKE) test-thorough TORCH=$$t VENV=.venv-torch-$$t NATIVE_BUILD=build/native-torch-$$t || exit 1; done

test-thorough: $(STAMP) browser native
	HYPOTHESIS_PROFILE=thorough $(PY) -m pytest -q -p no:cacheprovider $(XDIST) $(TESTS)

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
native: $(STAMP)
	@pyinc=$$($(PY) -c "import sysconfig; print(sysconfig.get_paths()['include'])"); \
	  missing=""; for t in c++ cmake ninja; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	  [ -f /usr/include/msgpack.hpp ] || missing="$$missing msgpack"; \
	    [ -f /usr/include/nlohmann/json.hpp ] || missing="$$missing nlohmann-json"; \
	  [ -f /usr/include/openssl/evp.h ] || missing="$$missing openssl"; \
	  [ -f "$$pyinc/Python.h" ] || missing="$$missing python-headers"; \
	  if [ -n "$$missing" ] && [ "$$(id -u)" = 0 ] && command -v apt-get >/dev/null 2>&1; then \
	    apt-get update -qq && DEBIAN_FRONTEND=noninteractive apt-get install -y -qq g++ cmake ninja-build \
	      libmsgpack-cxx-dev nlohmann-json3-dev libssl-dev python3-dev >/dev/null || true; \
	    missing=""; for t in c++ cmake ninja; do command -v $$t >/dev/null 2>&1 || missing="$$missing $$t"; done; \
	    [ -f /usr/include/msgpack.hpp ] || missing="$$missing msgpack"; \
	    [ -f /usr/include/nlohmann/json.hpp ] || missing="$$missing nlohmann-json"; \
	    [ -f /usr/include/openssl/evp.h ] || missing="$$missing openssl"; \
	    [ -f "$$pyinc/Python.h" ] || missing="$$missing python-headers"; \
	  fi; \
	  if [ -n "$$missing" ]; then \
	    echo "note: the C++ runtime is not built (missing:$$missing); its tests will be skipped. Install a C++ compiler, cmake, ninja, libmsgpack-cxx-dev, nlohmann-json3-dev, libssl-dev and the Python headers to build it."; \
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
	rm -rf $(VENV) .venv-torch-* build src/*.egg-info
