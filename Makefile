# Two commands on a fresh machine: `make demo` (train scoRNN on copying, record it) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Installed before the project, so that the project's install keeps it. TORCH_INDEX picks a wheel index, e.g. PyTorch's
# CPU-only one (docs/getting-started.md); empty, pip's own configuration decides (PyPI, or a local wheel where pip is set so).
TORCH_SPEC ?= torch==2.13.0
TORCH_INDEX ?=
APP_STAMP := $(VENV)/.installed-app
STAMP := $(VENV)/.installed

.PHONY: install demo wheel lint test test-slow test-docker test-kernels bench docs screenshots gpu-pack gpu-check clean delete-recorded-runs

install: $(STAMP)

# What `make demo` needs: torch, the project (editable) with its `all` extra (dashboard, PostgreSQL, sweeps, speech
# metrics) and torchaudio: a .venv of 2.0 GB with the CPU torch (a clean clone, 2026-11-28).
$(APP_STAMP): pyproject.toml tools/install_torchaudio.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install $(if $(TORCH_INDEX),--index-url "$(TORCH_INDEX)") "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -e ".[all]"
	$(BIN)/python tools/install_torchaudio.py
	touch $(APP_STAMP)

# Then what the tests, lint and docs need: the `dev` extra (Triton, whose interpreter the kernel tests run, is
# 1 GB of it).
$(STAMP): $(APP_STAMP)
	$(BIN)/python -m pip install -e ".[dev]"
	touch $(STAMP)

demo: $(APP_STAMP)
	$(BIN)/ortholab fit --config configs/demo/copying_scornn.yaml

# dist/ortholab-<version>-py3-none-any.whl, built with setuptools in a small venv of its own (build/wheel-venv: no
# torch, no demo .venv; seconds from a fresh clone); setuptools builds in build/lib and build/bdist.*, cleared before and
# after (a leftover there would ship a module since removed from the source); build/api-source is the docs'
WHEEL_VENV := build/wheel-venv
wheel:
	test -x $(WHEEL_VENV)/bin/python || $(PYTHON) -m venv $(WHEEL_VENV)
	$(WHEEL_VENV)/bin/python -m pip install --quiet "setuptools>=77"
	rm -rf build/lib build/bdist.*
	$(WHEEL_VENV)/bin/python -m pip wheel --quiet --no-deps --no-build-isolation -w dist .
	rm -rf build/lib build/bdist.*

# ruff's linter and formatter as pyproject configures them (CI runs this before the tests)
lint: $(STAMP)
	$(BIN)/ruff check .
	$(BIN)/ruff format --check .

# the venv's tools (ortholab, hadolint) on PATH for the tests that run them; TEST_WORKERS pytest-xdist processes (most
# tests wait on an `ortholab` child process, so two workers use the two cores), each with its share of the cores'
# threads (tests/conftest.py; docs/testing.md has the times)
TEST_WORKERS ?= 2
test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n $(TEST_WORKERS)

test-slow: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -n $(TEST_WORKERS) -m slow

# The compose stack on a real Docker engine (tests/test_compose_stack.py): one image build, then the stack brought
# up, trained through and taken down. Skips, saying why, where no engine runs (CI starts one: .ci/run).
test-docker: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -m docker

# The numerical tests once more off this CPU's fast paths: torch's kernels without AVX2/AVX-512, MKL's compatible
# code path, one thread. Their bounds (tests/tolerances.py: c n eps scale) must hold on any IEEE 754 CPU.
KERNEL_TESTS := tests/test_cayley.py tests/test_exprnn.py tests/test_nnrnn.py tests/test_scurnn.py \
	tests/test_fcurnn.py tests/test_urnn.py tests/test_ornn.py tests/test_eurnn.py tests/test_srnn.py \
	tests/test_nru.py tests/test_recurrence.py tests/test_fused_recurrences.py tests/test_optimizers.py
test-kernels: $(STAMP)
	ATEN_CPU_CAPABILITY=default MKL_CBWR=COMPATIBLE OMP_NUM_THREADS=1 PATH="$(CURDIR)/$(BIN):$$PATH" \
		$(BIN)/python -m pytest -n $(TEST_WORKERS) $(KERNEL_TESTS)

# Speed as ratios (docs/benchmarks.md): scoRNN at the paper's n = 170 against nn.RNN(relu) at that n and nn.LSTM at
# its 16k budget, T = 784, batch 128. Other measurements: `make bench BENCH="--suite callbacks"`, `ortholab bench --help`.
BENCH ?= --families scornn --sizes 16k --batches 128 --repeats 7 --memory ""
bench: $(STAMP)
	$(BIN)/ortholab bench $(BENCH)

# The GPU check (docs/gpus.md): `make gpu-pack` here puts what the GPU machine lacks into ignored folders (.whl: the
# wheels of tools/gpu_wheels.sh; .gpu-data/mnist: MNIST gzipped, about 11 MB), which the device call carries; there
# `python3 tools/gpu_check.py` runs. `make gpu-check GPU_CHECK_ARGS="--device cpu --tiny"` rehearses it on this CPU.
GPU_CHECK_ARGS ?=
MNIST_DIR ?= $(firstword $(wildcard $(ORTHOLAB_DATA)/mnist) ../shared/data/mnist)
gpu-pack: $(STAMP)
	PYTHON=$(BIN)/python bash tools/gpu_wheels.sh .whl
	mkdir -p .gpu-data/mnist
	for f in $(MNIST_DIR)/*-ubyte; do gzip -9 -c "$$f" > ".gpu-data/mnist/$$(basename "$$f").gz"; done
	du -sh .whl .gpu-data

gpu-check: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python tools/gpu_check.py $(GPU_CHECK_ARGS)

# The documentation site (mkdocs.yml, docs/) into site/, strictly: a broken link or anchor, a missing page, or a
# registered family, task or command without its docs page or section fails the build.
docs: $(STAMP)
	NO_MKDOCS_2_WARNING=1 $(BIN)/mkdocs build --strict

# docs/images/: one screenshot per dashboard page, from a store of small real runs trained here (headless Chromium)
screenshots: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python tools/screenshots.py

# `clean` removes what the install and the tests made; recorded runs (runs/, the default store) stay. Deleting
# them takes the explicitly named target below.
clean:
	rm -rf $(VENV) .pytest_cache site

delete-recorded-runs:
	rm -rf runs
