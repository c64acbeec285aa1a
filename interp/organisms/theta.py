"""Finding (ii) as a controlled experiment: retrieval heads of organisms that differ only in rope_theta.

The seed paper's finding (ii) (Bayram 2026, "Does RoPE Prevent or Degrade Retrieval Heads?") compares
LLaMA-2 (theta 1e4, 42 retrieval heads) with LLaMA-3.1 (theta 5e5, 47): two models that differ in far more
than theta. Here every build is the same recipe (tiny-llama v2: corpus,
architecture, steps) with rope_theta and the training seed varied (`interp.organisms.sweep`). Per build
(`measure_build`): NIAH recall on the detection grid, the retrieval heads at the threshold with the threshold
sweep, the share and layer histogram, the lowest-band RoPE zeroing dose response of those heads against
random dims and matched heads (finding iv), and the q/k-norm statistic of retrieval vs other heads with its
layer-clustered permutation test (finding iii). Across builds (`analyse_sweep`): head count vs theta with a
two-level bootstrap (training seeds, then NIAH seeds) and an exact permutation test of the slope on
log10(theta) (`interp.stats.trend`), over the builds that retrieve (recall >= RETRIEVES).
"""

from __future__ import annotations

import time
import warnings
from dataclasses import asdict, dataclass, field
from pathlib import Path

import numpy as np

from interp.tasks.niah import NiahConfig

RETRIEVES = 0.9  # NIAH recall at which a build counts as retrieving (its heads are counted)
DETECTION_LENGTHS = (512, 1024)
DETECTION_SEEDS = 8
DOSES = (0, 4, 8, 16, 32)
# Bayram 2026, finding (ii): retrieval heads of LLaMA-2-7B (theta 1e4) and LLaMA-3.1-8B (theta 5e5); both have 32 layers x 32 query heads.
PAPER = [
    {"model": "LLaMA-2-7B", "rope_theta": 1e4, "n_heads": 42, "total_heads": 1024},
    {"model": "LLaMA-3.1-8B", "rope_theta": 5e5, "n_heads": 47, "total_heads": 1024},
]


def detection_niah(lengths=DETECTION_LENGTHS, n_seeds: int = DETECTION_SEEDS) -> NiahConfig:
    return NiahConfig(context_lengths=tuple(lengths), n_seeds=n_seeds)


@dataclass
class BuildMeasure:
    """One build's numbers (module docstring). `sample_scores` [prompt][layer][head], `sample_recalled` and
    `sample_seeds` are the detection's per-prompt scores, outcomes and NIAH seeds (what the bootstrap resamples).
    `rope_zero`: per dose, recall with the lowest band zeroed in the retrieval heads, the pooled random-dim
    and matched-head controls and target-vs-random-dims; empty when the build has no retrieval head.
    `qk_norm`: Cohen's d of mean||q||*mean||k|| between retrieval and other heads with the layer-clustered
    permutation p (None without retrieval heads)."""

    name: str
    path: str
    rope_theta: float
    seed: int
    recall: float
    retrieves: bool
    threshold: float
    heads: list[str]
    n_heads_total: int
    per_layer: list[int]
    sweep: list[dict]
    scores: list[list[float]]
    rope_zero: list[dict]
    qk_norm: dict | None
    train_seconds: float | None
    measure_seconds: float
    sha256: str | None
    niah: dict
    sample_scores: list = field(default_factory=list, repr=False)
    sample_recalled: list[bool] = field(default_factory=list, repr=False)
    sample_seeds: list[int] = field(default_factory=list, repr=False)

    @property
    def n_heads(self) -> int:
        return len(self.heads)

    def recall_by_length(self) -> dict[int, float]:
        """NIAH recall per context length of the detection grid (its prompts run length-major, as
        `build_niah` makes them)."""
        lengths = list(self.niah.get("context_lengths") or [])
        if not lengths or not self.sample_recalled or len(self.sample_recalled) % len(lengths):
            return {}
        per = len(self.sample_recalled) // len(lengths)
        return {n: float(np.mean(self.sample_recalled[i * per:(i + 1) * per])) for i, n in enumerate(lengths)}

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> BuildMeasure:
        return cls(**{k: d[k] for k in cls.__dataclass_fields__ if k in d})


def _dose_summary(d) -> dict:
    m = lambda block: (block or {}).get("metric") or {}  # noqa: E731
    vs = d.target_vs_random_dims or {}
    return {"dose": d.dose, "target": m(d.target).get("mean"), "target_lo": m(d.target).get("lo"),
            "target_hi": m(d.target).get("hi"), "random_dims": m(d.random_pooled).get("mean"),
            "matched_heads": m(d.matched_pooled).get("mean"), "target_minus_random": vs.get("diff"),
            "target_minus_random_p": vs.get("p_value")}


def measure_build(path: str | Path, niah: NiahConfig | None = None, threshold: float = 0.1, doses=DOSES,
                  batch_size: int = 8, seed: int = 0) -> BuildMeasure:
    """Detect retrieval heads on `niah` (default: 512 and 1024 tokens, 8 seeds), then zero their lowest RoPE
    band at `doses` and compare their q/k norms with the other heads'."""
    import json

    import interp
    from interp.analyses.retrieval import RetrievalConfig, detect_retrieval_heads
    from interp.analyses.rope_profile import RopeProfileConfig, run_rope_profile
    from interp.analyses.rope_zero import RopeZeroConfig, run_rope_zero
    from interp.tasks.niah import build_niah, niah_for_model

    t0 = time.time()
    path = Path(path)
    card = json.loads((path / "organism.json").read_text())
    cfg = card["config"]
    model = interp.load_model(str(path))
    niah = niah_for_model(model, niah or detection_niah())
    samples = build_niah(model.tokenizer, niah)  # built once: the detection and the RoPE zeroing share them
    with warnings.catch_warnings():  # a build that recalls nothing is expected here: it is left out, by name
        warnings.filterwarnings("ignore", message="no NIAH sample was recalled")
        det = detect_retrieval_heads(model, RetrievalConfig(niah=niah, threshold=threshold, batch_size=batch_size,
                                                            keep_sample_scores=True), samples=samples)
    heads = det.head_ids()
    dose_rows, qk = [], None
    if heads:
        rz = run_rope_zero(model, RopeZeroConfig(heads=tuple(heads), niah=niah, doses=tuple(doses), seed=seed,
                                                 batch_size=batch_size, heads_source="retrieval (detected)"),
                           samples=samples)
        dose_rows = [_dose_summary(d) for d in rz.doses]
        prof = run_rope_profile(model, RopeProfileConfig(retrieval_heads=tuple(heads), heads_source="detected",
                                                         statistic="qk_norm", seed=seed))
        if prof.comparison is not None:
            c = prof.comparison
            qk = {"cohens_d": c["cohens_d"], "p_value": c["layer_clustered_permutation"]["p_value"],
                  "mean_retrieval": c["mean_retrieval"], "mean_other": c["mean_other"],
                  "n_retrieval": c["n_retrieval"]}
    spec = model.spec
    return BuildMeasure(
        name=path.name, path=str(path), rope_theta=float(cfg["rope_theta"]), seed=int(cfg["seed"]),
        recall=det.baseline_recall, retrieves=det.baseline_recall >= RETRIEVES, threshold=threshold,
        heads=list(det.heads), n_heads_total=spec.n_layers * spec.n_heads, per_layer=det.per_layer, sweep=det.sweep,
        scores=det.scores, rope_zero=dose_rows, qk_norm=qk, train_seconds=card.get("training", {}).get("train_seconds"),
        measure_seconds=round(time.time() - t0, 1), sha256=card.get("sha256"), niah=det.config["niah"],
        sample_scores=det.sample_scores, sample_recalled=[bool(o["recall"]) for o in det.outcomes],
        sample_seeds=det.sample_seeds)


@dataclass
class ThetaSweepResult:
    """The controlled experiment: every build's measures, the trend over the builds that retrieve, the builds
    left out (recall below RETRIEVES), the same trend over every build (`trend_all`: does leaving them out
    change the answer?) and the paper's two models beside them."""

    base: str
    builds: list[BuildMeasure]
    trend: dict  # interp.stats.trend.TrendResult.to_dict()
    excluded: list[str]
    trend_all: dict | None  # the same over every build (None when none was left out)
    recall_trend: dict  # NIAH recall of every build vs log10(theta): slope per decade, exact permutation p
    sweep_by_theta: dict  # {theta: {threshold: mean head count over the builds}}
    paper: list[dict]
    compute: dict
    config: dict
    model: str = ""  # "<base> rope_theta variants" (report pages name a result's model)
    provenance: dict = field(default_factory=dict)  # packages, interp's commit; each build's sha256 is in `builds`

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> ThetaSweepResult:
        """A ThetaSweepResult from its dict (theta.json), its builds rebuilt: the exact inverse of `to_dict`.
        InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def to_frame(self):
        """One row per build: theta, seed, recall, head count, share, heads, per-layer counts, qk-norm d and p,
        recall at the largest rope-zero dose vs random dims."""
        import pandas as pd

        rows = []
        for b in self.builds:
            last = b.rope_zero[-1] if b.rope_zero else {}
            rows.append({"build": b.name, "rope_theta": b.rope_theta, "seed": b.seed, "recall": b.recall,
                         "retrieves": b.retrieves, "n_heads": b.n_heads, "share": b.n_heads / b.n_heads_total,
                         "heads": ",".join(b.heads), "per_layer": "/".join(map(str, b.per_layer)),
                         "qk_norm_d": (b.qk_norm or {}).get("cohens_d"), "qk_norm_p": (b.qk_norm or {}).get("p_value"),
                         "rope_zero_dose": last.get("dose"), "rope_zero_recall": last.get("target"),
                         "rope_zero_random_dims": last.get("random_dims"),
                         "train_seconds": b.train_seconds, "measure_seconds": b.measure_seconds})
        return pd.DataFrame.from_records(rows)

    def table_md(self) -> str:
        """Head count vs theta: mean over seeds with the two-level bootstrap interval, the builds' counts,
        the share, the slope test; the paper's two models beside them."""
        t = self.trend
        lines = ["| rope_theta | builds | retrieval heads per build | mean [95% CI] | share |",
                 "|---|---|---|---|---|"]
        for s in t["settings"]:
            lines.append(f"| {s['setting']:g} | {len(s['counts'])} | {', '.join(map(str, s['counts']))} | "
                         f"{s['mean']:.1f} [{s['lo']:.1f}, {s['hi']:.1f}] | {s['mean'] / s['n_heads']:.1%} |")
        for p in self.paper:
            lines.append(f"| {p['rope_theta']:g} ({p['model']}, Bayram) | 1 | {p['n_heads']} | - | "
                         f"{p['n_heads'] / p['total_heads']:.1%} |")
        lines.append("")
        niah = (self.builds[0].niah or {}) if self.builds else {}
        if niah.get("context_lengths"):  # the grid every build was measured on: a count is only read with it
            lines.append(f"Detection: NIAH at {'/'.join(map(str, niah['context_lengths']))} tokens x "
                         f"{len(niah.get('depths') or [])} depths x {niah.get('n_seeds')} seeds per build; a build "
                         f"retrieves at recall >= {RETRIEVES}.")
        lines.append(f"Slope: {t['slope']:+.2f} heads per decade of theta [{t['slope_lo']:+.2f}, {t['slope_hi']:+.2f}], "
                     f"exact permutation p = {t['p_value']:.3f} ({t['n_permutations']} pairings; threshold "
                     f"{t['threshold']:g}, {t['n_boot']} bootstrap resamples of training seeds then NIAH seeds).")
        if self.excluded:
            lines.append(f"Left out (NIAH recall < {RETRIEVES}): {', '.join(self.excluded)}.")
        lines += ["", self.builds_md(), ""]
        r = self.recall_trend
        if r:
            made = "; ".join(f"{t}: {k} of {n}" for t, (k, n) in r["retrieving_of_built"].items())
            lines.append(f"Builds that retrieve (recall >= {RETRIEVES}) by theta: {made}. NIAH recall vs log10(theta), "
                         f"every build: slope {r['slope']:+.3f} per decade, exact permutation p = {r['p_value']:.3f} "
                         f"({r['n_permutations']} pairings).")
        c = self.compute
        lines.append(f"Compute: {c['builds']} builds, {c['train_seconds'] / 3600:.1f} h of training (one CPU thread per "
                     f"build, from their cards), {c['measure_seconds'] / 60:.0f} min of measuring.")
        if self.trend_all:
            a = self.trend_all
            counts = "; ".join(f"{s['setting']:g}: {', '.join(map(str, s['counts']))}" for s in a["settings"])
            lines.append(f"Every build, those left out included ({counts}): slope {a['slope']:+.2f} "
                         f"[{a['slope_lo']:+.2f}, {a['slope_hi']:+.2f}], exact permutation p = {a['p_value']:.3f}.")
        return "\n".join(lines)


    def builds_md(self, sweep=(0.05, 0.1, 0.2, 0.5), dose: int = 8) -> str:
        """One row per build: recall, retrieval heads and where they sit, the threshold sweep, NIAH recall with
        `dose` lowest-band dims of those heads zeroed vs as many random dims (finding iv), and the q/k-norm
        statistic's Cohen's d, retrieval vs other heads, with its layer-clustered p (finding iii)."""
        head = " / ".join(f">{t:g}" for t in sweep)
        lines = [f"| build | recall (by length) | retrieval heads (per layer) | heads {head} | recall, {dose} lowest "
                 f"dims zeroed vs random | qk_norm d (p) |", "|---|---|---|---|---|---|"]
        for b in self.builds:
            counts = {round(r["threshold"], 6): r["n_heads"] for r in b.sweep}
            rz = next((d for d in b.rope_zero if d["dose"] == dose), None)
            rz_cell = f"{rz['target']:.2f} vs {rz['random_dims']:.2f}" if rz else "-"
            qk = f"{b.qk_norm['cohens_d']:+.2f} ({b.qk_norm['p_value']:.2f})" if b.qk_norm else "-"
            by_len = ", ".join(f"{n}: {r:.2f}" for n, r in b.recall_by_length().items())
            lines.append(f"| {b.name} | {b.recall:.2f} ({by_len or '-'}) | {', '.join(b.heads) or '-'} "
                         f"({'/'.join(map(str, b.per_layer))}) | "
                         f"{' / '.join(str(counts.get(t, '-')) for t in sweep)} | {rz_cell} | {qk} |")
        return "\n".join(lines)


def analyse_sweep(builds: list[BuildMeasure], base: str, threshold: float = 0.1, n_boot: int = 2000,
            seed: int = 0) -> ThetaSweepResult:
    """The trend over the builds that retrieve (module docstring); raises InvalidInputError when fewer than two
    thetas have a retrieving build."""
    from interp.errors import InvalidInputError
    from interp.stats.trend import BuildScores, count_trend, slope_permutation

    used = [b for b in builds if b.retrieves]
    excluded = [f"{b.name} (recall {b.recall:.2f})" for b in builds if not b.retrieves]
    if len({b.rope_theta for b in used}) < 2:
        raise InvalidInputError(f"fewer than two thetas have a build that retrieves (recall >= {RETRIEVES}): "
                                f"{', '.join(excluded) or 'no builds'}")
    def scores(bs):
        return [BuildScores(b.rope_theta, np.array(b.sample_scores), np.array(b.sample_recalled),
                            np.array(b.sample_seeds), b.name) for b in bs]

    trend = count_trend(scores(used), threshold=threshold, n_boot=n_boot, seed=seed)
    trend_all = count_trend(scores(builds), threshold=threshold, n_boot=n_boot, seed=seed) if excluded else None
    slope, p, n_perm = slope_permutation([np.log10(b.rope_theta) for b in builds], [b.recall for b in builds], seed)
    retrieving = {f"{t:g}": [sum(b.retrieves for b in builds if b.rope_theta == t),
                             sum(b.rope_theta == t for b in builds)] for t in sorted({b.rope_theta for b in builds})}
    recall_trend = {"slope": slope, "p_value": p, "n_permutations": n_perm, "retrieving_of_built": retrieving}
    by_theta: dict = {}
    for b in used:
        for row in b.sweep:
            by_theta.setdefault(f"{b.rope_theta:g}", {}).setdefault(f"{row['threshold']:g}", []).append(row["n_heads"])
    sweep = {t: {k: float(np.mean(v)) for k, v in rows.items()} for t, rows in by_theta.items()}
    compute = {"train_seconds": round(sum(b.train_seconds or 0 for b in builds), 1),
               "measure_seconds": round(sum(b.measure_seconds for b in builds), 1), "builds": len(builds)}
    from interp.runtime.provenance import interp_git_commit, package_versions

    return ThetaSweepResult(model=f"{base} rope_theta variants",
                            provenance={"packages": package_versions(), "interp_commit": interp_git_commit()},
                            base=base, builds=list(builds), trend=trend.to_dict(), excluded=excluded,
                            trend_all=trend_all.to_dict() if trend_all else None, recall_trend=recall_trend,
                            sweep_by_theta=sweep, paper=PAPER, compute=compute,
                            config={"threshold": threshold, "n_boot": n_boot, "seed": seed, "retrieves": RETRIEVES})
