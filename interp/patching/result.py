"""What a patching run returns: PatchingResult (one SiteGrid per grid site) and the summaries read off a result
dict: the mean patching effect per cell (`site_effect`), the ratio of means (`pooled_effect`) and the pairs whose
donor - base gap makes per-pair normalised values unstable (`unstable_gaps`)."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import numpy as np

from interp.errors import InvalidInputError


@dataclass
class SiteGrid:
    site: str
    kind: str
    axes: list[str]  # e.g. ["layer", "position"]; `positions` labels the position axis
    mean: list  # nested lists over `axes` (NaN where no pair has the cell)
    lo: list
    hi: list
    n_pairs: list
    per_pair: list  # [pair][...axes], NaN where the pair lacks the cell
    positions: list[int] | None = None
    kv_query_heads: list[list[int]] | None = None  # k/v: the query heads each key-value head feeds
    # exact patching: per cell, the sign-flip p of the mean effect (patched - base) over pairs, the smallest p its
    # design allows, and the Benjamini-Hochberg p over the site's cells (stats.column_sign_flip); None for AtP
    p_value: list | None = None
    p_floor: list | None = None
    p_bh: list | None = None


@dataclass
class PatchingResult:
    model: str
    direction: str
    metric: str
    normalized: bool
    sites: dict  # grid site -> SiteGrid
    n_pairs: int
    pair_lengths: list[int]
    base_value: list[float]  # per pair, the unpatched base run's raw metric
    donor_value: list[float]  # per pair, the donor run's raw metric
    excluded_pairs: list[int]  # pairs left out of the normalised numbers (donor ~ base)
    tokens: dict  # {"clean": [[str per position]], "corrupt": [...]} per pair, end-aligned
    n_forward: int  # patched forward passes (chunks) run
    n_rows: int  # (pair, cell) rows evaluated
    n_prefix_rows: int  # rows that started from the base run's KV cache (reuse_prefix)
    tokens_computed: int  # token positions run through the model in the patched passes (padding included)
    align: str  # "end": position -1 = the last token; "anchor": position 0 = each pair's anchor token
    config: dict
    provenance: dict = field(default_factory=dict)
    sources: list[str] = field(default_factory=list)
    method: str = "exact"  # exact | atp | atp-qk (attribution.py)
    verification: dict | None = None  # attribution only: the estimate checked against exact patching
    work_bound: float = 0.0  # forward-pass equivalents an exact sweep must recompute (module docstring)
    work_done: float = 0.0  # forward-pass equivalents the patched passes ran (layers x positions, padding included)
    n_skip_rows: int = 0  # rows that started above layer 0 (skip_layers)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> PatchingResult:
        """A PatchingResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)

    def to_frame(self):
        """One row per (site, cell): the axes' values, mean, lo, hi, n_pairs, and `effect` (the mean patching
        effect, patched minus base: `site_effect`; `method` says whether these are measured, "exact", or AtP
        estimates, "atp" / "atp-qk"); exact patching adds `p_value` (sign-flip over pairs of that
        effect), `p_floor` (the smallest p the cell's design allows) and `p_bh` (Benjamini-Hochberg over the
        site's cells: many cells, many tests)."""
        import pandas as pd

        d = self.to_dict()
        recs = []
        for name, g in self.sites.items():
            g = g if isinstance(g, SiteGrid) else SiteGrid(**g)
            mean, lo, hi, n = (np.asarray(x, dtype=float) for x in (g.mean, g.lo, g.hi, g.n_pairs))
            effect, _ = site_effect(d, name)
            tests = None if g.p_value is None else [np.asarray(x, dtype=float) for x in (g.p_value, g.p_floor, g.p_bh)]
            for idx in np.ndindex(mean.shape):
                rec = {"model": self.model, "site": name, "metric": self.metric, "normalized": self.normalized,
                       "method": self.method}
                for ax, i in zip(g.axes, idx):
                    rec[ax] = g.positions[i] if ax == "position" else i
                rec.update(mean=mean[idx], lo=lo[idx], hi=hi[idx], n_pairs=int(n[idx]), effect=effect[idx])
                if tests is not None:
                    rec.update(p_value=tests[0][idx], p_floor=tests[1][idx], p_bh=tests[2][idx])
                recs.append(rec)
        return pd.DataFrame.from_records(recs)


def site_effect(result: dict, site: str) -> tuple[np.ndarray, np.ndarray]:
    """(effect, n) per cell of `site` in a patching result dict: the mean over the pairs that have the cell of
    the patching effect, patched minus base (the normalised value as it is, since it is already relative to the
    base: (patched - base) / (donor - base); for --raw, the raw patched metric minus each pair's base value), and
    how many pairs that is. NaN where no pair has the cell. A summary ranks cells by |effect|: a raw grid's
    largest values are often cells where nothing changed."""
    g = result["sites"][site]
    per = np.array(g["per_pair"], dtype=float)  # [pair, ...axes], NaN where the pair lacks the cell
    if not result["normalized"]:
        base = np.asarray(result["base_value"], dtype=float)
        per = per - base.reshape((-1,) + (1,) * (per.ndim - 1))
    n = np.sum(~np.isnan(per), axis=0)
    with np.errstate(invalid="ignore", divide="ignore"):
        effect = np.where(n > 0, np.nansum(per, axis=0) / np.maximum(n, 1), np.nan)
    return effect, n


def pooled_effect(result: dict, site: str) -> np.ndarray:
    """Per cell of `site` in a normalised patching result dict: the ratio of means, the sum over the pairs that
    have the cell of (patched - base) over the sum of their (donor - base), the normalisation Wang et al. (2022)
    use. Unlike the per-pair mean (`site_effect`), a pair whose donor and base values nearly agree (or are in
    the other order) cannot dominate it. NaN where no pair has the cell."""
    if not result["normalized"]:
        raise InvalidInputError("the ratio of means is for normalised results (this one is --raw)")
    return ratio_of_means(result["sites"][site]["per_pair"], result["donor_value"], result["base_value"])


def ratio_of_means(per_pair, donor_value, base_value) -> np.ndarray:
    """sum over pairs of (patched - base) / sum of (donor - base), from normalised per-pair effects
    [pairs, ...cells] ((patched - base) / gap; NaN where a pair lacks the cell): per cell, NaN where no pair has it."""
    per = np.asarray(per_pair, dtype=float)
    gap = (np.asarray(donor_value, dtype=float) - np.asarray(base_value, dtype=float))
    gap = gap.reshape((-1,) + (1,) * (per.ndim - 1))
    has = np.isfinite(per)
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.where(has.any(0), np.nansum(per * gap, 0) / np.where(has, gap, 0.0).sum(0), np.nan)


def unstable_gaps(donor_value, base_value, share: float = 0.25) -> list[int]:
    """Pairs whose donor - base gap is below `share` of the mean gap or of the other sign: where per-pair
    normalised values divide by little or flip sign (e.g. IOI prompts the model gets wrong, under a corruption
    whose metric is the clean logit difference itself)."""
    gap = np.asarray(donor_value, dtype=float) - np.asarray(base_value, dtype=float)
    m = gap.mean()
    return [int(i) for i in np.nonzero(gap * np.sign(m) < share * abs(m))[0]] if m != 0 else list(range(len(gap)))


def axis_tokens(model, pairs, anchors, labels) -> dict:
    """{"clean": [...], "corrupt": [...]}: each pair's token at every label of the position axis ("" where
    the pair has none), the labels of the plots."""
    tok = model.tokenizer

    def words(seq, anchor):
        return [(tok.decode([seq[i]]) if tok is not None else str(seq[i])) if 0 <= i < len(seq) else ""
                for i in np.asarray(anchor) + np.asarray(labels)]

    return {"clean": [words(p.clean, a) for p, a in zip(pairs, anchors)],
            "corrupt": [words(p.corrupt, a) for p, a in zip(pairs, anchors)]}


def nested(a: np.ndarray, shape) -> list:
    """NaN-safe nested lists (NaN -> None, so the JSON is valid)."""
    a = np.asarray(a, dtype=float).reshape(shape)
    return np.where(np.isnan(a), None, np.round(a, 8)).tolist()
