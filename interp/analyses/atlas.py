"""The atlas: the seed findings of every model side by side, read from run folders (`interp atlas`).

`build_atlas(folders)` reads each run folder's run.json and result files (every folder below the ones given
that holds a run.json), groups them by model (a column per model dtype when one analysis ran in two dtypes;
otherwise one column, each entry saying its dtype when it differs from the column's)
and keeps, per model, one number per finding: geometry and RoPE bases (from the model's config, read without
its weights), NIAH recall by length, retrieval heads under each score normalisation, masking them vs random
sets (i), the per-head norm statistics (iii), lowest-band RoPE zeroing by dose (iv), induction heads and their
overlap with the retrieval heads, the copy-suppression verdict. Every entry names the run it came from and that
run's grid (prompts, lengths), so numbers from different grids are never silently set side by side. Nothing
is recomputed: the atlas reads what the analyses wrote. The published numbers (`PUBLISHED`) stand beside them.

Which run when a model has several of a kind: retrieval heads from the detection the masking run drew its
heads from (its `detection.from`), else the one whose grid starts at the shortest length (then: most
prompts); masking, zeroing and norm statistics from the run with the most prompts (then: the most doses);
NIAH recall by length from every retrieval run (a length measured twice: the run with more prompts). Columns
run from the smallest model (by d_model) to the largest.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from pathlib import Path

from interp.errors import InvalidInputError

RUN_MARKER = "run.json"
THRESHOLD = 0.1  # the retrieval-score threshold the atlas counts heads at (Wu et al.'s)

# The published numbers the atlas sets beside ours (quoted; the papers are cited in docs/science.md).
PUBLISHED = {
    "retrieval_share": "< 5% of heads in every long-context model tried (Wu et al. 2024)",
    "masking": "OLMo-2, 87 heads: recall 1.00 -> 0.00, matched random heads no effect; \"replicates in Qwen\"",
    "theta_heads": "LLaMA-2 (theta 1e4) 42 heads, LLaMA-3.1 (theta 5e5) 47: higher theta, not fewer heads",
    "norms": "Qwen d = -0.49, OLMo d = +0.50 (both significant), LLaMA null",
    "rope_zero": "1.00 -> 0.18 with 32 of 128 lowest-frequency dims zeroed; random dims 0.98",
    "induction": "induction heads in every model with >= 2 layers (Olsson et al. 2022)",
    "copy_suppression": "GPT-2 small L10H7 (McDougall et al. 2023)",
}
# The paper's (ii) points: retrieval heads of Llama-2-7B and Llama-3.1-8B (32 layers x 32 query heads)
PUBLISHED_THETA_POINTS = [{"model": "LLaMA-2-7B (paper)", "theta": 1e4, "n_heads": 42, "n_total": 1024},
                          {"model": "LLaMA-3.1-8B (paper)", "theta": 5e5, "n_heads": 47, "n_total": 1024}]
# The paper's (iv) dose response on 7-8B models (head_dim 128): recall with 0 and 32 of 128 dims zeroed
PUBLISHED_ROPE_ZERO = {"target": [[0.0, 1.00], [0.25, 0.18]], "random": [[0.25, 0.98]]}
PUBLISHED_POINTS = {"theta_heads": PUBLISHED_THETA_POINTS, "rope_zero": PUBLISHED_ROPE_ZERO}


@dataclass
class ModelAtlas:
    """One model's column. `label`: the model name (plus its dtype when the model's runs used several);
    `geometry`: layers, query and KV heads, head_dim, d_model; `thetas`: RoPE base per layer type ("all"
    when every layer shares one); `niah`: recall per length; `retrieval`: per score normalisation the heads
    above THRESHOLD; `masking`, `norms`, `rope_zero`, `induction`, `copy_suppression`: the findings (None:
    no such run was given); `runs`: every run folder read."""

    label: str
    model: str
    dtype: str
    architecture: str | None = None
    geometry: dict = field(default_factory=dict)
    thetas: dict = field(default_factory=dict)
    niah: list = field(default_factory=list)
    retrieval: dict = field(default_factory=dict)
    masking: dict | None = None
    norms: dict | None = None
    rope_zero: dict | None = None
    induction: dict | None = None
    copy_suppression: dict | None = None
    runs: list = field(default_factory=list)


@dataclass
class Atlas:
    """Every model's column (`models`), the published numbers, the organisms' controlled theta sweep when
    a theta run was given (`theta_sweep`), and `notes` (runs skipped and why)."""

    models: list[ModelAtlas]
    published: dict = field(default_factory=lambda: dict(PUBLISHED))
    published_points: dict = field(default_factory=lambda: dict(PUBLISHED_POINTS))
    theta_sweep: dict | None = None
    notes: list = field(default_factory=list)

    def to_dict(self) -> dict:
        return {"format": "interp-atlas", "model": f"{len(self.models)} models", **asdict(self)}

    @classmethod
    def from_dict(cls, d) -> "Atlas":
        """An Atlas from its dict (atlas.json), checked: InvalidInputError when it is not one."""
        if not isinstance(d, dict) or d.get("format") != "interp-atlas" or not isinstance(d.get("models"), list):
            raise InvalidInputError("not an interp atlas (atlas.json with format 'interp-atlas' and a list of "
                                    "models); rebuild it with `interp atlas RUN_DIRS --out DIR`")
        names = set(ModelAtlas.__dataclass_fields__)
        models = []
        for m in d["models"]:
            if not isinstance(m, dict) or not {"label", "model", "dtype"} <= set(m) or not set(m) <= names:
                raise InvalidInputError("atlas.json: a model entry is not an atlas column (label, model, dtype, "
                                        "...); rebuild it with `interp atlas`")
            models.append(ModelAtlas(**m))
        return cls(models=models, published=d.get("published") or dict(PUBLISHED),
                   published_points=d.get("published_points") or dict(PUBLISHED_POINTS), theta_sweep=d.get("theta_sweep"), notes=list(d.get("notes") or []))

    def to_frame(self):
        """One row per (model, quantity) with its value and the run it came from."""
        import pandas as pd

        from interp.figures.atlas import atlas_rows

        rows = []
        for quantity, cells, published in atlas_rows(self.to_dict()):
            for m, cell in zip(self.models, cells):
                rows.append({"model": m.label, "quantity": quantity, "value": cell})
            rows.append({"model": "published", "quantity": quantity, "value": published})
        return pd.DataFrame(rows)


# ---------------------------------------------------------------------------------------------- reading runs


def run_folders(paths) -> list[Path]:
    """Every run folder (holding a run.json) at or below the given paths, each once, in order."""
    out: list[Path] = []
    for p in map(Path, paths):
        if not p.is_dir():
            raise InvalidInputError(f"{p}: no such folder; pass run folders or folders of runs (each run folder "
                                    f"holds a {RUN_MARKER})")
        found = [p] if (p / RUN_MARKER).is_file() else sorted(f.parent for f in p.rglob(RUN_MARKER))
        if not found:
            raise InvalidInputError(f"{p} holds no run folder (no {RUN_MARKER} in it or below it)")
        out += [f for f in found if f not in out]
    return out


def _read_run(folder: Path) -> tuple[dict, list[tuple[str, dict]]]:
    """run.json and the (stem, dict) of each result file, through the checked readers of `interp report`."""
    from interp.figures.report import RERUN, check_result, result_files
    from interp.runtime.jsonio import read_json

    run = read_json(folder / RUN_MARKER, "run record", "rerun the command that wrote the folder")
    results = [(stem, check_result(stem, read_json(f, "result file", RERUN, want=None), f))
               for stem, f in result_files(folder)]
    return run, results


def _dtype(run: dict, result: dict) -> str:
    d = run.get("dtype")
    if isinstance(d, dict) and isinstance(d.get("used"), str):
        return d["used"]
    prov = result.get("provenance")
    return prov.get("dtype", "float32") if isinstance(prov, dict) else "float32"


def _n_prompts(d: dict) -> int:
    niah = (d.get("config") or {}).get("niah") or {}
    lengths, depths = niah.get("context_lengths") or [], niah.get("depths") or []
    return len(lengths) * len(depths) * int(niah.get("n_seeds") or 0)


def _grid(d: dict) -> str:
    niah = (d.get("config") or {}).get("niah") or {}
    lengths = niah.get("context_lengths") or []
    return f"{_n_prompts(d)} prompts at {','.join(str(x) for x in lengths)} tokens" if lengths else ""


def build_atlas(paths, geometry_of=None) -> Atlas:
    """The atlas of every run folder at or below `paths`. `geometry_of(model name) -> (ModelSpec, architecture)`
    reads a model's geometry (default: its config through interp.models.memory.geometry, no weights); a model
    whose config cannot be read keeps what its results say (layers x heads from its score grids)."""
    groups: dict[str, list] = {}
    notes = []
    theta_sweep = None
    for folder in run_folders(paths):
        run, results = _read_run(folder)
        if not results:
            notes.append(f"{folder}: no result file the atlas reads")
            continue
        for stem, d in results:
            if stem == "atlas":  # an earlier atlas among the folders: not a model's run
                continue
            if stem == "theta":
                builds = [{"theta": b.get("rope_theta"), "n_heads": len(b.get("heads") or []),
                           "n_total": b.get("n_heads_total"), "retrieves": b.get("retrieves")}
                          for b in d["builds"] if isinstance(b, dict)]
                theta_sweep = {"run": str(folder), "base": d.get("base"), "builds": builds,
                               "trend": {k: (d.get("trend") or {}).get(k) for k in ("slope", "slope_lo", "slope_hi", "p_value")}}
                continue
            model = d.get("model")
            if isinstance(model, str):
                groups.setdefault(model, []).append((folder, stem, d, _dtype(run, d)))
    if not groups:
        raise InvalidInputError("none of the run folders holds a result the atlas reads (retrieval, ablation, "
                                "rope_zero, rope_profile, induction, copy_suppression)")
    models = []
    for model, items in groups.items():
        dtypes = sorted({dt for *_, dt in items})
        kinds = {}
        for _, stem, d, dt in items:  # a retrieval run is of a kind per score normalisation
            kinds.setdefault((stem, (d.get("config") or {}).get("score_norm")), set()).add(dt)
        if any(len(v) > 1 for v in kinds.values()):  # the same analysis in two dtypes: a column per dtype
            for dt in dtypes:
                models.append(_column(model, dt, [x for x in items if x[3] == dt], f"{model} ({dt})", geometry_of))
        else:
            main = max(dtypes, key=lambda dt: (sum(1 for x in items if x[3] == dt), dt == "float32"))
            models.append(_column(model, main, items, model, geometry_of))
    models.sort(key=lambda m: (m.geometry.get("d_model") or float("inf"), m.label))  # smallest model first
    return Atlas(models=models, theta_sweep=theta_sweep, notes=notes)


def _column(model: str, dtype: str, items: list, label: str, geometry_of) -> ModelAtlas:
    """One model's column; `dtype` is the column's (most runs'); an entry from a run in another dtype says so
    in its own "dtype"."""
    col = ModelAtlas(label=label, model=model, dtype=dtype, runs=sorted({str(f) for f, *_ in items}))
    by = {}
    dtype_of = {}
    for folder, stem, d, dt in items:
        by.setdefault(stem, []).append((folder, d))
        dtype_of[str(folder)] = dt
    _geometry(col, by, geometry_of)
    _retrieval(col, by.get("retrieval", []), by.get("ablation", []))
    col.masking = _masking(by.get("ablation", []))
    col.norms = _norms(by.get("rope_profile", []))
    col.rope_zero = _rope_zero(by.get("rope_zero", []), col.geometry.get("head_dim"))
    col.induction = _induction(by.get("induction", []), col.retrieval.get("answer", {}).get("heads") or [])
    col.copy_suppression = _copy_suppression(by.get("copy_suppression", []))
    for entry in [*col.retrieval.values(), col.masking, col.norms, col.rope_zero, col.induction, col.copy_suppression]:
        if entry:
            entry["dtype"] = dtype_of.get(entry["run"], dtype)
    for x in col.niah:
        x["dtype"] = dtype_of.get(x["run"], dtype)
    return col


def _geometry(col: ModelAtlas, by: dict, geometry_of) -> None:
    spec = None
    try:
        if geometry_of is not None:
            spec, col.architecture = geometry_of(col.model)
        else:
            from interp.models.memory import geometry

            g = geometry(col.model)
            spec, col.architecture = g.spec, g.spec.architecture
    except Exception:  # noqa: BLE001 - the config may be unreachable here (a run folder from elsewhere)
        spec = None
    if spec is not None:
        col.geometry = {"n_layers": spec.n_layers, "n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads,
                        "head_dim": spec.head_dim, "d_model": spec.d_model}
        if spec.layer_ropes:
            col.thetas = {t: r.theta for t, r in spec.layer_ropes.items()}
        elif spec.rope is not None:
            col.thetas = {"all": spec.rope.theta}
        return
    for _, d in by.get("retrieval", []) + by.get("induction", []):  # no config: the score grids' shape
        scores = d["scores"] if isinstance(d["scores"], list) else next(iter(d["scores"].values()), [])
        if scores:
            col.geometry = {"n_layers": len(scores), "n_heads": len(scores[0])}
            break
    for _, d in by.get("rope_profile", []):
        thetas = sorted({t for t in d.get("layer_theta") or [] if t})
        if thetas:
            col.thetas = {"all": thetas[0]} if len(thetas) == 1 else {f"theta {t:g}": t for t in thetas}


def _layers(heads: list[str]) -> dict:
    out: dict[int, int] = {}
    for h in heads:
        layer = int(h[1:].split("H")[0])
        out[layer] = out.get(layer, 0) + 1
    return {str(k): out[k] for k in sorted(out)}


def _retrieval(col: ModelAtlas, runs: list, ablations: list) -> None:
    sources = {str((d.get("detection") or {}).get("from", "")) for _, d in ablations}
    niah: dict[int, dict] = {}
    for folder, d in runs:
        lengths = ((d.get("config") or {}).get("niah") or {}).get("context_lengths") or []
        per_length = d.get("by_length") or ([{"length": lengths[0], "recall": d.get("baseline_recall"),
                                               "n_samples": d.get("n_samples")}] if len(lengths) == 1 else [])
        for b in per_length:
            n = int(b.get("n_samples") or 0)
            if b.get("length") is not None and (b["length"] not in niah or n > niah[b["length"]]["n"]):
                niah[b["length"]] = {"length": b["length"], "recall": b.get("recall"), "n": n, "run": str(folder)}
    col.niah = [niah[k] for k in sorted(niah)]
    for norm in ("answer", "needle"):
        cands = [(f, d) for f, d in runs if (d.get("config") or {}).get("score_norm", "answer") == norm]
        if not cands:
            continue

        def rank(fd):
            f, d = fd
            lengths = ((d.get("config") or {}).get("niah") or {}).get("context_lengths") or [10 ** 9]
            used = any(s and (s == str(f / "retrieval.json") or s == str(f) or s.startswith(str(f) + "/"))
                       for s in sources)
            return (not used, min(lengths), -_n_prompts(d))

        folder, d = min(cands, key=rank)
        scores = d["scores"]
        n_total = sum(len(r) for r in scores)
        heads = [f"L{li}H{hi}" for li, row in enumerate(scores) for hi, s in enumerate(row)
                 if s is not None and s > THRESHOLD]
        heads.sort(key=lambda h: -scores[int(h[1:].split("H")[0])][int(h.split("H")[1])])
        col.retrieval[norm] = {"heads": heads, "n_heads": len(heads), "n_total": n_total,
                               "share": len(heads) / n_total if n_total else None, "threshold": THRESHOLD,
                               "layers": _layers(heads), "grid": _grid(d), "run": str(folder)}


def _test(t: dict | None) -> dict | None:
    if not t:
        return None
    keys = ("mean_x", "mean_y", "diff", "diff_lo", "diff_hi", "p_value", "p_floor", "at_floor", "n")
    return {k: t.get(k) for k in keys if k in t}


def _masking(runs: list) -> dict | None:
    runs = [(f, d) for f, d in runs if d.get("target_vs_random")]
    if not runs:
        return None
    folder, d = max(runs, key=lambda fd: _n_prompts(fd[1]))
    base = next((c for c in d["conditions"] if c.get("role") == "baseline"), None)
    metric = d.get("metric", "recall")
    return {"metric": metric, "mode": d.get("mode"), "n_heads": len(d.get("heads") or []),
            "baseline": ((base or {}).get("estimates") or {}).get(metric, {}).get("mean"),
            "test": _test(d["target_vs_random"]), "draws": d.get("distinct_draws"),
            "random_pool": d.get("random_pool"), "grid": _grid(d), "run": str(folder)}


def _norms(runs: list) -> dict | None:
    if not runs:
        return None
    folder, d = max(runs, key=lambda fd: len(fd[1].get("retrieval_heads") or []))
    out = {"run": str(folder), "n_retrieval": len(d.get("retrieval_heads") or []), "stats": {}}
    for name, c in (d.get("comparisons") or {d.get("statistic", "qk_norm"): d.get("comparison")}).items():
        if not isinstance(c, dict):
            continue
        perm = c.get("layer_clustered_permutation") or {}
        ci = c.get("cohens_d_ci") or [None, None]
        out["stats"][name] = {"d": c.get("cohens_d"), "lo": ci[0], "hi": ci[1], "p": perm.get("p_value"),
                              "p_floor": perm.get("p_floor"), "at_floor": perm.get("at_floor"), "n_free_layers": perm.get("n_free_layers"),
                              "mean_retrieval": c.get("mean_retrieval"), "mean_other": c.get("mean_other")}
    return out


def _mean(block) -> float | None:
    return ((block or {}).get("metric") or {}).get("mean")


def _rope_zero(runs: list, head_dim) -> dict | None:
    if not runs:
        return None
    folder, d = max(runs, key=lambda fd: (_n_prompts(fd[1]), len(fd[1].get("doses") or [])))
    hd = ((d.get("baseline") or {}).get("rope") or {}).get("head_dim") or head_dim
    doses = []
    for x in d["doses"]:
        dims = len((x.get("target_dims") or {}).get("dims") or [])
        doses.append({"dose": x.get("dose"), "dims": dims, "frac": dims / hd if hd else None,
                      "target": _mean(x.get("target")), "random": _mean(x.get("random_pooled")),
                      "matched": _mean(x.get("matched_pooled")), "loss": (x.get("task") or {}).get("loss"),
                      "vs_random": _test(x.get("target_vs_random_dims")),
                      "vs_matched": _test(x.get("target_vs_matched_heads"))})
    return {"unit": d.get("unit"), "head_dim": hd, "n_heads": len(d.get("heads") or []), "metric": d.get("metric"),
            "doses": doses, "grid": _grid(d), "run": str(folder)}


def _induction(runs: list, retrieval_heads: list) -> dict | None:
    if not runs:
        return None
    folder, d = runs[0]
    heads = list(d.get("induction_heads") or [])
    causal = d.get("causal") or {}
    test = causal.get("target_vs_random_late_loss") or next(iter(causal.get("target_vs_random") or []), None)
    return {"heads": heads, "prev_token_heads": list(d.get("prev_token_heads") or []),
            "overlap": [h for h in heads if h in set(retrieval_heads)], "ablation": _test(test), "run": str(folder)}


def _copy_suppression(runs: list) -> dict | None:
    if not runs:
        return None
    folder, d = runs[0]
    return {"found": bool(d.get("found")), "heads": list(d.get("copy_suppression_heads") or []),
            "candidates": [c.get("head") for c in d.get("candidates") or []], "summary": d.get("summary") or "",
            "run": str(folder)}
