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
# the benchmarks' data (`make bench-data`): ImageNet-like JPEGs cut from real photographs and their pack
BENCH_DATA ?= bench-data
BENCH_INET_IMAGES ?= 5000
# the second, larger set the peers are also measured on: another seed, more classes (issue #38)
BENCH_INET20K_IMAGES ?= 20000
BENCH_DIR := $(abspath $(BENCH_DATA))

.PHONY: help
help: ## list the targets
	@grep -E '^[a-z-]+:.*## ' $(MAKEFILE_LIST) | awk -F':.*## ' '{printf "  make %-12s %s\n", $$1, $$2}'

.PHONY: sysdeps
sysdeps: ## system packages the build and tests need: cmake and nasm build libjpeg-turbo with its SIMD code; FFmpeg makes and checks the tests' videos
	@if ! command -v cmake >/dev/null || ! command -v nasm >/dev/null || ! command -v ffprobe >/dev/null; then \
	  echo "installing cmake and nasm (libjpeg-turbo is built from source with SIMD) and ffmpeg (the video tests' reference)"; \
	  if [ "$$(id -u)" = 0 ]; then SUDO=; else SUDO=sudo; fi; \
	  $$SUDO apt-get update -qq && $$SUDO apt-get install -y -qq cmake nasm ffmpeg >/dev/null; \
	fi

.PHONY: setup
setup: sysdeps $(VENV)/.ready ## system packages, and .venv with the Python tools the build and tests need

# what building and running needs: maturin builds the extension; zig (the `ziglang` wheel) links it
# against glibc 2.17 so the wheel runs on any x86_64 Linux (manylinux_2_17)
$(VENV)/.base: pyproject.toml
	$(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	$(PY) -m pip install -q "maturin>=1.7,<2" "ziglang>=0.13" "numpy>=1.21"
	touch $@

# What the tests need besides, in three groups, each installed once (a stamp is remade when its
# list in python/requirements/ changes, not when this Makefile does) and only where used:
#   .s3          moto's S3-compatible server: the object-storage tests (Rust and Python) start it on
#                127.0.0.1 (`make test-rust` needs only this group)
#   .test-tools  pytest, mypy, auditwheel, tokenizers, transformers (chat templates compared with
#                ours), pyarrow and Hugging Face `datasets` (Parquet files and datasets made in
#                the tests; no downloads)
#   .frameworks  real PyTorch, JAX and Ray Data for the integration tests (CPU is enough; PyPI's
#                Linux torch wheel is the CUDA build, ~4 GB with its libraries: install the CPU
#                build into .venv first to avoid it, see the README)
$(VENV)/.%: python/requirements/%.txt $(VENV)/.base
	$(PY) -m pip install -q -r $<
	touch $@

$(VENV)/.ready: $(VENV)/.s3 $(VENV)/.test-tools $(VENV)/.frameworks
	touch $@

# libjpeg-turbo for the wheel, built by the system's gcc rather than by zig's clang: zig links the
# wheel against glibc 2.17, but clang's code for the Huffman decoder (decode_mcu, ~40% of the
# RandomResizedCrop pipeline) ran 22% slower than gcc's, which made the wheel ~8% slower per image
# than the cargo build (perf, 10,240 crops on one core: 5,451 vs 4,456 samples in decode_mcu; see
# docs/bench-runs/2026-12-02-wheel-cc.txt). Same source and flags as the cmake crate's build (less
# the debug info the wheel strips anyway); the archive's libc symbols are all in glibc 2.17, and
# test_wheel.py's auditwheel check fails the wheel if a newer one is ever needed.
LIBJPEG_GCC := $(CURDIR)/target/libjpeg-turbo-gcc
LIBJPEG_SRC := vendor/turbojpeg-sys/libjpeg-turbo
$(LIBJPEG_GCC)/libturbojpeg.a: $(shell find $(LIBJPEG_SRC)/src $(LIBJPEG_SRC)/CMakeLists.txt -type f 2>/dev/null) Makefile | sysdeps
	cmake -S $(LIBJPEG_SRC) -B $(LIBJPEG_GCC) -DCMAKE_BUILD_TYPE=Release -DCMAKE_C_COMPILER=gcc \
	  "-DCMAKE_C_FLAGS=-ffunction-sections -fdata-sections -fPIC -m64 -march=x86-64 -w" \
	  -DENABLE_SHARED=0 -DENABLE_STATIC=1 -DREQUIRE_SIMD=ON >/dev/null
	cmake --build $(LIBJPEG_GCC) -j$$(nproc) --target turbojpeg-static >/dev/null

# maturin warns on every build that pyproject.toml's build-backend is not maturin's: it is ours on
# purpose (build_backend/stokehold_build.py names missing build tools at once, then runs maturin's),
# and the warning reads like a broken build, so that line (only) is left out; cargo's progress
# (each crate compiled) stays visible, a few minutes of it
QUIET_BACKEND_WARNING := { grep -v "in pyproject.toml is not set to .maturin." || true; }

.PHONY: wheel
wheel: sysdeps $(VENV)/.base $(LIBJPEG_GCC)/libturbojpeg.a ## the portable wheel in dist/: release build, abi3, manylinux_2_17, stripped
	rm -f dist/stokehold-*.whl
	PATH="$(CURDIR)/$(VENV)/bin:$$PATH" TURBOJPEG_SOURCE=explicit TURBOJPEG_STATIC=1 \
	  TURBOJPEG_LIB_DIR=$(LIBJPEG_GCC) TURBOJPEG_INCLUDE_DIR=$(CURDIR)/$(LIBJPEG_SRC)/src \
	  $(VENV)/bin/maturin build --release --strip --zig --compatibility manylinux_2_17 -o dist \
	  2>&1 | $(QUIET_BACKEND_WARNING)

.PHONY: sdist
sdist: $(VENV)/.base ## the source distribution in dist/ (builds where Rust, cc, cmake and nasm are present)
	$(VENV)/bin/maturin sdist -o dist

.PHONY: install
install: wheel ## install the wheel into .venv: the stokehold command and package, release build
	$(PY) -m pip install -q --force-reinstall --no-deps dist/stokehold-*.whl

.PHONY: develop
develop: setup ## build the Python extension (debug) into .venv
	$(VENV)/bin/maturin develop -q 2>&1 | $(QUIET_BACKEND_WARNING)

.PHONY: develop-release
develop-release: setup ## build the Python extension (release) into .venv
	$(VENV)/bin/maturin develop -q --release 2>&1 | $(QUIET_BACKEND_WARNING)

.PHONY: fmt-check
fmt-check: ## rustfmt check
	$(CARGO) fmt --all -- --check

.PHONY: lint
lint: sysdeps cycles ## clippy with warnings as errors
	$(CARGO) clippy --workspace --all-targets -- -D warnings

.PHONY: cycles
cycles: ## no import cycle between the modules of any crate or of the Python package
	$(PYTHON) scripts/module_cycles.py

# The Rust tests that need the S3 test server have `s3` in their names (docs/contributing.md).
.PHONY: check
check: sysdeps fmt-check lint ## the fast loop: fmt, clippy, every Rust test but the S3 ones (no .venv, no servers)
	$(CARGO) test -q --workspace -- --skip s3
	@echo "check passed (the S3, Python and wheel tests: make test)"

.PHONY: test-rust
test-rust: sysdeps $(VENV)/.s3 ## every Rust test (unit, integration, golden files, fuzz corpora, doc tests, S3)
	$(CARGO) test --workspace

.PHONY: test-python
test-python: setup install ## pytest against the installed wheel (which the last test also installs without a compiler)
	@# the tests' scratch folders (pytest's and Ray's session folder) in one temporary directory,
	@# removed afterwards, pass or fail: nothing is left in the system's temp directory
	tmp=$$(mktemp -d); trap 'rm -rf "$$tmp"' EXIT; \
	  STOKEHOLD_WHEEL="$$(ls dist/stokehold-*.whl)" TMPDIR="$$tmp" RAY_TMPDIR="$$tmp/ray" \
	  $(VENV)/bin/pytest -q -p no:cacheprovider --basetemp="$$tmp/pytest" python/tests
	$(VENV)/bin/python -m mypy.stubtest stokehold

.PHONY: test
test: ## install what is needed and run every test (each step says what it took)
	@t0=$$(date +%s); for step in setup fmt-check lint test-rust test-python; do \
	  s=$$(date +%s); echo "make test: $$step ..."; $(MAKE) --no-print-directory $$step; \
	  echo "make test: $$step done in $$(( $$(date +%s) - s )) s"; \
	done; echo "all checks passed in $$(( $$(date +%s) - t0 )) s"

.PHONY: build
build: sysdeps ## release build of the stokehold command
	$(CARGO) build --release -p stokehold-cli

.PHONY: demo
demo: install ## sample images → pack → verify → inspect → stream through a pipeline
	bash scripts/demo.sh $(VENV)/bin/stokehold $(DEMO_DIR) $(DEMO_IMAGES)
	@echo
	@echo "The stokehold command and Python package (release build) are in .venv:"
	@echo "  source .venv/bin/activate     # then: stokehold --help, python -c 'import stokehold'"

.PHONY: bench-setup
bench-setup: setup $(VENV)/.bench-ready ## .venv plus what the bench scripts need: Pillow, torchvision

$(VENV)/.bench-ready: $(VENV)/.ready
	@# torchvision for the torch already installed: pinning torch's version keeps pip from replacing it
	$(PY) -m pip install -q pillow torchvision \
	  "torch==$$($(PY) -c 'import torch; print(torch.__version__.split("+")[0])')"
	touch $@

.PHONY: bench-data
bench-data: $(if $(wildcard $(BENCH_DIR)/inet-shards/manifest.json),,bench-setup build) ## the benchmarks' ImageNet-like JPEGs and their pack, under bench-data/ (made once)
	@if [ -f $(BENCH_DIR)/inet-shards/manifest.json ]; then \
	  echo "$(BENCH_DATA)/inet and $(BENCH_DATA)/inet-shards are there (rm -rf $(BENCH_DATA) makes them again)"; \
	else \
	  set -x; \
	  $(PY) scripts/make_imagenet_like.py $(BENCH_DIR)/inet --images $(BENCH_INET_IMAGES) --classes 50 \
	    --cache $(BENCH_DIR)/cache --cli target/release/stokehold; \
	  target/release/stokehold pack $(BENCH_DIR)/inet/train $(BENCH_DIR)/inet-shards --overwrite; \
	fi

.PHONY: bench-data-20k
bench-data-20k: $(if $(wildcard $(BENCH_DIR)/inet20k/train),,bench-setup build) ## a second ImageNet-like set for the peers bench: 20,000 JPEGs, 100 classes, another seed (made once)
	@if [ -d $(BENCH_DIR)/inet20k/train ]; then \
	  echo "$(BENCH_DATA)/inet20k is there (rm -rf $(BENCH_DATA)/inet20k makes it again)"; \
	else \
	  set -x; \
	  $(PY) scripts/make_imagenet_like.py $(BENCH_DIR)/inet20k --images $(BENCH_INET20K_IMAGES) --classes 100 \
	    --seed 20 --cache $(BENCH_DIR)/cache --cli target/release/stokehold; \
	fi

.PHONY: bench
bench: build install bench-setup bench-data ## the benchmarks (each a ratio against a baseline measured in the same run)
	mkdir -p $(BENCH_DIR)/work
	BENCH_WORK=$(BENCH_DIR)/work/foundation \
	  bash scripts/bench-foundation.sh target/release/stokehold $(BENCH_DIR)/inet/train
	BENCH_WORK=$(BENCH_DIR)/work/parquet $(PY) scripts/bench_parquet.py target/release/stokehold
	$(CARGO) bench -q -p stokehold --bench engine
	$(CARGO) bench -q -p stokehold --bench sequence
	STOKEHOLD_BENCH_SHARDS=$(BENCH_DIR)/inet-shards $(CARGO) bench -q -p stokehold --bench mixture
	STOKEHOLD_BENCH_JPEGS=$(BENCH_DIR)/inet-shards STOKEHOLD_BENCH_DIR=$(BENCH_DIR)/work \
	  $(CARGO) bench -q -p stokehold --bench storage
	STOKEHOLD_BENCH_IMAGES=$(BENCH_DIR)/inet/train STOKEHOLD_BENCH_LARGE=$(BENCH_DIR)/inet/large \
	  taskset -c 1 $(CARGO) bench -q -p stokehold-ops --bench image
	@# a Rust S3 server for the object-storage bench (moto, the tests' server, is the bottleneck)
	[ -x .tools/bin/s3s-fs ] || $(CARGO) install -q s3s-fs@0.14.1 --locked --features binary --root .tools
	STOKEHOLD_S3S_FS=$(CURDIR)/.tools/bin/s3s-fs $(CARGO) bench -q -p stokehold-cli --bench remote
	@# Ray conversion vs stokehold pack of the same JPEGs (docs/scale.md)
	$(PY) scripts/bench_ray.py --images $(BENCH_DIR)/inet/train
	@# the shipped wheel: pip install vs a source build; its image pipeline vs the cargo build
	PYTHON=$(PY) bash scripts/bench-wheel.sh dist/stokehold-*.whl $(BENCH_DIR)/inet/train
	@# the Python benches (the wheel installed in .venv), against torch's DataLoader and torchvision
	$(PY) scripts/bench_python.py
	$(PY) scripts/bench_image_per_core.py --core 1 --passes 5 --src $(BENCH_DIR)/inet/train \
	  --work $(BENCH_DIR)/work/per-core
	$(PY) scripts/bench_vs_torch_dataloader.py --root $(BENCH_DIR)/inet/train --shards $(BENCH_DIR)/inet-shards
	$(PY) scripts/bench_autotune.py --jpeg $(BENCH_DIR)/inet-shards --tokens $(BENCH_DIR)/prof-tokens \
	  --cli target/release/stokehold

# the peers in a venv of their own (tensorflow-cpu and DALI pin packages the tests need otherwise);
# torch, torchvision, numpy and stokehold come from .venv, after this venv's own packages
PEERS_VENV := .venv-peers
$(PEERS_VENV)/.ready: $(VENV)/.bench-ready
	$(PYTHON) -m venv $(PEERS_VENV)
	$(PEERS_VENV)/bin/python -m pip install -q tensorflow-cpu nvidia-dali-cuda120 webdataset
	$(PY) -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])' > \
	  "$$($(PEERS_VENV)/bin/python -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/zz_venv.pth"
	touch $@

.PHONY: bench-peers
bench-peers: install bench-data bench-data-20k $(PEERS_VENV)/.ready ## stokehold beside tf.data, DALI (CPU), torchvision and PIL loaders on the same images, at 5,000 and 20,000 images
	$(PEERS_VENV)/bin/python scripts/bench_peers.py --images $(BENCH_DIR)/inet/train --pipeline both
	$(PEERS_VENV)/bin/python scripts/bench_peers.py --images $(BENCH_DIR)/inet20k/train --pipeline both

.PHONY: clean
clean: ## remove build outputs and demo data
	$(CARGO) clean
	rm -rf $(VENV) $(DEMO_DIR)
