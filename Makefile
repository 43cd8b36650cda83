# Two entry points do all set-up on a fresh machine: `make demo` and `make test`.
# Both create .venv if missing, install the pinned dependencies, build the
# extension in release mode into .venv, then run.

PYTHON ?= python3
VENV ?= .venv
PY := $(abspath $(VENV))/bin/python
DEPS_STAMP := $(VENV)/.deps-stamp
# build.rs asks this interpreter for torch's headers, libraries and ABI flag.
export OXIDE_PYTHON := $(PY)
# The compiled C++ glue, kept by a digest of its inputs (build.rs): every CPU
# capability's build links the same glue, compiled once.
TARGET_DIR := $(or $(CARGO_TARGET_DIR),$(CURDIR)/target)
export OXIDE_GLUE_CACHE ?= $(TARGET_DIR)/glue-cache

.PHONY: wheel demo test build deps format lint cargo-test pytest conformance bench-ops bench-models bench-distributed bench-sharing bench-graphs bench-compiled bench-scaling sanitize profile demo-ddp clean

demo: build
	$(PY) examples/digits_cnn.py

test: build cargo-test pytest

# The main job under DDP on two oxide devices (torchrun, one process per device, loopback).
demo-ddp: build
	GLOO_SOCKET_IFNAME=$${GLOO_SOCKET_IFNAME:-lo} $(PY) -m torch.distributed.run --standalone --nproc-per-node=2 examples/ddp_digits.py

# A few profiled training steps of the main job: a Chrome trace and memory pictures in results/profile/.
profile: build
	$(PY) examples/profile_digits.py --out results/profile

$(DEPS_STAMP): requirements.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet --upgrade pip
	$(PY) -m pip install --quiet -r requirements.txt
	touch $@

deps: $(DEPS_STAMP)

# The formatters: rustfmt (rustfmt.toml), ruff (pyproject.toml) and clang-format
# (.clang-format), pinned in requirements-lint.txt. `make format` rewrites the tree;
# `make lint` (run by .ci/run before `make test`) checks that nothing is left to
# rewrite, runs clippy (the workspace's [workspace.lints], warnings are errors) and
# ruff's lints. The glue's -Wall is checked by the build itself (OXIDE_WERROR=1 in CI).
LINT_STAMP := $(VENV)/.lint-stamp
PY_DIRS := python tests benchmarks examples conformance build_backend
CXX_SOURCES = $(shell find csrc -name '*.cpp' -o -name '*.h' | sort)

$(LINT_STAMP): requirements-lint.txt
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install --quiet -r requirements-lint.txt
	touch $@

format: $(LINT_STAMP)
	cargo fmt --all
	$(VENV)/bin/ruff check --fix $(PY_DIRS)
	$(VENV)/bin/ruff format $(PY_DIRS)
	$(VENV)/bin/clang-format -i $(CXX_SOURCES)

lint: $(LINT_STAMP) $(DEPS_STAMP)
	cargo fmt --all --check
	OXIDE_SKIP_GLUE=1 cargo clippy --workspace --all-targets --quiet -- -D warnings
	# The kernels' explicit AVX2 / AVX-512 paths exist only in those builds (build_backend/).
	RUSTFLAGS="-C target-cpu=x86-64-v3" CARGO_TARGET_DIR=$(TARGET_DIR)/capability-avx2 \
	  cargo clippy -p oxide-kernels --lib --quiet -- -D warnings
	RUSTFLAGS="-C target-cpu=x86-64-v4 -C target-feature=-prefer-256-bit" CARGO_TARGET_DIR=$(TARGET_DIR)/capability-avx512 \
	  cargo clippy -p oxide-kernels --lib --quiet -- -D warnings
	$(VENV)/bin/ruff check $(PY_DIRS)
	$(VENV)/bin/ruff format --check $(PY_DIRS)
	$(VENV)/bin/clang-format --dry-run --Werror $(CXX_SOURCES)

# A wheel of the package in dist/ (README, "Installing with pip"): every capability's
# build, through the package's own build backend, against .venv's torch.
wheel: $(DEPS_STAMP)
	$(PY) -m pip wheel --no-build-isolation --no-deps --wheel-dir dist .

# The portable default build (x86-64-v2) through maturin, then the avx2 / avx512
# builds this machine's CPU runs (README, "Installing"; build_backend/).
build: $(DEPS_STAMP)
	VIRTUAL_ENV=$(abspath $(VENV)) $(VENV)/bin/maturin develop --release --quiet
	$(PY) build_backend/torch_oxide_build.py

cargo-test:
	cargo test --quiet -p oxide-runtime -p oxide-kernels

# tests/python, then the fixed conformance subset (tests/conformance/expectations.py).
# Then the kernel suites again on the portable default build (x86-64-v2; the best
# build this CPU runs is what the first run loaded): about a minute.
PORTABLE_TESTS := $(addprefix tests/python/test_,native_ops.py nn_ops.py nn_half.py nn_conv.py nn_pool.py \
  nn_resample.py sdpa.py reduction_accuracy.py complex_ops.py foreach.py conformance_cases.py amp.py \
  autograd.py rng.py copy_views.py torchvision_ops.py)
pytest: build
	$(PY) -m pytest -q tests/python
	OXIDE_CONFORMANCE=subset $(PY) -m pytest -q -p no:cacheprovider tests/conformance
	OXIDE_CPU_CAPABILITY=default $(PY) -m pytest -q -p no:cacheprovider $(PORTABLE_TESTS)

# The pytest suite under OXIDE_SANITIZE=1 (stream races, use after free, poisoned
# fresh memory: README "Sanitizer"); a report is an exception, so it fails its test.
# SANITIZE_TESTS names a subset.
SANITIZE_TESTS ?= tests/python
sanitize: build
	OXIDE_SANITIZE=1 $(PY) -m pytest -q -p no:cacheprovider -n 2 $(SANITIZE_TESTS)

# Every OpInfo / ModuleInfo / OptimizerInfo of PyTorch's databases on oxide vs CPU.
# Writes conformance/report.json and conformance/REPORT.md (committed). Failures are
# the measurement, so they do not fail the target; a crash does.
conformance: build
	OXIDE_CONFORMANCE=full OXIDE_CONFORMANCE_REPORT=$(CURDIR)/conformance \
	  $(PY) -m pytest -q -p no:cacheprovider -n 2 tests/conformance -o addopts="" --no-header -rN; \
	  status=$$?; test $$status -le 1 || exit $$status
	@sed -n '/## Totals/,/## Largest/p' conformance/REPORT.md

# oxide vs CPU PyTorch per operator (benchmarks/README.md); about a minute or two.
# Writes benchmarks/results/ops.md and ops.json.
bench-ops: build
	$(PY) benchmarks/ops.py --out benchmarks/results

# all_reduce bus bandwidth and a DDP step, oxide vs CPU through Gloo (benchmarks/README.md).
bench-distributed: build
	$(PY) benchmarks/distributed.py

# Writes benchmarks/results/sharing.md and sharing.json.
bench-sharing: build
	$(PY) benchmarks/sharing.py --out benchmarks/results

# Graph replay vs eager (oxide) and CPU eager on launch-bound steps (benchmarks/README.md).
# Writes benchmarks/results/graphs.md and graphs.json.
bench-graphs: build
	$(PY) benchmarks/graphs.py --out benchmarks/results

# One training step of each acceptance workload, oxide vs CPU (benchmarks/README.md).
# Writes benchmarks/results/models.md and models.json.
bench-models: build
	$(PY) benchmarks/models.py --out benchmarks/results

# torch.compile(model) training steps on both devices, eager and compiled (benchmarks/README.md).
# Writes benchmarks/results/compiled.md and compiled.json.
bench-compiled: build
	$(PY) benchmarks/compiled.py --out benchmarks/results

# Elementwise, GEMM and a model step over a range of sizes, at 1 thread and all,
# oxide vs CPU (benchmarks/README.md). Writes benchmarks/results/scaling.md, .json, .png.
bench-scaling: build
	$(PY) benchmarks/scaling.py --out benchmarks/results

clean:
	cargo clean
	rm -rf $(VENV) python/torch_oxide/*.so
