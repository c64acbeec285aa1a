"""What `interp patch` prints: the IOI line, a grid's top cells per site (with the ratio of means when gaps are
unstable) and the attribution estimates' check against exact patching."""

from __future__ import annotations

from interp.cli.runs import final_path


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
