#!/usr/bin/env bash
# The GPU check: one script, about 10-12 minutes on one H200 (most of it process start: every measurement runs in
# a fresh process, ~13.5 s each there), that writes every number it measures under $OUT (default
# bench/results/gpu/). Run it from the repository root in an environment that has a CUDA build of torch and
# interp installed (`pip install -e ".[dev]"` with your torch kept):
#
#     bash bench/gpu_check.sh                 # or: PY=/path/to/python OUT=/tmp/gpu bash bench/gpu_check.sh
#
# Without a venv (a system python3 that has torch, the repository on PYTHONPATH, no `interp` entry point):
#     PY=python3 bash bench/gpu_check.sh      # the CLI then runs as `python3 ENTRY.py`, torchrun as
#                                             # `python3 -m torch.distributed.run` (or set INTERP=, TORCHRUN=)
# STEPS="sweep-1 sweep-2 sweep-compare" runs only the named steps (a rerun of the ones that failed), adding their
# lines to $OUT/steps.jsonl. Where one command may run 10 minutes at most, run it as two:
#     STEPS="parity scale" bash bench/gpu_check.sh                                  # limits 420 s
#     STEPS="overhead sweep-1 sweep-2 sweep-compare patching" bash bench/gpu_check.sh  # limits 365 s
#
# Steps (each under its own time limit; a failing step is recorded and the next one still runs):
#   1. parity on CUDA in float32 and bfloat16 (tests/models/test_parity_device.py; its docstring states the
#      bf16 tolerances): logits, attention rows vs eager weights, head ablation vs a hook reference
#   2. bench/scale.py on the GPU: the Qwen2.5-7B-geometry rehearsal model at 4K-32K tokens, bf16, 3 repeats
#   3. bench/overhead.py on the GPU: interp's wrapper and interventions vs plain transformers
#   4. a sharded sweep: torchrun with 2 ranks on this GPU (nccl + gloo) vs one process, same result
#   5. exact patching on the Qwen2.5-7B geometry (random weights, REDUCED to 4 layers, float32): interp's batched
#      rows (with and without layer skipping) vs one forward per cell (hooks, TransformerLens, nnsight) on
#      resid_pre (32 of 256 positions), head_out and head_out_by_pos, 8 pairs of 256 tokens; the baselines run
#      16 random cells each, time scaled to the grid; every value equal within 1e-4 (bench/patching.py)
# The memory planner is checked against torch.cuda.max_memory_allocated inside step 2 (scale.py's JSON has
# measured/estimated per mode). The limits add up to 785 s on a GPU (twice each in the CPU dry run). On the H200:
# parity 24 s, sweeps 19 + 18 s, patching 59 s, measured; scale ~310 s (a sanity process + 22 measurements) and
# overhead ~150 s (part 1 + 9 measurements), estimated from their partial runs at ~13.5 s a process.
# Results: $OUT/steps.jsonl (one line per step: name, exit code, seconds), $OUT/*.log, $OUT/*.json.
# Status: run on an NVIDIA H200 on 2026-12-04 (torch 2.11.0+cu130, transformers 5.17.0): parity, sweeps and patching
# passed; scale and overhead ran out of their limits then (180 s and 70 s, since raised) and were finished in
# separate calls (overhead's 8192-token eager measurement was not). Results: bench/results/gpu/ (its README.md
# says which call wrote which file) and docs/benchmarks.md ("GPU results").
set -u
PY=${PY:-.venv/bin/python}
OUT=${OUT:-bench/results/gpu}
DEVICE=${DEVICE:-cuda}  # DEVICE=cpu: a dry run of the script itself (quick benches, CPU parity in bf16)
QUICK=(); SLOW=1; [ "$DEVICE" = cpu ] && QUICK=(--quick) && SLOW=2  # the dry run's limits: twice the GPU's
mkdir -p "$OUT"
[ -z "${STEPS:-}" ] && : > "$OUT/steps.jsonl"
export HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
export PYTHONPATH="$PWD${PYTHONPATH:+:$PYTHONPATH}"  # `import interp` from this checkout, installed or not

# the CLI: $INTERP, else the entry point beside $PY (a venv), else `$PY ENTRY.py` (interp.cli.main)
BIN=$(dirname "$(command -v "$PY" || echo "$PY")")
ENTRY=
if [ -n "${INTERP:-}" ]; then CLI=("$INTERP")
elif [ -x "$BIN/interp" ]; then CLI=("$BIN/interp")
else
    ENTRY=$(mktemp --suffix=.py)
    printf 'import sys\nfrom interp.cli import main\nsys.argv[0] = "interp"\nsys.exit(main())\n' > "$ENTRY"
    CLI=("$PY" "$ENTRY")
fi
if [ -n "${TORCHRUN:-}" ]; then LAUNCH=("$TORCHRUN")
elif [ -x "$BIN/torchrun" ]; then LAUNCH=("$BIN/torchrun")
else LAUNCH=("$PY" -m torch.distributed.run)
fi
# torchrun starts an executable with --no-python, a .py file with its own Python
if [ -n "$ENTRY" ]; then RANKED=("$ENTRY"); else RANKED=(--no-python "${CLI[0]}"); fi

step() {  # step NAME LIMIT_SECONDS COMMAND...
    local name=$1 limit=$(( $2 * SLOW )); shift 2
    if [ -n "${STEPS:-}" ] && [[ " $STEPS " != *" $name "* ]]; then return; fi
    local t0; t0=$(date +%s)
    echo "== $name (limit ${limit}s): $*"
    timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
    local rc=$?
    echo "{\"step\": \"$name\", \"rc\": $rc, \"seconds\": $(( $(date +%s) - t0 ))}" | tee -a "$OUT/steps.jsonl"
    tail -n 5 "$OUT/$name.log"
}

{ nvidia-smi || true; "$PY" -c "import torch, transformers, interp; print('torch', torch.__version__, 'cuda', torch.version.cuda, \
'gpu', torch.cuda.get_device_name(0) if torch.cuda.is_available() else None, 'transformers', transformers.__version__, 'interp', interp.__version__)"; } \
    > "$OUT/device.txt" 2>&1
cat "$OUT/device.txt"

step parity 60 env INTERP_TEST_DEVICE="$DEVICE" INTERP_TEST_DTYPES=float32,bfloat16 \
    "$PY" -m pytest -q tests/models/test_parity_device.py --junitxml "$OUT/parity.xml"

if [ "$DEVICE" = cpu ]; then LENGTHS=(--lengths 512 --modes plain,ablate,greedy,detect); else LENGTHS=(--lengths 4096,8192,16384,32768 --repeats 3); fi
step scale 360 "$PY" bench/scale.py --child-timeout 90 --device "$DEVICE" "${LENGTHS[@]}" "${QUICK[@]}" \
    --out "$OUT/scale-$DEVICE.json"

step overhead 180 "$PY" bench/overhead.py --device "$DEVICE" "${QUICK[@]}" --out "$OUT/overhead-$DEVICE.json"

SWEEP=(detect retrieval --model tiny-qwen2 --device "$DEVICE" --lengths 512,1024 --n-seeds 4 --batch-size 4)
rm -rf "$OUT/sweep-1" "$OUT/sweep-2"
step sweep-1 30 "${CLI[@]}" "${SWEEP[@]}" --out "$OUT/sweep-1"
step sweep-2 45 "${LAUNCH[@]}" --nproc-per-node 2 "${RANKED[@]}" "${SWEEP[@]}" --out "$OUT/sweep-2"
step sweep-compare 10 "$PY" - "$OUT" <<'EOF'
import json, sys
out = sys.argv[1]
a, b = (json.load(open(f"{out}/sweep-{n}/retrieval.json")) for n in (1, 2))
pa, pb = a.pop("provenance"), b.pop("provenance")
same = a == b
close = a["heads"] == b["heads"] and max(abs(x - y) for ra, rb in zip(a["scores"], b["scores"])
                                           for x, y in zip(ra, rb)) <= 1e-6
print(json.dumps({"identical": same, "same_heads_scores_1e-6": close, "world_size": pb["world_size"],
                  "sweep": json.load(open(f"{out}/sweep-2/run.json"))["sweep"]}))
sys.exit(0 if close else 1)
EOF

if [ "$DEVICE" = cpu ]; then
    PATCH=(--random-config '{"hidden_size":64,"num_attention_heads":4,"num_key_value_heads":2,"head_dim":16,"intermediate_size":128,"vocab_size":1000,"num_hidden_layers":3}' --quick --baseline-cells 64)
else
    PATCH=(--random-config qwen7b --seq 256 --positions 32 --baseline-cells 16)
fi
step patching 100 "$PY" bench/patching.py --device "$DEVICE" "${PATCH[@]}" --pairs 8 \
    --skip atp,atp-qk --long 0 --out "$OUT/patching-$DEVICE.json"

[ -n "$ENTRY" ] && rm -f "$ENTRY"
echo "== done: $OUT/steps.jsonl"
cat "$OUT/steps.jsonl"
