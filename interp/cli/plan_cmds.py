"""`interp plan`: the memory planner (interp.models.memory) on a model's config, before any run."""

from __future__ import annotations

from typing import Optional

import typer

from interp.errors import InvalidInputError
from interp.cli.options import AUTO, model_label, parse_batch_size
from interp.cli.options import finite, parse_ints
from interp.runtime.jsonio import dumps

_PARTS = ("weights", "kv_cache", "activations", "logits", "attention_rows", "clean_cache", "peak")


def plan(model: Optional[str] = typer.Option(None, "--model", "-m", help="Alias (see `interp models`), local "
                                             "checkpoint dir, or Hub id: only its config is read."),
         lengths: str = typer.Option("4096", "--lengths", help="Prompt lengths in tokens, comma-separated."),
         batch_size=typer.Option("auto", "--batch-size", parser=parse_batch_size, metavar="N|auto",
                                 help="Check this batch size, or auto: the largest that fits the budget."),
         max_batch: int = typer.Option(512, "--max-batch", min=1, help="Upper bound of the auto batch size "
                                       "(e.g. the number of prompts)."),
         analysis: str = typer.Option("ablate", "--analysis", help="detect, ablate, patch or cache: which "
                                      "logits, attention rows and cached sites the run keeps."),
         sites: Optional[str] = typer.Option(None, "--sites", help="Sites whose activations are held (patch: the "
                                             "clean caches, default resid_pre; cache: default resid)."),
         new_tokens: int = typer.Option(0, "--new-tokens", min=0, help="Decoded tokens (the KV cache spans "
                                        "length + new tokens)."),
         budget_gib: Optional[float] = typer.Option(None, "--budget-gib", min=0.0, callback=finite,
                                                    help="Memory budget in GiB (default: 0.9 x the device's "
                                                    "free memory)."),
         device: Optional[str] = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... whose free memory "
                                              "is the budget (default: cuda if available)."),
         model_dtype: Optional[str] = typer.Option(None, "--model-dtype", help="auto, float32, bfloat16, float16 "
                                                   "(default: float32 on CPU, bf16 on CUDA)."),
         as_json: bool = typer.Option(False, "--json", help="Print the plan as JSON on stdout.")):
    """Estimate peak memory per prompt length (weights, KV cache, activations, logits, attention rows, clean
    caches) from the config alone, and the largest batch that fits: one row per length, on stdout, whether
    it fits the budget or not (a plan is an answer; each row says which)."""
    from interp.models.memory import ANALYSES, estimate, gib
    from interp.runtime.devices import SAFETY, default_budget, resolve_device

    if analysis not in ANALYSES:
        raise InvalidInputError(f"--analysis {analysis!r}: choose from {', '.join(ANALYSES)}")
    name = model_label(model)
    lens = parse_ints(lengths, "--lengths")
    if min(lens) < 1:
        raise InvalidInputError(f"--lengths must be positive, got {lengths!r}")
    dev = resolve_device(device)
    if model_dtype is not None and model_dtype.strip().lower() == "auto":
        from interp.runtime.precision import auto_dtype

        model_dtype = auto_dtype(dev).used
    dtype = model_dtype or ("float32" if dev.type == "cpu" else "bfloat16")
    budget = int(budget_gib * 2 ** 30) if budget_gib is not None else default_budget(dev)
    kw = dict(new_tokens=new_tokens, sites=tuple(s.strip() for s in sites.split(",") if s.strip())
              if sites else None)
    given = batch_size != AUTO
    ones = estimate(name, lens, 1, dtype, analysis, **kw)
    largest = [0 if o.peak > budget else int(min((budget - o.weights) // o.per_row, max_batch)) for o in ones]
    if given:
        batches = [batch_size] * len(lens)
    else:  # auto: each length's largest batch (batch 1 where even that does not fit, to show what it needs)
        batches = [max(1, b) for b in largest]
    plans = [estimate(name, t, b, dtype, analysis, **kw) for t, b in zip(lens, batches)]
    fits = [p.peak <= budget for p in plans]
    worst = max(plans, key=lambda p: p.peak)
    run_batch = batch_size if given else (min(largest) if all(largest) else 0)
    budget_source = "--budget-gib" if budget_gib is not None else f"{SAFETY} x free memory of {dev}"
    result = {"model": name, "analysis": analysis, "dtype": worst.dtype, "device": str(dev), "budget": budget,
              "budget_source": budget_source, "batch_size": run_batch,
              "batch_size_source": "--batch-size" if given else f"auto (at most --max-batch {max_batch}; the largest "
                                                                "that fits every length, 0 when one does not fit)",
              "fits": all(fits), "n_params": worst.n_params,
              "plans": [{**p.to_dict(), "batch_size": b, "fits": f, "largest_batch": m}
                        for p, b, f, m in zip(plans, batches, fits, largest)]}
    if as_json:
        typer.echo(dumps(result, indent=2))
        return
    from rich.table import Table

    from interp.cli.output import print_line, stdout_console

    out = stdout_console()
    t = Table(title=f"{name}: {analysis}, {worst.dtype}, budget {gib(budget)} ({budget_source})")
    for col in ("length", "batch", "fits", "largest batch"):
        t.add_column(col, justify="right")
    for part in _PARTS:
        t.add_column(part, justify="right")
    for p, b, f, m in zip(plans, batches, fits, largest):
        d = p.to_dict()
        t.add_row(str(p.length), str(b), "yes" if f else "no", str(m) if m else "none (batch 1 does not fit)",
                  *(gib(d[part]) for part in _PARTS))
    out.print(t)
    out.print(f"{worst.n_params:,} parameters; batch size {'given' if given else 'auto'}: "
              f"{run_batch if run_batch else 'none fits every length'}", highlight=False)
    for p, f in zip(plans, fits):
        if not f:
            out.print(f"note: {p.length} tokens at batch {p.batch_size} needs {gib(p.peak)} (weights {gib(p.weights)}, "
                      f"per row {gib(p.per_row)}), over the budget of {gib(budget)}: use a shorter length, a smaller "
                      f"dtype (--model-dtype), a bigger device, or another budget (--budget-gib)", highlight=False)
    for note in dict.fromkeys(n for p in plans for n in p.notes):
        print_line(note, "note", out)
