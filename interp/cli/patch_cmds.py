"""`interp patch`: activation patching grids from a pairs file or a built-in task."""

from __future__ import annotations

from typing import Optional

import typer

from interp.errors import InvalidInputError
from interp.cli.options import finite, parse_ints
from interp.cli.output import progress_bar
from interp.runtime.jsonio import dumps
from interp.cli.runs import final_path, write_result
from interp.cli.options import DEVICE, DEVICE_MAP, DTYPE, JSON, MODEL, OUT, OVERWRITE, REVISION
from interp.cli.runs import open_run

TASKS = ("niah", "repeated", "ioi")


PATCH_MAX_MEMORY = typer.Option(None, "--max-memory", help="Memory per device with --device-map, e.g. "
                                "0=20GiB,1=20GiB,cpu=60GiB: accelerate's placement limits.")


def _check_corrupt(corrupt, task) -> None:
    """--corrupt: ioi only, one of the IOI corruptions (checked before the model loads)."""
    from interp.patching.pairs import IOI_CORRUPTIONS

    if corrupt is None:
        return
    if task != "ioi":
        raise InvalidInputError("--corrupt applies to --task ioi only")
    if corrupt not in IOI_CORRUPTIONS:
        raise InvalidInputError(f"--corrupt {corrupt!r}: valid are {', '.join(IOI_CORRUPTIONS)}")


def _pairs(m, pairs_file, task, lengths, depths, seeds, copy_length, seed, n_pairs=32, corrupt=None):
    from interp.patching import ioi_pairs, niah_pairs, read_pairs, repeated_pairs
    from interp.cli.options import niah_config
    from interp.tasks.niah import niah_for_model

    if pairs_file is not None and task is not None:
        raise InvalidInputError("give --pairs FILE or --task, not both")
    _check_corrupt(corrupt, task)
    if pairs_file is not None:
        return read_pairs(pairs_file, m.tokenizer)
    task = task or "niah"
    if task not in TASKS:
        raise InvalidInputError(f"--task {task!r}: valid built-in tasks are {', '.join(TASKS)} (or --pairs FILE)")
    if task == "niah":
        if m.tokenizer is None:
            raise InvalidInputError("the niah task needs a tokenizer: this model was loaded without one")
        # the corpus needles on every model: value patching swaps their one-token code word
        niah = niah_for_model(m, niah_config(lengths, depths, seeds, None, "corpus", "\\n", None), decode=False)
        return niah_pairs(m.tokenizer, niah, seed)
    if task == "ioi":
        # held-out names x held-out templates of interp.corpus.ioi; the corrupt prompt per --corrupt
        return ioi_pairs(m.tokenizer, n=n_pairs, seed=seed, corrupt=corrupt or "both")
    return repeated_pairs(m, length=copy_length, n=seeds, seed=seed)


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
    if method == "path":
        return _path(model, device, model_dtype, revision, device_map, max_memory, pairs, task, lengths, depths, seeds, copy_length, seed, cfg, senders,
                     receivers, via, out, overwrite, as_json, n_pairs, corrupt)
    _check_corrupt(corrupt, task)
    o, m = open_run("patch", out, overwrite, model, device, model_dtype, revision, device_map, max_memory)
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


def _path(model, device, model_dtype, revision, device_map, max_memory, pairs, task, lengths, depths, seeds, copy_length, seed, cfg, senders, receivers, via,
          out, overwrite, as_json, n_pairs=32, corrupt=None) -> None:
    from interp.patching.path import VIAS, run_path_patching
    from interp.sites import as_heads

    if via not in VIAS:
        raise InvalidInputError(f"--via {via!r}: valid are {', '.join(VIAS)}")
    if not senders:
        raise InvalidInputError("--method path needs --senders, e.g. --senders L0H0")
    _check_corrupt(corrupt, task)
    o, m = open_run("patch", out, overwrite, model, device, model_dtype, revision, device_map, max_memory)
    snd, rcv = (as_heads(h or "", n_heads=m.spec.n_heads) for h in (senders, receivers))
    ps = _pairs(m, pairs, task, lengths, depths, seeds, copy_length, seed, n_pairs, corrupt)
    res = run_path_patching(m, ps, snd, rcv, via=via, config=cfg)
    write_result(res, o, "path_patching", as_json)
    ioi = _ioi_scores(m, ps, o, task, cfg.n_boot, seed)
    if as_json:
        return
    from interp.cli.output import console

    c = console()
    if ioi is not None:
        _print_ioi(c, ioi)
    target = f"via {via} of {', '.join(res.receivers)}" if via != "logits" else "directly on the logits"
    c.print(f"[bold]{res.model}[/]: path patching ({res.direction}) of {', '.join(res.senders)} {target}; "
            f"{'normalised ' if res.normalized else ''}{res.metric}, {len(ps)} pairs")
    import numpy as np

    from interp.patching.result import unstable_gaps

    shaky = unstable_gaps(res.donor_value, res.base_value) if res.normalized else []
    gap = np.asarray(res.donor_value) - np.asarray(res.base_value)
    if shaky:
        c.print(f"  [yellow]warning[/]: {len(shaky)} of {len(ps)} pairs have a donor - base gap below a quarter of the "
                "mean gap or of the other sign, so per-pair means can be dominated by them: the ratio of means (sum "
                "of patched - base over sum of gaps) follows each", highlight=False)
    for name, e in res.effects.items():
        ci = "" if e["lo"] is None else f" [{e['lo']:+.3f}, {e['hi']:+.3f}]"
        pp = np.asarray(e["per_pair"], dtype=float)
        ok = np.isfinite(pp)
        pool = f"; ratio of means {(pp[ok] * gap[ok]).sum() / gap[ok].sum():+.3f}" if shaky and ok.any() else ""
        c.print(f"  {name}: {e['mean']:+.3f}{ci}{pool}")
    if res.receiver_inputs:
        c.print(f"  patched in pass 2: {'; '.join(res.receiver_inputs)}")
    c.print(f"written to {final_path(o)}/")


def _ioi_scores(m, ps, o, task, n_boot, seed) -> dict | None:
    """--task ioi: the model's IOI behaviour on the pairs (logit difference IO - S and accuracy, with CIs; the
    heads' attention from the end to the names), written to ioi.json."""
    if task != "ioi":
        return None
    from interp.patching.ioi import ioi_scores
    from interp.runtime.jsonio import write_json

    res = ioi_scores(m, ps, n_boot=n_boot, seed=seed)
    write_json(res, o / "ioi.json")
    return res


def _metric_words(metric: str, ioi: dict | None) -> str:
    """What the patching metric is, in the pairs' terms: ' = logit(answer) - logit(wrong)', and on IOI pairs which
    names those are, said apart from the IOI line's logit(IO) - logit(S) when they differ ("both")."""
    other = {"logprob": " = log p(answer)", "prob": " = p(answer)",
             "kl": " = KL(donor || run) of the next-token distributions, nats (0 for the donor run)"}
    if metric != "logit_diff":
        return other.get(metric, "")
    if ioi is None:
        return " = logit(answer) - logit(wrong)"
    if ioi.get("corrupt_kind") == "both":
        return (" = logit(IO) - logit(IO'), IO' the corrupt prompt's IO (the pairs' answer and wrong token; not the "
                "IOI line's logit(IO) - logit(S))")
    return " = logit(IO) - logit(S), as on the IOI line (the pairs' answer and wrong token)"


def _print_ioi(c, r: dict) -> None:
    def est(e, digits=2):
        return f"{e['mean']:+.{digits}f} [{e['lo']:+.{digits}f}, {e['hi']:+.{digits}f}]"

    def acc(e):
        return f"{e['mean']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}]"

    line = (f"IOI ({r['n_pairs']} pairs, corruption {r['corrupt_kind']}): logit(IO) - logit(S) (the clean prompt's "
            "names) clean "
            f"{est(r['clean']['logit_diff'])}, accuracy {acc(r['clean']['accuracy'])}; corrupt prompt "
            f"{est(r['corrupt']['logit_diff'])}, accuracy {acc(r['corrupt']['accuracy'])}")
    if "corrupt_own" in r:
        line += (f"; the corrupt prompt's own IO' - S' {est(r['corrupt_own']['logit_diff'])}, accuracy "
                 f"{acc(r['corrupt_own']['accuracy'])}")
    c.print(line + " (95% bootstrap CIs over prompts; ioi.json)", highlight=False)


def _top_cells(values, full, g: dict, k: int = 5) -> list[str]:
    """"L3 pos -1: +0.412"-style labels of the k cells of a site grid `g` with the largest |values|, among the
    cells marked `full` (those every counted pair has)."""
    import numpy as np

    z = np.where(full, np.abs(values), np.nan).ravel()
    out = []
    for i in [i for i in np.argsort(-np.nan_to_num(z, nan=-np.inf))[:k] if not np.isnan(z[i])]:
        idx = np.unravel_index(i, values.shape)
        lab = [f"L{j}" if ax == "layer" else f"pos {g['positions'][j]}" if ax == "position"
               else f"KV{j}" if ax == "kv_head" else f"H{j}" for ax, j in zip(g["axes"], idx)]
        out.append(f"{' '.join(lab)}: {values[idx]:+.3f}")
    return out


def _print(d: dict, out, ioi: dict | None = None) -> None:
    import numpy as np
    from interp.cli.output import console, print_line

    c = console()
    if ioi is not None:
        _print_ioi(c, ioi)
    how = (f"{d['n_rows']} (pair, cell) rows in {d['n_forward']} forward passes" if d["method"] == "exact"
           else f"{d['method']} estimates (2 forward passes, 1 backward)")
    if d["method"] == "exact" and d.get("work_bound"):
        how += (f" (work {d['work_done']:.1f} forward-pass equivalents, {d['work_done'] / d['work_bound']:.2f}x the "
                f"bound W = {d['work_bound']:.1f})")
    c.print(f"[bold]{d['model']}[/]: {d['direction']} patching, {d['n_pairs']} pairs, {how}; "
            f"{'normalised ' if d['normalized'] else ''}{d['metric']}")
    base, donor = np.mean(d["base_value"]), np.mean(d["donor_value"])
    runs = ("corrupt", "clean") if d["direction"] == "denoising" else ("clean", "corrupt")  # base, donor
    c.print(f"unpatched {d['metric']}{_metric_words(d['metric'], ioi)}: base (the {runs[0]} run, patched into) "
            f"{base:+.3f}, donor (the {runs[1]} "
            f"run, patched from) {donor:+.3f}"
            + (f"; {len(d['excluded_pairs'])} pairs with donor ~ base left out" if d["excluded_pairs"] else ""))
    from interp.patching.result import pooled_effect, site_effect, unstable_gaps

    what = "normalised effect" if d["normalized"] else f"effect (patched - base {d['metric']})"
    if d["method"] != "exact":  # first-order estimates, never measured: said on every line that shows them
        what = f"{d['method']} estimate (not measured) of the {what}"
    shaky = unstable_gaps(d["donor_value"], d["base_value"]) if d["normalized"] else []
    for name, g in d["sites"].items():
        effect, n = site_effect(d, name)
        full = n == n.max()  # cells every counted pair has; the others are left out of the headline
        cells = _top_cells(effect, full, g)
        partial = int(((n > 0) & ~full).sum())
        c.print(f"{name} top cells by |{what}|, mean over {int(n.max())} pairs: " + "; ".join(cells)
                + (f" ({partial} cells that fewer pairs have are not ranked; the CSV has their n_pairs)"
                   if partial else ""), highlight=False)
        if shaky:
            cells = _top_cells(pooled_effect(d, name), full, g)
            c.print(f"  [yellow]warning[/]: {len(shaky)} of {d['n_pairs']} pairs have a donor - base gap below a "
                    "quarter of the mean gap or of the other sign, so the per-pair means above can be dominated by "
                    f"them; by the ratio of means (sum of patched - base over sum of gaps): " + "; ".join(cells),
                    highlight=False)
        v = (d.get("verification") or {}).get(name)
        if v:
            def f(x):
                return "-" if x is None else f"{x:.2f}"
            miss = v["largest_missed"]
            slope = v.get("slope")
            c.print(f"  the estimates vs exact patching on {v['n_checked']} cells ({v['top']} top + {v['sample']} "
                    f"random): Pearson {f(v['pearson'])}, Spearman {f(v['spearman'])}, top-{v['top']} recall "
                    f"{f(v['top_k_recall'])}; scale: slope {f(slope)} (estimate ~ {f(slope)} x exact)"
                    + ("" if not v.get("ratio_top") else
                       f", the top estimates are {v['ratio_top']['min']:.2f}-{v['ratio_top']['max']:.2f} of the exact "
                       f"effect (median {v['ratio_top']['median']:.2f})")
                    + (f"; largest effect in the random sample {miss['exact']:+.3f} at {miss['cell']}" if miss else ""),
                    highlight=False, soft_wrap=True)
            if v.get("largest_misses"):
                c.print("  largest misses (estimate vs exact): " + "; ".join(
                    f"{m['cell']}: {m['estimate']:+.3f} vs {m['exact']:+.3f}" for m in v["largest_misses"]),
                    highlight=False, soft_wrap=True)
            for w in v["sign_warnings"]:
                print_line(f"the estimate has the wrong sign on a top cell: {w}", "  [yellow]warning[/]", c)
    c.print(f"written to {final_path(out)}/")
