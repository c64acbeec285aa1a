"""What `interp detect induction` and `interp detect copy-suppression` print."""

from __future__ import annotations

from interp.cli.output import heads_cell
from interp.cli.runs import final_path


def _fmt(v, spec=".3f"):
    return "-" if v is None else format(v, spec)


def _print_induction(d: dict, out) -> None:
    from interp.cli.output import console, print_tests
    from interp.figures.text import adjusted, p_cell
    from rich.table import Table

    c = console()
    named = set(d["induction_heads"]) | set(d["prev_token_heads"])  # every head the lines below name is shown
    rows = [r for i, r in enumerate(d["ranked"]) if i < 12 or r["head"] in named]
    n_all = len(d["ranked"])
    shown = f"; {len(rows)} of {n_all} shown: the top 12 and every head named below" if len(rows) < n_all else ""
    t = Table(title=f"{d['model']}: heads by induction score ({d['n_seqs']} repeated sequences{shown})")
    for col in ("head", "induction", "prev_token", "duplicate", "copying", f"copy_top_{d['config']['copy_k']}"):
        t.add_column(col, justify="right")
    for r in rows:
        t.add_row(r["head"], *(_fmt(r[k]) for k in ("induction", "prev_token", "duplicate", "copying", "copy_top_k")))
    c.print(t)
    for ls in d["losses"]:
        c.print(f"length {ls['length']}: first-copy loss {ls['early_loss']:.3f}, second-copy {ls['late_loss']:.3f}, "
                f"ICL score {ls['icl_score']:+.3f} nats")
    c.print(f"induction heads: {', '.join(d['induction_heads']) or 'none'}; previous-token heads: "
            f"{', '.join(d['prev_token_heads']) or 'none'}")
    cz = d["causal"]
    if cz:
        t = Table(title=f"{cz['mode']} ablation of {', '.join(cz['heads'])} ({cz['heads_source']})")
        for col in ("condition", "heads", "second-copy loss [95% CI]", "diff vs baseline [95% CI]", "p (sign-flip)",
                    "p (Holm)", "ICL score"):
            t.add_column(col)
        for cond in cz["conditions"] + ([cz["random_pooled"]] if cz["random_pooled"] else []):
            ll, v = cond["estimates"]["late_loss"], (cond["vs_baseline"] or {}).get("late_loss")
            t.add_row(cond["name"], heads_cell(cond["heads"]), f"{ll['mean']:.3f} [{ll['lo']:.3f}, {ll['hi']:.3f}]",
                      "-" if v is None else f"{v['diff']:+.3f} [{v['diff_lo']:+.3f}, {v['diff_hi']:+.3f}]",
                      p_cell(v), adjusted(v), f"{cond['estimates']['icl']['mean']:+.3f}")
        c.print(t)
        if cz.get("excluded_from_controls"):
            near = cz["near_target_heads"]
            c.print("kept out of the random sets (induction score above the threshold, not ablated): "
                    + ", ".join(f"{h} ({near[h]:.3f})" for h in cz["excluded_from_controls"]), highlight=False,
                    soft_wrap=True)
        print_tests("induction", d, digits=3)
    sw = d.get("single_head_effects")
    if sw and sw.get("late_loss_p_bh") is not None:
        late, bh = sw["late_loss"], sw["late_loss_p_bh"]
        hits = sorted(((abs(late[l][h]), l, h) for l in range(len(bh)) for h in range(len(bh[l]))
                       if bh[l][h] is not None and bh[l][h] < 0.05), reverse=True)
        n = sum(len(r) for r in bh)
        c.print(f"single-head sweep: {len(hits)} of {n} heads change the second-copy loss at Benjamini-Hochberg "
                f"p < 0.05 (false discovery rate over the {n} heads; raw p in induction.json"
                + ("" if not hits else "): " + ", ".join(f"L{l}H{h} {late[l][h]:+.3f}" for _, l, h in hits[:12])
                   + (" ..." if len(hits) > 12 else "")) + ("" if hits else ")"), highlight=False, soft_wrap=True)
    c.print(f"written to {final_path(out)}/")


def _print_copy_suppression(d: dict, out) -> None:
    from interp.cli.output import console
    from rich.table import Table

    c = console()
    t = Table(title=f"{d['model']}: heads by OV self-suppression ({d['n_texts']} texts x {d['seq_len']} tokens)")
    cols = ("ov_suppression", "ov_self_z", "qk_circuit", "qk_lift", "dla_attended")
    t.add_column("head")
    for col in cols:
        t.add_column(col, justify="right")
    for r in d["ranked"][:12]:
        t.add_row(r["head"], *(_fmt(r[k]) for k in cols))
    c.print(t)
    if d["candidates"]:
        t = Table(title=f"ablation of candidates ({d['config']['mode']}); copied token = token at the top key")
        for col in ("head", "delta p(copied)", "direct", "total", "self-repair", "repair frac", "copy suppression?"):
            t.add_column(col, justify="right")
        for cand in d["candidates"]:
            a = cand["ablation"]

            def ci(e, fmt="+.3f"):
                return "-" if e is None else f"{e['mean']:{fmt}} [{e['lo']:{fmt}}, {e['hi']:{fmt}}]"
            t.add_row(cand["head"], ci(a["delta_prob"]), ci(a["direct"]), ci(a["total"]), ci(a["self_repair"]),
                      _fmt(cand["self_repair_fraction"], ".2f"), "yes" if cand["is_copy_suppression"] else "no")
        c.print(t)
    c.print(d["summary"])
    c.print(f"written to {final_path(out)}/")
