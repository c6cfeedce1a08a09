# Two commands on a fresh machine: `make demo` (train scoRNN on copying, record it) and `make test`.
PYTHON ?= python3
VENV := .venv
BIN := $(VENV)/bin
# Installed before the project, so the CPU wheel on disk is used where present (see README).
TORCH_SPEC ?= torch==2.13.0
STAMP := $(VENV)/.installed

.PHONY: install demo test test-slow bench clean

install: $(STAMP)

$(STAMP): pyproject.toml tools/install_torchaudio.py
	test -x $(BIN)/python || $(PYTHON) -m venv $(VENV)
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install "$(TORCH_SPEC)"
	$(BIN)/python -m pip install -e ".[dev]"
	$(BIN)/python tools/install_torchaudio.py
	touch $(STAMP)

demo: $(STAMP)
	$(BIN)/ortholab fit --config configs/demo/copying_scornn.yaml

# the venv's tools (ortholab, hadolint) on PATH for the tests that run them
test: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest

test-slow: $(STAMP)
	PATH="$(CURDIR)/$(BIN):$$PATH" $(BIN)/python -m pytest -m slow

bench: $(STAMP)
	$(BIN)/python benchmarks/bench_scornn.py

clean:
	rm -rf $(VENV) runs .pytest_cache
