#!/usr/bin/env bash
# The precision study's runs (docs/precision.md): the same commands on one real model in one model dtype, into
# runs/precision/MODEL/DTYPE/<analysis>. Run it once per dtype (float32, bfloat16) and compare the two folders with
# `python bench/precision_compare.py MODEL`. One torch thread, so two of these run side by side on two cores.
#
#     bash bench/precision_runs.sh smollm2-135m bfloat16      # or float32; gemma3-270m likewise
#     SKIP="rope-zero" bash bench/precision_runs.sh gemma3-270m float32   # leave analyses out
#
# The grid: retrieval detection at the grid of docs/results-real.md (every length, 5 depths x 4 seeds), induction
# with its 10 random draws, copy suppression, the phase-or-content band patches and the streaming scan as
# published; masking, RoPE zeroing and patching on a declared reduced grid
# (12 NIAH prompts at 1024 tokens, fewer random draws; 64 IOI pairs), because their float32 runs cost hours; the
# needle-normalised and long-context retrieval runs and IOI's other two corruptions (resid_pre) as published.
# Each run's folder is skipped when it already holds a finished run (run.json), so an interrupted battery resumes.
# The random controls are drawn as in docs/results-real.md (--control-exclude none, --random-dims any), so the
# float32 runs reproduce the published ones.
set -u
M=${1:?model alias (smollm2-135m | gemma3-270m)}
D=${2:?model dtype (float32 | bfloat16)}
I=${INTERP:-.venv/bin/interp}
R=${ROOT:-runs/precision}/$M/$D
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=1 HF_HUB_OFFLINE=1 PYTHONUNBUFFERED=1
NIAH=(--haystack sherlock-holmes --depths 0,0.25,0.5,0.75,1 --n-seeds 4)
SMALL=(--haystack sherlock-holmes --depths 0,0.5,1 --n-seeds 4 --lengths 1024)
case $M in
  smollm2-135m) LENGTHS=1024,2048,4096; LONG=8192; POOL=(); DOSES=0,4,8; BAND=4; GROUP=(--by-group) ;;
  gemma3-270m) LENGTHS=1024,2048; LONG=4096,8192; POOL=(--random-pool any); DOSES=0,16,32; BAND=16; GROUP=() ;;
  *) echo "unknown model $M" >&2; exit 2 ;;
esac

SKIP=" ${SKIP:-} "  # analyses to leave out, e.g. SKIP="rope-zero probe"
run() {  # run NAME ARGS...: one analysis into $R/NAME, unless it is there already (or in $SKIP)
    local name=$1; shift
    if [ -f "$R/$name/run.json" ]; then echo "== $M $D $name: done already"; return 0; fi
    if [[ "$SKIP" == *" $name "* ]]; then echo "== $M $D $name: skipped (SKIP)"; return 0; fi
    echo "== $M $D $name: interp $*"
    "$I" "$@" --model "$M" --model-dtype "$D" --overwrite --out "$R/$name" > "$R.$name.log" 2>&1
    echo "   exit $? ($(tail -n 1 "$R.$name.log" | cut -c1-150))"
}
mkdir -p "$R"
run retrieval detect retrieval "${NIAH[@]}" --lengths "$LENGTHS"
run induction detect induction --draws 10 --control-exclude none
run copy-suppression detect copy-suppression --texts sherlock-holmes
run ablate ablate --heads retrieval --from "$R/retrieval" "${SMALL[@]}" --draws 3 "${POOL[@]}"
run rope-profile rope-profile --heads retrieval --from "$R/retrieval" --haystack sherlock-holmes --n-texts 16 \
    --n-tokens 512
run rope-zero rope-zero --heads retrieval --from "$R/retrieval" "${SMALL[@]}" --unit pairs --dims "$DOSES" \
    --random-draws 2 --head-draws 2 --random-dims any
# phase or content (docs/results-real.md): the lowest band of the retrieval heads patched four ways, as published
for mode in zero phase content magnitude; do
  run "rope-mode-$mode" rope-zero --heads retrieval --from "$R/retrieval" "${NIAH[@]}" --lengths 1024 --unit pairs \
      --dims "0,$BAND" --mode "$mode" --random-draws 2 --head-draws 1
done
run rope-decompose rope-profile --heads retrieval --from "$R/retrieval" --decompose "${NIAH[@]}" --lengths 1024 \
    --n-texts 2
# streaming heads: each head (Gemma-3) or KV group (SmolLM2) windowed alone, as published
run streaming detect streaming --haystack sherlock-holmes --lengths 512 --depths 0,0.25,0.5 --n-seeds 2 \
    --window 64 --sinks 4 --texts 2 "${GROUP[@]}" --from "$R/retrieval"
# retrieval scored per needle token (--score-norm needle) and at the long lengths, as published
run retrieval-needle detect retrieval "${NIAH[@]}" --lengths 1024,2048 --score-norm needle
run retrieval-long detect retrieval "${NIAH[@]}" --lengths "$LONG"
if [ "$M" = smollm2-135m ]; then
  run ioi-resid patch --task ioi --n-pairs 64 --corrupt abc --site resid_pre
  # the other two corruptions of docs/results-real.md (both names replaced; the repeated name only)
  run ioi-resid-both patch --task ioi --n-pairs 64 --corrupt both --site resid_pre
  run ioi-resid-s2 patch --task ioi --n-pairs 64 --corrupt s2 --site resid_pre
  run ioi-atp patch --task ioi --n-pairs 64 --corrupt abc --site head_out,resid_pre --method atp-qk \
      --verify-top 20 --verify-sample 20
  run probe probe -n 256 --skip-first 1
fi
echo "== $M $D: finished"
