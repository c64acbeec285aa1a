"""What `interp ablate` prints: the ablation table (also rope-remap's) and a head curve's table and reach."""

from __future__ import annotations

from interp.cli.output import console, heads_cell
from interp.cli.runs import final_path


def _print_curve(res, out) -> None:
    from rich.table import Table

    from interp.cli.output import print_tests
    from interp.figures.text import adjusted, p_cell

    done = "windowed" if res.mode == "window" else "masked"
    what = f"every head {done} but the top k" if res.kind == "keep" else f"the top k heads {done}"
    t = Table(title=f"{res.model}: {what} ({res.mode}; ranked by {res.ranking_source}); baseline {res.metric} "
                    f"{res.baseline['mean']:.2f} [{res.baseline['lo']:.2f}, {res.baseline['hi']:.2f}]")
    kv = any(p.kv_kept for p in res.points)  # mode window: the KV memory each point keeps
    for col in ("k", "top-k heads", f"{res.metric}, top k [95% CI]", "k random heads [95% CI]",
                "top - random [95% CI]", "p (sign-flip)", "p (Holm)") + (("KV kept, top k / random",) if kv else ()):
        t.add_column(col)
    for p in res.points:
        e, r, d = p.target["metric"], (p.random_pooled or {}).get("metric"), p.target_vs_random
        kv_cell = () if not kv else (f"{p.kv_kept['target']:.1%} / " + ("-" if p.kv_kept["random_mean"] is None
                                                                        else f"{p.kv_kept['random_mean']:.1%}"),)
        t.add_row(str(p.k), heads_cell(p.heads), f"{e['mean']:.2f} [{e['lo']:.2f}, {e['hi']:.2f}]",
                  "-" if r is None else f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]",
                  "-" if d is None else f"{d['diff']:+.2f} [{d['diff_lo']:+.2f}, {d['diff_hi']:+.2f}]",
                  p_cell(d), adjusted(d), *kv_cell)
    c = console()
    c.print(t)
    print_tests("head_curve", res.to_dict(), lines=False)
    r = res.reach
    if res.kind == "keep":
        c.print(f"{r['frac']:.0%} of baseline ({r['goal']:.2f}) reached keeping the top k = {_k(r['target_k'])} "
                f"(CI lower bound: k = {_k(r['target_k_ci'])}); keeping k random heads: k = {_k(r['random_k'])}",
                highlight=False)
    if res.kind == "keep" and r.get("kv_kept") is not None:
        ci = "not on these ks" if r.get("kv_kept_ci") is None else f"{r['kv_kept_ci']:.1%}"
        rnd = "not on these ks" if r.get("kv_kept_random") is None else f"{r['kv_kept_random']:.1%}"
        c.print(f"KV memory kept there: {r['kv_kept']:.1%} of the full cache (at the CI lower bound's k: {ci}; "
                f"random heads: {rnd})", highlight=False)
    c.print(f"top k and random k first differ (95% CI excludes 0) at k = {_k(r['separated_k'])}", highlight=False)
    c.print(f"written to {final_path(out)}/")


def _k(k) -> str:
    return "not on these ks" if k is None else str(k)


def _print_ablation(res, out):
    import numpy as np
    from interp.cli.output import console, print_tests
    from interp.figures.text import adjusted, effect, p_cell
    from rich.table import Table

    t = Table(title=f"{res.model}: {res.mode} ablation of {len(res.heads)} heads ({res.heads_source}), {res.scope}")
    for col in ("condition", "heads", f"{res.metric} [95% CI]", "diff vs baseline [95% CI]", "p (sign-flip)",
                "p (Holm)", "d_z", "writes (x median head)"):
        t.add_column(col)
    rows = res.conditions + ([res.random_pooled] if res.random_pooled else [])
    for c in rows:
        r = c.estimates[res.metric]
        v = (c.vs_baseline or {}).get(res.metric)
        t.add_row(c.name, heads_cell(c.heads), f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]",
                  "-" if v is None else f"{v['diff']:+.2f} [{v['diff_lo']:+.2f}, {v['diff_hi']:+.2f}]",
                  p_cell(v), adjusted(v), "-" if v is None else effect(v["cohens_d"]),
                  "-" if c.head_write_rel is None else f"{c.head_write_rel:.2f}")
    c = console()
    c.print(t)
    print_tests("ablation", res.to_dict())
    target = next((x for x in res.conditions if x.name == "target"), None)
    rnd = [x.head_write_rel for x in res.conditions if x.name.startswith("random-") and x.head_write_rel is not None]
    if target is not None and target.head_write_rel and rnd and np.mean(rnd) < 0.5 * target.head_write_rel:
        c.print(f"note: the random control heads write {target.head_write_rel / np.mean(rnd):.1f}x less into the "
                "residual stream than the target heads (ablation.json head_write_norm); masking heads that "
                "write little is a weak control")
    c.print(f"written to {final_path(out)}/")
