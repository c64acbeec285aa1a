#!/usr/bin/env python
"""Tables of `make results-rope-remap` (docs/results.md#rope-positions-remapped-in-the-retrieval-heads), computed
from its run folders: `python bench/rope_remap_table.py runs/results/rope-remap`.

Each build folder holds `retrieval/` (heads detected at 512 tokens) and `scale-S/` (`interp rope-remap --scale S`
on those heads and on 3 random head sets, at 512 and 1024 tokens). The script prints

1. the rescue: recall at 1024 tokens of every theta-1e3 build with its retrieval heads' distances compressed
   (S < 1), against the random sets compressed alike, beside the theta-1e4 builds' recall at 1024;
2. the stretch: recall by S and length for every build that retrieves at 512 tokens (recall >= 0.9);
3. recall against the stretched needle distance S x (question position - needle start) in tokens, pooled over the
   retrieving builds of each theta, beside the same in units of d90, the distance at which the build's slowest
   rotary pair has turned 90 degrees: (pi/2) / theta^(-(d-2)/d), d the rotary dims.

Confidence intervals: bootstrap over prompts (interp.stats.mean_ci); target vs random: paired difference of a
prompt's target recall and its mean over the random sets (interp.stats.paired_diff, sign-flip p).
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path

import numpy as np

TOKEN_BINS = (0.0, 512, 1024, 2048, 4096, 8192, 32768, 131072, math.inf)


def _json(path: Path) -> dict:
    try:
        d = json.loads(path.read_text(encoding="utf-8"))
    except (OSError, ValueError) as e:
        raise SystemExit(f"{path}: unreadable result JSON ({e}); rerun `make results-rope-remap`")
    if not isinstance(d, dict):
        raise SystemExit(f"{path}: not a result object; rerun `make results-rope-remap`")
    return d


def _d90(config: dict) -> tuple[float, float]:
    theta = float(config.get("rope_theta") or config["rope_parameters"]["rope_theta"])
    d = int(config.get("head_dim") or config["hidden_size"] // config["num_attention_heads"])
    return theta, (math.pi / 2) / theta ** (-(d - 2) / d)


def _build(folder: Path) -> dict:
    ret = _json(folder / "retrieval" / "retrieval.json")
    runs = {}
    for sub in sorted(folder.glob("scale-*")):
        abl = _json(sub / "ablation.json")
        prompts = {}
        for line in (sub / "prompts.jsonl").read_text(encoding="utf-8").splitlines():
            r = json.loads(line)
            prompts[r["id"]] = (r["context_length"], len(r["input_ids"]) - 1 - r["needle_span"][0])
        conds = {c["name"]: np.asarray(c["per_sample"]["recall"], float) for c in abl["conditions"]}
        random = [v for n, v in conds.items() if n.startswith("random-")]
        runs[float(abl["intervention"]["scale"])] = {
            "ids": abl["sample_ids"], "prompts": prompts, "baseline": conds["baseline"], "target": conds["target"],
            "random": np.mean(random, axis=0) if random else None, "heads": abl["heads"]}
    src = Path(ret["provenance"]["config_source"]) / "config.json"
    theta, d90 = _d90(json.loads(src.read_text(encoding="utf-8")))
    recall512 = ret.get("baseline_recall")
    return {"name": folder.name, "theta": theta, "d90": d90, "runs": runs, "heads": ret.get("heads"),
            "recall512": recall512}


def _ci(x) -> str:
    from interp.stats import mean_ci

    e = mean_ci(x, n_boot=2000, seed=0)
    return f"{e.mean:.2f} [{e.lo:.2f}, {e.hi:.2f}]"


def _diff(x, y) -> str:
    from interp.stats import paired_diff

    t = paired_diff(x, y, n_boot=2000, n_perm=10000, seed=0)
    return f"{t.diff:+.2f} [{t.diff_lo:+.2f}, {t.diff_hi:+.2f}], p = {t.p_value:.2g}"


def _at(run: dict, length: int):
    keep = np.array([run["prompts"][i][0] == length for i in run["ids"]])
    pick = lambda a: None if a is None else a[keep]  # noqa: E731
    return {k: pick(run[k]) for k in ("baseline", "target", "random")}


def _label(b: dict) -> str:
    return b["name"] if "theta" in b["name"] else f"{b['name']} (theta{int(b['theta'])}-seed2)"


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("root", help="the run folder of `make results-rope-remap` (runs/results/rope-remap)")
    args = ap.parse_args()
    builds = [_build(f) for f in sorted(Path(args.root).iterdir()) if (f / "retrieval").is_dir()]
    if not builds:
        raise SystemExit(f"{args.root}: no build folders with retrieval/; run `make results-rope-remap`")

    print("### The theta-1e3 rescue (1024 tokens)\n")
    print("| build | retrieval heads (512) | baseline | S | heads remapped | random heads remapped | target vs random |")
    print("|---|---|---|---|---|---|---|")
    for b in builds:
        if b["theta"] != 1000:
            continue
        for s in sorted(k for k in b["runs"] if k < 1):
            a = _at(b["runs"][s], 1024)
            print(f"| {_label(b)} | {', '.join(b['runs'][s]['heads'])} | {_ci(a['baseline'])} | {s:g} | "
                  f"{_ci(a['target'])} | {_ci(a['random'])} | {_diff(a['target'], a['random'])} |")
    ref = [(b, _at(next(iter(b["runs"].values())), 1024)["baseline"]) for b in builds if b["theta"] == 10000]
    print("\ntheta-1e4 builds at 1024 tokens, nothing remapped: "
          + "; ".join(f"{_label(b)} {_ci(x)}" for b, x in ref))

    print("\n### The stretch (builds that retrieve at 512 tokens)\n")
    print("| build | d90 (tokens) | S | length | baseline | heads remapped | random heads remapped | target vs random |")
    print("|---|---|---|---|---|---|---|---|")
    retrieving = []
    for b in builds:
        first = next(iter(b["runs"].values()))
        if np.mean(_at(first, 512)["baseline"]) < 0.9:
            continue
        retrieving.append(b)
        for s in sorted(k for k in b["runs"] if k > 1):
            for length in (512, 1024):
                a = _at(b["runs"][s], length)
                print(f"| {_label(b)} | {b['d90']:,.0f} | {s:g} | {length} | {_ci(a['baseline'])} | {_ci(a['target'])} | "
                      f"{_ci(a['random'])} | {_diff(a['target'], a['random'])} |")

    print("\n### Recall against the stretched needle distance S x distance (retrieving builds pooled per theta)\n")
    print("| rope_theta | d90 (tokens) | S x distance (tokens) | in d90 | prompts | heads remapped | random heads remapped "
          "| target vs random |")
    print("|---|---|---|---|---|---|---|---|")
    for theta in sorted({b["theta"] for b in retrieving}):
        group = [b for b in retrieving if b["theta"] == theta]
        d90 = group[0]["d90"]
        xs, tg, rd = [], [], []
        for b in group:
            for s, run in b["runs"].items():
                xs.append(s * np.array([run["prompts"][i][1] for i in run["ids"]], float))
                tg.append(run["target"])
                rd.append(run["random"])
        x, t, r = np.concatenate(xs), np.concatenate(tg), np.concatenate(rd)
        for lo, hi in zip(TOKEN_BINS[:-1], TOKEN_BINS[1:]):
            m = (x >= lo) & (x < hi)
            if m.sum() < 2:
                continue
            span = f"{lo:,.0f}-{hi:,.0f}" if math.isfinite(hi) else f">= {lo:,.0f}"
            rel = f"{lo / d90:.2g}-{hi / d90:.2g}" if math.isfinite(hi) else f">= {lo / d90:.2g}"
            print(f"| {theta:g} | {d90:,.0f} | {span} | {rel} | {int(m.sum())} | {_ci(t[m])} | {_ci(r[m])} | "
                  f"{_diff(t[m], r[m])} |")


if __name__ == "__main__":
    main()
