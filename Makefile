# One command surface for people and CI. `make help` lists the targets.
#
# The two quick-start commands of the README:
#   make demo   builds everything, makes a sample image set, packs it into shards, verifies it and
#               streams it through a pipeline, printing throughput
#   make test   installs what the tests need and runs every test, lint and format check

SHELL := /bin/bash
.SHELLFLAGS := -euo pipefail -c
PYTHON ?= python3
VENV := .venv
PY := $(VENV)/bin/python
CARGO ?= cargo
DEMO_DIR ?= demo-data
DEMO_IMAGES ?= 2000

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

.PHONY: sysdeps
sysdeps: ## system packages the build needs: cmake and nasm build libjpeg-turbo with its SIMD code
	@if ! command -v cmake >/dev/null || ! command -v nasm >/dev/null; then \
	  echo "installing cmake and nasm (libjpeg-turbo is built from source with SIMD)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq cmake nasm >/dev/null; \
	fi

.PHONY: setup
setup: sysdeps $(VENV)/.ready ## system packages, and .venv with the Python tools the build and tests need

$(VENV)/.ready: pyproject.toml Makefile
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "maturin>=1.7,<2" "numpy>=1.21" "pytest>=7" pytest-timeout mypy tokenizers
	# Parquet files and Hugging Face datasets made in the tests and the Parquet bench (no
	# downloads); datasets' Image feature needs Pillow (its `vision` extra) even to store paths
	$(PY) -m pip install -q pyarrow "datasets[vision]"
	# moto's S3-compatible server: the object-storage tests (Rust and Python) start it on 127.0.0.1
	$(PY) -m pip install -q "moto[server]>=5.0.11"
	# real PyTorch and JAX for the integration tests (CPU is enough; the torch wheel is large)
	$(PY) -m pip install -q torch jax
	touch $@

.PHONY: develop
develop: setup ## build the Python extension (debug) into .venv
	$(VENV)/bin/maturin develop -q

.PHONY: develop-release
develop-release: setup ## build the Python extension (release) into .venv
	$(VENV)/bin/maturin develop -q --release

.PHONY: fmt-check
fmt-check: ## rustfmt check
	$(CARGO) fmt --all -- --check

.PHONY: lint
lint: sysdeps ## clippy with warnings as errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

.PHONY: test-rust
test-rust: sysdeps ## every Rust test (unit, integration, golden files, fuzz corpora, doc tests)
	$(CARGO) test --workspace

.PHONY: test-python
test-python: develop ## pytest against the built extension
	$(VENV)/bin/pytest -q python/tests
	$(VENV)/bin/python -m mypy.stubtest stokehold

.PHONY: test
test: setup fmt-check lint test-rust test-python ## install what is needed and run every test
	@echo "all checks passed"

.PHONY: build
build: sysdeps ## release build of the stokehold command
	$(CARGO) build --release -p stokehold-cli

.PHONY: demo
demo: build ## sample images → pack → verify → inspect → stream through a pipeline
	bash scripts/demo.sh target/release/stokehold $(DEMO_DIR) $(DEMO_IMAGES)

.PHONY: bench
bench: build setup ## the benchmarks (each a ratio against a baseline measured in the same run)
	bash scripts/bench-foundation.sh target/release/stokehold
	$(PY) scripts/bench_parquet.py target/release/stokehold
	$(CARGO) bench -q -p stokehold --bench engine
	$(CARGO) bench -q -p stokehold --bench sequence
	$(CARGO) bench -q -p stokehold --bench storage
	taskset -c 1 $(CARGO) bench -q -p stokehold-ops --bench image
	@# a Rust S3 server for the object-storage bench (moto, the tests' server, is the bottleneck)
	[ -x .tools/bin/s3s-fs ] || $(CARGO) install -q s3s-fs@0.14.1 --locked --features binary --root .tools
	STOKEHOLD_S3S_FS=$(CURDIR)/.tools/bin/s3s-fs $(CARGO) bench -q -p stokehold-cli --bench remote

.PHONY: clean
clean: ## remove build outputs and demo data
	$(CARGO) clean
	rm -rf $(VENV) $(DEMO_DIR)
