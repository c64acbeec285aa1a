#!/usr/bin/env python
"""IOI on a real model: the numbers of the IOI section, read from the run folders `interp patch --task ioi`
wrote (the Makefile's results-real-ioi target), nothing recomputed but the summaries below.

Reads, under --root (default runs/results-real/smollm2-135m):
    ioi-last-{both,abc,s2}/ioi.json        behaviour: logit(IO) - logit(S) and accuracy, clean and corrupt
    ioi-{both,abc}/patching.json           exact patching, resid_pre (every position) and head_out
    ioi-{both,abc}-atp/patching.json       AtP-QK of the same grids (same pairs)
    ioi-abc-path-*/path_patching.json      path patching (any that exist)
Writes --out (default ROOT/ioi-summary.json) and prints markdown tables.

Two normalisations of a patching effect are given: `mean`, the tool's (the mean over pairs of each pair's
(patched - base) / (clean - corrupt)), and `pooled`, the ratio of the means (sum over pairs of patched - base
over the sum of clean - corrupt), as Wang et al. normalise. They differ where some pairs have a small gap:
with the ABC corruption the gap is the clean logit difference itself, near 0 or negative on the prompts the
model gets wrong, and one such pair can move a per-pair mean a lot.

The residual stream is regrouped by token role (the IO mention, S1, S2, the last token), per pair, from
pairs.jsonl, because the three templates put the names at different distances from the end.

Usage: python bench/ioi_summary.py [--root DIR] [--out FILE] [--top 15]
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(ROOT))

from interp.patching.result import pooled_effect  # noqa: E402  (the ratio of means per cell)


def _load(p: Path):
    return json.loads(p.read_text()) if p.exists() else None


def _pairs(run: Path) -> list[dict]:
    return [json.loads(x) for x in (run / "pairs.jsonl").read_text().splitlines()]


def _raw_change(d: dict, site: str) -> tuple[np.ndarray, np.ndarray]:
    """(patched - base per pair and cell, clean - corrupt gap per pair) of a normalised exact/AtP result."""
    per = np.array(d["sites"][site]["per_pair"], dtype=float)
    gap = np.asarray(d["donor_value"], dtype=float) - np.asarray(d["base_value"], dtype=float)
    if not d["normalized"]:
        return per - np.asarray(d["base_value"]).reshape((-1,) + (1,) * (per.ndim - 1)), gap
    return per * gap.reshape((-1,) + (1,) * (per.ndim - 1)), gap


def behaviour(root: Path) -> dict:
    out = {}
    for c in ("both", "abc", "s2"):
        r = _load(root / f"ioi-last-{c}" / "ioi.json")
        if r is None:
            continue
        keep = {k: r[k] for k in ("clean", "corrupt", "by_order", "by_template") if k in r}
        if "corrupt_own" in r:
            keep["corrupt_own"] = r["corrupt_own"]
        out[c] = keep
    return out


def _ci(e, acc=False):
    f = (lambda x: f"{x:.2f}") if acc else (lambda x: f"{x:+.2f}")
    return f"{f(e['mean'])} [{f(e['lo'])}, {f(e['hi'])}]"


def delta_ci(x) -> dict:
    """Mean over pairs of patched - base (raw logit difference) with a 95% bootstrap CI."""
    from interp.stats import mean_ci

    x = np.asarray(x, dtype=float)
    e = mean_ci(x[np.isfinite(x)], n_boot=2000, seed=0)
    return {"mean": e.mean, "lo": e.lo, "hi": e.hi}


def heads(d: dict, top: int) -> list[dict]:
    """The `top` heads by |pooled effect|: pooled, the raw change (logits, CI) and the tool's per-pair mean."""
    mean = np.array(d["sites"]["head_out"]["mean"], dtype=float)
    lo, hi = (np.array(d["sites"]["head_out"][k], dtype=float) for k in ("lo", "hi"))
    pool = pooled_effect(d, "head_out")
    ch, _ = _raw_change(d, "head_out")
    order = np.argsort(-np.abs(pool), axis=None)[:top]
    rows = []
    for i in order:
        l, h = np.unravel_index(i, mean.shape)
        rows.append({"head": f"L{l}H{h}", "pooled": float(pool[l, h]), "delta": delta_ci(ch[:, l, h]),
                     "mean": float(mean[l, h]), "lo": float(lo[l, h]), "hi": float(hi[l, h])})
    return rows


def roles(run: Path, d: dict) -> dict:
    """resid_pre per layer at the IO mention, S1, S2 and the last token (pooled and per-pair mean)."""
    ch, gap = _raw_change(d, "resid_pre")  # [P, L, T]
    norm = np.array(d["sites"]["resid_pre"]["per_pair"], dtype=float)
    labels = d["sites"]["resid_pre"]["positions"]
    idx = {p: i for i, p in enumerate(labels)}
    out = {}
    for role in ("io", "s1", "s2", "end"):
        cols = []
        for pr in _pairs(run):
            info = pr["info"]
            pos = {"io": info["io_position"], "s1": info["s_positions"][0], "s2": info["s_positions"][1], "end": -1}[role]
            cols.append(idx[pos])
        cols = np.array(cols)
        c = ch[np.arange(len(cols)), :, cols]  # [P, L]
        n = norm[np.arange(len(cols)), :, cols]
        out[role] = {"pooled": (c.sum(0) / gap.sum()).tolist(), "mean": np.nanmean(n, 0).tolist()}
    return out


def attention(root: Path) -> dict | None:
    r = _load(root / "ioi-last-abc" / "ioi.json") or _load(root / "ioi-last-both" / "ioi.json")
    return None if r is None else r.get("attention")


def main(argv=None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--root", default=str(ROOT / "runs/results-real/smollm2-135m"))
    ap.add_argument("--out", default=None)
    ap.add_argument("--top", type=int, default=15)
    args = ap.parse_args(argv)
    root = Path(args.root)
    from interp.patching.attribution import grid_agreement

    summary: dict = {"root": str(root), "behaviour": behaviour(root)}
    att = attention(root)
    print("## Behaviour (64 pairs per corruption; 95% bootstrap CIs over prompts)\n")
    print("| corruption | clean IO - S | clean accuracy | corrupt IO - S | corrupt accuracy |")
    print("|---|---|---|---|---|")
    for c, r in summary["behaviour"].items():
        print(f"| {c} | {_ci(r['clean']['logit_diff'])} | {_ci(r['clean']['accuracy'], True)} | "
              f"{_ci(r['corrupt']['logit_diff'])} | {_ci(r['corrupt']['accuracy'], True)} |")
    for c, r in list(summary["behaviour"].items())[:1]:
        for k in ("by_order", "by_template"):
            print(f"\nclean, {k}: " + "; ".join(f"{g}: {_ci(v['logit_diff'])}, acc {_ci(v['accuracy'], True)} "
                                                f"(n {v['logit_diff']['n']})" for g, v in r[k].items()))
        if "corrupt_own" in r:
            print(f"\nboth: the corrupt prompt's own IO' - S': {_ci(r['corrupt_own']['logit_diff'])}, accuracy "
                  f"{_ci(r['corrupt_own']['accuracy'], True)}")
    summary["exact"], summary["atp"] = {}, {}
    for c in ("both", "abc", "s2"):
        run = root / f"ioi-{c}"
        d = _load(run / "patching.json")
        if d is None:
            continue
        gap = np.asarray(d["donor_value"]) - np.asarray(d["base_value"])
        ex = {"base": float(np.mean(d["base_value"])), "donor": float(np.mean(d["donor_value"])),
              "gap_min": float(gap.min()), "gap_n_below_1": int((np.abs(gap) < 1).sum()),
              "n_forward": d["n_forward"], "n_rows": d["n_rows"]}
        print(f"\n## Exact patching, corruption {c} (denoising; metric {'IO - IO_corrupt' if c == 'both' else 'IO - S'})\n")
        print(f"unpatched: corrupt {ex['base']:+.2f}, clean {ex['donor']:+.2f}; per-pair gap min {ex['gap_min']:+.2f}, "
              f"{ex['gap_n_below_1']} pairs with |gap| < 1")
        if "head_out" in d["sites"]:
            ex["heads"] = heads(d, args.top)
            print("\n| head | pooled | change in logits [95% CI] | per-pair mean [95% CI] | attn END->IO | END->S1 | "
                  "END->S2 |\n|---|---|---|---|---|---|---|")
            for r in ex["heads"]:
                l, h = (int(x) for x in r["head"][1:].split("H"))
                a = [att[k][l][h] for k in ("io", "s1", "s2")] if att else [float("nan")] * 3
                print(f"| {r['head']} | {r['pooled']:+.3f} | {_ci(r['delta'])} | {r['mean']:+.3f} [{r['lo']:+.3f}, "
                      f"{r['hi']:+.3f}] | {a[0]:.2f} | {a[1]:.2f} | {a[2]:.2f} |")
        if "resid_pre" in d["sites"]:
            ex["roles"] = roles(run, d)
            print("\nresid_pre by role, pooled (layer: IO / S1 / S2 / END):")
            rr = ex["roles"]
            print("; ".join(f"L{l}: " + " / ".join(f"{rr[k]['pooled'][l]:.2f}" for k in ("io", "s1", "s2", "end"))
                            for l in range(len(rr["io"]["pooled"]))))
        summary["exact"][c] = ex
        a = _load(root / f"ioi-{c}-atp" / "patching.json")
        if a is not None:
            agree = {s: grid_agreement(a, d, s, ks=(10, 20)) for s in ("head_out", "resid_pre")
                     if s in a["sites"] and s in d["sites"]}
            agree["builtin_verification"] = {s: {k: v[k] for k in ("n_checked", "pearson", "spearman", "top_k_recall")}
                                             for s, v in (a.get("verification") or {}).items()}
            summary["atp"][c] = agree
            for s, g in agree.items():
                if s == "builtin_verification":
                    continue
                print(f"\nAtP-QK vs exact, {c}, {s}: {g['n_cells']} cells, Pearson {g['pearson']:.3f}, Spearman "
                      f"{g['spearman']:.3f}, top-10 recall {g['top_k']['10']['recall']:.2f} (missed "
                      f"{', '.join(g['top_k']['10']['missed']) or '-'}), top-20 recall {g['top_k']['20']['recall']:.2f}")
    summary["path"] = {}
    for run in sorted(root.glob("ioi-*path*")):
        d = _load(run / "path_patching.json")
        if d is None:
            continue
        eff = {k: v for k, v in d["effects"].items()}
        gap = np.asarray(d["donor_value"], dtype=float) - np.asarray(d["base_value"], dtype=float)
        for v in eff.values():  # the ratio of means, as for the grids above
            pp = np.array(v["per_pair"], dtype=float)
            ok = np.isfinite(pp)
            v["pooled"] = float((pp[ok] * gap[ok]).sum() / gap[ok].sum()) if d["normalized"] and ok.any() else None
            v["delta"] = delta_ci(pp[ok] * gap[ok]) if d["normalized"] and ok.sum() > 1 else None
        ranked = sorted((k for k in eff if k != "all" and eff[k]["mean"] is not None),
                        key=lambda k: -abs(eff[k]["pooled"] if eff[k]["pooled"] is not None else eff[k]["mean"]))
        summary["path"][run.name] = {"via": d["via"], "receivers": d["receivers"], "n_senders": len(d["senders"]),
                                     "all": {k: eff["all"][k] for k in ("pooled", "mean", "lo", "hi")}
                                     if "all" in eff else None,
                                     "top": [{"head": k, **{x: eff[k][x] for x in ("pooled", "delta", "mean", "lo", "hi")}}
                                             for k in ranked[:args.top]]}
        print(f"\n## Path patching {run.name}: {len(d['senders'])} senders via {d['via']}"
              + (f" of {', '.join(d['receivers'])}" if d["receivers"] else "")
              + (f"; all together pooled {eff['all']['pooled']:+.3f}, per-pair mean {_ci(eff['all'])}"
                 if "all" in eff and eff["all"]["lo"] is not None else ""))
        for k in ranked[:args.top]:
            l, h = (int(x) for x in k[1:].split("H"))
            a = f" (attn END->IO {att['io'][l][h]:.2f}, S1 {att['s1'][l][h]:.2f}, S2 {att['s2'][l][h]:.2f})" if att else ""
            m = _ci(eff[k]) if eff[k]["lo"] is not None else f"{eff[k]['mean']:+.3f}"
            dl = f", change {_ci(eff[k]['delta'])} logits" if eff[k]["delta"] else ""
            print(f"  {k}: pooled {eff[k]['pooled']:+.3f}{dl}, per-pair mean {m}{a}")
    out = Path(args.out) if args.out else root / "ioi-summary.json"
    out.write_text(json.dumps(summary, indent=1))
    print(f"\nwritten to {out}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
