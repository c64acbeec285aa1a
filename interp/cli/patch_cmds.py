"""`interp patch`: activation patching grids from a pairs file or a built-in task."""

from __future__ import annotations

from typing import Optional

import typer

from interp.errors import InvalidInputError
from interp.cli.options import DEVICE, DEVICE_MAP, DTYPE, JSON, MODEL, OUT, OVERWRITE, REVISION
from interp.cli.options import finite, load_options, parse_ints
from interp.cli.output import progress_bar
from interp.cli.patch_pairs import TASKS, _check_corrupt, _ioi_scores, _pairs
from interp.cli.patch_path import path
from interp.cli.patch_print import _print
from interp.runtime.jsonio import dumps
from interp.cli.runs import open_run, write_result

__all__ = ["METHOD_OPTIONS", "TASKS", "patch"]


PATCH_MAX_MEMORY = typer.Option(None, "--max-memory", help="Memory per device with --device-map, e.g. "
                                "0=20GiB,1=20GiB,cpu=60GiB: accelerate's placement limits.")


# options that mean something to some --method only (a given option another method would ignore is refused)
# token positions the rows of an exact grid may recompute without --max-tokens: a full resid_pre grid of 20
# 1024-token pairs on a 30-layer model is 3e8; a pair 35 times past tiny-qwen2's trained length, 1e10
MAX_TOKENS = 1e9
METHOD_OPTIONS = {"max_tokens": ("exact",), "senders": ("path",), "receivers": ("path",), "via": ("path",),
                  "verify_top": ("atp", "atp-qk"), "verify_sample": ("atp", "atp-qk"),
                  "site": ("exact", "atp", "atp-qk"), "positions": ("exact", "atp", "atp-qk"),
                  "align": ("exact", "atp", "atp-qk")}


def _check_method_options(ctx, method: str, via: str, receivers: Optional[str]) -> None:
    """Refuse options the chosen --method would ignore (the result would record settings that did not shape it),
    and --receivers with --via logits (a direct effect has no receivers: the result would list receivers and a
    pass through them that never ran). Checked before the model loads."""
    from interp.cli.options import given

    for name, methods in METHOD_OPTIONS.items():
        if method not in methods and given(ctx, name):
            flag = "--" + name.replace("_", "-")
            raise InvalidInputError(f"{flag} applies to --method {' / '.join(methods)} only, not to --method {method}: "
                                    f"drop it (or choose one of those methods)")
    if method == "path" and via == "logits" and receivers:
        raise InvalidInputError("--via logits measures the senders' direct effect on the logits, through no "
                                "receiver: drop --receivers, or choose --via q, k or v to go through them")


def patch(ctx: typer.Context, model: Optional[str] = MODEL,
          pairs: Optional[str] = typer.Option(None, "--pairs", help='JSONL: {"clean": ..., "corrupt": ..., "answer": '
                                              '" X", "wrong": " Y"} per line; clean and corrupt of a pair must '
                                              'tokenise to the same length. Optional "anchor": text of the clean '
                                              "prompt or a token index (BOS included; negative from the end), "
                                              "position 0 under --align anchor."),
          task: Optional[str] = typer.Option(None, "--task", help="Built-in pairs instead of --pairs: niah (needle "
                                             "value replaced; the default) | repeated (first copy corrupted at one "
                                             "position: induction) | ioi (indirect object identification, "
                                             "held-out names and templates; the corrupt prompt per --corrupt)."),
          site: str = typer.Option("resid_pre", "--site", help="Comma-separated: resid_pre, resid_post, attn_out, "
                                   "mlp_out (layer x position); head_out (layer x head, all positions); "
                                   "head_out_by_pos (layer x position x head); q (query heads); k, v (key-value "
                                   "heads)."),
          direction: str = typer.Option("denoising", "--direction", help="denoising (clean into corrupt) | noising "
                                        "(corrupt into clean)."),
          metric: str = typer.Option("logit_diff", "--metric", help="logit_diff (logit(answer) - logit(wrong)) | "
                                     "logprob (log p(answer)) | prob (p(answer)) | kl (KL(donor || run) of the "
                                     "next-token distributions, nats; exact patching only)."),
          raw: bool = typer.Option(False, "--raw", help="Report the raw metric, not (patched - base) / (donor - base)."),
          align: str = typer.Option("end", "--align", help="Position axis: end (-1 = last token) | anchor (0 = each "
                                    "pair's anchor: the needle value (niah), the corrupted token (repeated), the "
                                    "indirect object's first mention (ioi), each line's \"anchor\" (--pairs))."),
          positions: Optional[str] = typer.Option(None, "--positions", help="Only these positions of the axis, e.g. "
                                                  "-1 or -3,-2,-1 (default: all)."),
          max_batch: Optional[int] = typer.Option(None, "--max-batch", min=1, help="(pair, cell) rows per forward pass "
                                                  "(default: about 16k tokens per pass)."),
          lengths: str = typer.Option("256", "--lengths", help="niah: context lengths. Smaller than the other "
                                      "commands' 512 (with 3 depths and 3 seeds, not 5 and 4) because every cell of "
                                      "a grid is a forward row: a full resid_pre grid at 256 tokens is 9 pairs x "
                                      "layers x 256 positions."),
          depths: str = typer.Option("0.25,0.5,0.75", "--depths", help="niah: needle depths (see --lengths)."),
          seeds: int = typer.Option(3, "--n-seeds", min=1, help="niah: seeds per (length, depth) (see --lengths); "
                                    "repeated: sequences."),
          copy_length: int = typer.Option(20, "--copy-length", min=2, help="repeated: tokens per copy."),
          n_pairs: int = typer.Option(32, "--n-pairs", min=1, help="ioi: clean/corrupt pairs."),
          corrupt: Optional[str] = typer.Option(None, "--corrupt", help="ioi: what the corrupt prompt changes "
                                                "(same template, order and fill): both (the default: both names "
                                                "replaced by two others; metric logit(IO) - logit(the corrupt IO)) "
                                                "| abc (Wang et al.'s ABC: the IO, S and repeated-S mentions "
                                                "replaced by three distinct other names; metric IO - S) | s2 (only "
                                                "the repeated S mention replaced by another name; metric IO - S). "
                                                "Writes ioi.json: IO - S and accuracy with CIs, clean and corrupt."),
          seed: int = typer.Option(0, "--seed", help="Seed of the built-in pairs and the bootstrap."),
          n_boot: int = typer.Option(1000, "--n-boot", min=1, help="Bootstrap resamples (over pairs) per cell."),
          method: str = typer.Option("exact", "--method", help="exact (one patched row per cell) | atp (attribution "
                                     "patching: 2 forwards + 1 backward) | atp-qk (AtP with q/k attention "
                                     "recomputed exactly) | path (path patching: --senders, --receivers, --via)."),
          senders: Optional[str] = typer.Option(None, "--senders", help="path: sender heads, e.g. L0H0,L0H2; "
                                                "'L1H*' is every head of layer 1."),
          receivers: Optional[str] = typer.Option(None, "--receivers", help="path: receiver heads, e.g. L1H1."),
          via: str = typer.Option("k", "--via", help="path: the receivers' input the senders reach them through: "
                                  "q | k | v, or logits (the senders' direct effect, no receivers)."),
          verify_top: int = typer.Option(10, "--verify-top", min=0, help="atp*: exact patching of the top cells by "
                                         "|estimate| per site."),
          verify_sample: int = typer.Option(20, "--verify-sample", min=0, help="atp*: ... and of this many random other "
                                            "cells."),
          max_tokens: float = typer.Option(MAX_TOKENS, "--max-tokens", min=1, callback=finite, help="exact: refuse a "
                                           "grid whose (pair, cell) rows would recompute more token positions than "
                                           "this, counted before it starts; raise it to run a larger grid on "
                                           "purpose."),
          device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = PATCH_MAX_MEMORY, model_dtype: Optional[str] = DTYPE, out: Optional[str] = OUT,
          overwrite: bool = OVERWRITE, as_json: bool = JSON, csv: bool = typer.Option(False, "--csv", help="Print the tidy table on stdout.")):
    """Activation patching: every cell of the grid, many cells per forward pass (equal to one pass per cell)."""
    from interp.patching import PatchingConfig, run_patching

    cfg = PatchingConfig(sites=tuple(site.split(",")), direction=direction, metric=metric, normalize=not raw,
                         max_batch=max_batch, align=align, n_boot=n_boot, seed=seed,
                         positions=None if positions is None else parse_ints(positions, "--positions"))
    from interp.patching.attribution import METHODS as ATP_METHODS

    if method not in ("exact", "path") + ATP_METHODS:
        raise InvalidInputError(f"--method {method!r}: valid methods are exact, {', '.join(ATP_METHODS)}, path")
    _check_method_options(ctx, method, via, receivers)
    if metric == "kl" and method != "exact":
        raise InvalidInputError(f"--metric kl needs exact patching (the donor run's whole distribution); --method "
                                f"{method} takes logit_diff, logprob or prob")
    if max_memory is not None and device_map is None:
        raise InvalidInputError("patch sizes its passes by tokens (--max-batch), not by a memory budget: "
                                "--max-memory applies with --device-map only")
    load = load_options(model, device, model_dtype, revision, device_map, max_memory)
    if method == "path":
        return path(load, pairs, task, lengths, depths, seeds, copy_length, seed, cfg, senders, receivers, via, out,
                    overwrite, as_json, n_pairs, corrupt)
    _check_corrupt(corrupt, task)
    o, m = open_run("patch", out, overwrite, load)
    ps = _pairs(m, pairs, task, lengths, depths, seeds, copy_length, seed, n_pairs, corrupt)
    from interp.patching.plan import planned_work

    if method == "exact":
        total, tokens = planned_work(m, ps, cfg)
        what = "patching rows"
        if tokens > max_tokens:
            n = [p.n for p in ps]
            raise InvalidInputError(f"this grid's {total:,} (pair, cell) rows would recompute {tokens:.3g} token "
                                    f"positions ({len(ps)} pairs of {min(n):,}{'' if min(n) == max(n) else f'-{max(n):,}'}"
                                    f" tokens, sites {','.join(cfg.sites)}), over --max-tokens {max_tokens:.3g}: nothing "
                                    f"was run; narrow it (--site, --positions, shorter pairs) or pass --max-tokens "
                                    f"{tokens:.3g} to run it as asked")
    else:
        total, what = len(cfg.sites), f"{method} sites"
    prog, advance = progress_bar(total, what)
    with prog:
        if method == "exact":
            res = run_patching(m, ps, cfg, progress=advance)
        else:
            from interp.patching import run_attribution

            res = run_attribution(m, ps, cfg, method=method, verify_top=verify_top, verify_sample=verify_sample,
                                  progress=advance)
    d = write_result(res, o, "patching", as_json, csv)
    with open(o / "pairs.jsonl", "w") as f:
        for p in ps:
            f.write(dumps({"source": p.source, "clean_ids": p.clean, "corrupt_ids": p.corrupt, "answer": p.answer,
                                "wrong": p.wrong, "anchor": p.anchor, "info": p.info}) + "\n")
    ioi = _ioi_scores(m, ps, o, task, n_boot, seed)
    if not (as_json or csv):
        _print(d, o, ioi)
