"""Printing of rope-zero and rope-profile results (the commands live in rope_cmds.py)."""

from __future__ import annotations

from interp.cli.output import console
from interp.cli.runs import final_path

def _fmt(block):
    if not block:
        return "-"
    r = block["metric"]
    return f"{r['mean']:.2f} [{r['lo']:.2f}, {r['hi']:.2f}]"


def print_rope_zero(d: dict, o) -> None:
    """The dose table of a rope_zero result `d` and its tests."""
    from interp.cli.output import print_tests
    from rich.table import Table

    side = "q and the head's keys" if d.get("mode") == "phase" else f"{d['side']} side"
    t = Table(title=f"{d['model']}: {d['band']} band {d.get('patch', 'zeroed')} ({side}) in {len(d['heads'])} heads "
                    f"({d['heads_source']})")
    for col in ("dims", "target heads", "random dims (pooled)", "matched heads (pooled)", "task loss (nats)"):
        t.add_column(col)
    for r in d["doses"]:
        tl = r["task"]
        loss = f"{tl['loss']:.3f}" + ("" if tl["vs_baseline"] is None else f" ({tl['vs_baseline']['diff']:+.3f})")
        t.add_row(str(r["dose"]), _fmt(r["target"]), _fmt(r["random_pooled"]), _fmt(r["matched_pooled"]), loss)
    c = console()
    c.print(t)
    print_tests("rope_zero", d)
    if d["baseline"]["rope"]["freqs_by_theta"]:  # layer types with their own thetas (Gemma-3)
        print_thetas(c, d["baseline"]["rope"]["heads_by_theta"], "target heads")
    c.print(f"written to {final_path(o)}/")


def print_thetas(c, by_theta: dict, what: str) -> None:
    """On models whose layer types rotate with different thetas (Gemma-3): which heads use which."""
    if by_theta:
        c.print(f"{what} by RoPE theta: " + "; ".join(f"theta {t}: {', '.join(hs)}" for t, hs in by_theta.items()),
                highlight=False)


def print_decomposition(c, dec: dict) -> None:
    """The needle's attention-logit gap split by rotary band (rope_profile --decompose)."""
    g = dec["gap"]
    c.print(f"needle logit minus the other keys', mean over {len(dec['heads'])} heads and {dec['n_prompts']} prompts: "
            f"{g['mean']:+.3f} [{g['lo']:+.3f}, {g['hi']:+.3f}]", highlight=False)
    for b in dec["bands"]:
        e, share = b["estimate"], b["share_of_gap"]
        c.print(f"  {b['band']}: {e['mean']:+.3f} [{e['lo']:+.3f}, {e['hi']:+.3f}]"
                + ("" if share is None else f" ({share:.0%} of the gap)"), highlight=False)
    c.print("by depth (distance in tokens): " + "; ".join(
        f"{d['depth']:g} ({d['distance']:.0f}): gap {d['gap']:+.2f}, lowest quarter {d['bands'][0]:+.2f}"
        for d in dec["by_depth"]), highlight=False)
