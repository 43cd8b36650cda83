# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv if missing, install the pinned dependencies, build the
# extension in release mode into .venv, then run.

PYTHON ?= python3
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
DEPS_STAMP := $(VENV)/.deps-stamp
# build.rs asks this interpreter for torch's headers, libraries and ABI flag.
export OXIDE_PYTHON := $(PY)

.PHONY: demo test build deps cargo-test pytest clean

demo: build
	$(PY) examples/digits_cnn.py

test: build cargo-test pytest

$(DEPS_STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

deps: $(DEPS_STAMP)

build: $(DEPS_STAMP)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet

cargo-test:
	cargo test --quiet -p oxide-runtime -p oxide-kernels

pytest: build
	$(PY) -m pytest -q tests/python

clean:
	cargo clean
	rm -rf $(VENV) python/torch_oxide/*.so
