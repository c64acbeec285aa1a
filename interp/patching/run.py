"""Activation patching: every cell of a grid, many cells per forward pass, equal to one pass per cell.

Procedure (direction "denoising", the default: clean activations into the corrupt run; "noising" swaps
the roles of the two prompts):
1. Base and donor baselines: the base prompts (corrupt) and the donor prompts (clean) of every pair
   run once; the donor run records the activations the grid needs (and only those), end-aligned
   and left-padded ([n_pairs, T, ...] per layer and kind).
2. Rows: one per (pair, cell). Rows are sorted by pair length and cut into chunks of at most
   `max_batch` rows; each chunk is one forward pass of the base prompts, left-padded, with a
   `CellPatch` per site kind that writes each row's own cell from its pair's donor activations.
3. Metric on the last position's logits (the LM head runs on that position only): the logit
   difference answer - wrong (default), the answer's log-prob, or a callable
   `fn(last_logits [rows, vocab], pairs) -> [rows]`. Normalised (default) per pair as
   (patched - base) / (donor - base): 0 = the patch changes nothing, 1 = it restores the donor's
   value fully (denoising: (patched - corrupt) / (clean - corrupt)); pairs whose donor and base
   values differ by less than `min_gap` are left out of the normalised numbers (counted in
   `excluded_pairs`).
4. Per cell: the mean over the pairs that have it and a percentile bootstrap CI over pairs.

Reuse of the unpatched prefix (`reuse_prefix`, default on): a row that patches position p (the
per-position sites: resid_*, attn_out, mlp_out, head_out_by_pos) leaves every earlier position of
every layer as in the base run (attention is causal). Such rows are grouped by (prompt length, p);
each group starts from the base run's keys and values of positions < p (captured once, post-RoPE,
what the KV cache holds) and computes positions p.. only. Exact up to float rounding (the
equality tests run with it on and off). All-position cells (head_out, q, k, v) change position 0
already, so they run whole.

Layer skipping (`skip_layers`, default on): a row whose cell sits at layer l leaves layers < l as in
the base run, so it starts at layer l from the base run's residual stream entering that layer
(captured once; `patching.skip.start_at`), with the KV cache of earlier positions as above. A pass
starts at the lowest start layer of its rows; rows are grouped by start layer, and passes are only
merged across start layers where a separate pass would cost more (its fixed overhead) than the
layers the merge recomputes. Exact up to float rounding (the equality tests run with it on and off).

The work bound: a row patching layer l at token p of an n-token prompt (p = 0 for all-position
cells) must recompute the share (L - l) / L x (n - p) / n of one forward pass of its prompt; the sum
over rows is `work_bound` W, in forward-pass equivalents (about 1/4 per cell of a full resid_pre
grid). `work_done` counts what the patched passes ran in the same unit (layers run x positions
computed, padding included); `work_ratio` = done / W (1 = nothing recomputed that the bound does not
need; the LM head and attention's reads of cached keys are not counted).
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass, field
from typing import Callable, Sequence

import numpy as np
import torch

from interp.runtime.distributed import fingerprint, map_units
from interp.errors import InvalidInputError
from interp.sites import Site
from interp.patching.cells import GRID_SITES, CellPatch, Cells, check_sites
from interp.patching.pairs import PatchPair
from interp.patching.skip import start_at

DIRECTIONS = ("denoising", "noising")
ALIGNS = ("end", "anchor")
METRICS = ("logit_diff", "logprob", "prob", "kl")
#: the smallest median |donor - base| worth normalising by, per metric (nats; a probability for prob)
WEAK_GAPS = {"prob": 0.02}


@dataclass
class PatchingConfig:
    """`sites`: grid sites (resid_pre, resid_post, attn_out, mlp_out, head_out, head_out_by_pos, q, k, v).
    `direction`: denoising (clean into corrupt) | noising. `metric`: logit_diff (logit(answer) - logit(wrong)) |
    logprob (log p(answer)) | prob (p(answer)) | kl (KL(donor || run) of the next-token distributions in nats: 0 for
    the donor run, so the normalised value 1 - KL(donor || patched) / KL(donor || base) is the share of the
    distance to the donor's whole distribution that the patch closes; exact patching only) | a callable;
    `normalize`: (patched - base) / (donor - base), pairs whose gap is below `min_gap` left out. `max_batch`:
    rows per forward; `reuse_prefix`: start per-position cells from the base run's KV cache; `skip_layers`: start
    each row at its cell's layer from the base run's residual stream. `align`: end |
    anchor position axis; `positions` / `cells`: only those. `n_boot`: bootstrap resamples for the CIs; `n_perm`:
    sign patterns drawn per cell test (every pattern when 2^n_pairs <= max(n_perm, 4096))."""

    sites: tuple[str, ...] = ("resid_pre",)
    direction: str = "denoising"
    metric: str | Callable = "logit_diff"
    normalize: bool = True
    max_batch: int | None = None  # rows per forward; default: about 2k tokens per pass on CPU, 16k on CUDA
    reuse_prefix: bool = True  # per-position cells start from the base run's KV cache of earlier positions
    skip_layers: bool = True  # rows start at their cell's layer from the base run's residual stream there
    align: str = "end"  # position axis: "end" (-1 = last token) or "anchor" (0 = each pair's anchor token)
    positions: tuple[int, ...] | None = None  # only these labels of the position axis (default: all)
    cells: dict | None = None  # {site: [cell index tuples over the site's axes]}: only those (e.g. AtP checks)
    min_gap: float = 1e-6
    n_boot: int = 1000
    n_perm: int = 2000  # sign patterns per cell test when 2^n_pairs is larger (else all are enumerated)
    seed: int = 0

    def __post_init__(self):
        self.sites = check_sites(self.sites if not isinstance(self.sites, str) else self.sites.split(","))
        if self.direction not in DIRECTIONS:
            raise InvalidInputError(f"unknown direction {self.direction!r}; valid: {', '.join(DIRECTIONS)}")
        if isinstance(self.metric, str) and self.metric not in METRICS:
            raise InvalidInputError(f"unknown metric {self.metric!r}; valid: {', '.join(METRICS)} or a callable")
        if self.align not in ALIGNS:
            raise InvalidInputError(f"unknown alignment {self.align!r}; valid: {', '.join(ALIGNS)}")
        if self.max_batch is not None and self.max_batch < 1:
            raise InvalidInputError("max_batch must be >= 1")


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
    per = np.array(result["sites"][site]["per_pair"], dtype=float)  # (patched - base) / gap, NaN: no cell
    gap = (np.asarray(result["donor_value"], dtype=float) - np.asarray(result["base_value"], dtype=float))
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


def _shape(model, site: str, n_pos: int) -> tuple[int, ...]:
    spec = model.spec
    axes = GRID_SITES[site][1]
    size = {"layer": spec.n_layers, "position": n_pos, "head": spec.n_heads, "kv_head": spec.n_kv_heads}
    return tuple(size[a] for a in axes)


def position_axis(lengths: np.ndarray, anchors: np.ndarray) -> np.ndarray:
    """Labels of the position axis: offsets from each pair's anchor that some pair has. End alignment
    uses anchor = length, so the labels are -T..-1 (-1 = the last token)."""
    return np.arange(int((-anchors).min()), int((lengths - anchors).max()))


def _enumerate(model, site: str, lengths: np.ndarray, anchors: np.ndarray, labels: np.ndarray):
    """(pair, cell index tuples [n, len(axes)], k = tokens from the end of the pair's prompt, 0 for
    all-position cells) of every row of `site`."""
    shape = _shape(model, site, len(labels))
    axes = GRID_SITES[site][1]
    grid = np.stack(np.meshgrid(*[np.arange(s) for s in shape], indexing="ij"), -1).reshape(-1, len(shape))
    pairs, cells, ks = [], [], []
    for p, (n, a) in enumerate(zip(lengths, anchors)):
        if "position" in axes:
            pos = a + labels[grid[:, axes.index("position")]]  # the cell's token index in this pair
            ok = (pos >= 0) & (pos < n)
            ks.append((n - pos)[ok])
        else:
            ok = np.ones(len(grid), dtype=bool)
            ks.append(np.zeros(int(ok.sum()), dtype=int))
        pairs.append(np.full(int(ok.sum()), p))
        cells.append(grid[ok])
    return np.concatenate(pairs), np.concatenate(cells), np.concatenate(ks)


def _metric(config, logits: torch.Tensor, pairs: Sequence[PatchPair]) -> np.ndarray:
    """Raw metric per row from last-position logits [rows, vocab]."""
    logits = logits.float()
    if callable(config.metric):
        v = np.asarray(torch.as_tensor(config.metric(logits, list(pairs))).detach().cpu().float(), dtype=float)
        if v.shape != (len(pairs),):
            raise InvalidInputError(f"the metric callable must return one number per row ({len(pairs)}), "
                                    f"got shape {v.shape}")
        return v
    if config.metric == "kl":
        raise InvalidInputError("metric 'kl' needs the donor run's distribution: exact patching (run_patching) "
                                "computes it; attribution and path patching take logit_diff, logprob or prob")
    a = torch.tensor([p.answer for p in pairs], device=logits.device)
    if config.metric == "logprob":
        return torch.log_softmax(logits, -1).gather(1, a[:, None])[:, 0].cpu().numpy().astype(float)
    if config.metric == "prob":
        return torch.softmax(logits, -1).gather(1, a[:, None])[:, 0].cpu().numpy().astype(float)
    w = torch.tensor([p.wrong for p in pairs], device=logits.device)
    return (logits.gather(1, a[:, None]) - logits.gather(1, w[:, None]))[:, 0].cpu().numpy().astype(float)


def _kl_to_donor(config, donor_last: torch.Tensor, pairs: Sequence[PatchPair]):
    """`config` with metric 'kl' made concrete: KL(donor || run) in nats between the pair's donor-run next-token
    distribution and a row's, per row (rows name their pairs by identity)."""
    from dataclasses import replace

    ref = torch.log_softmax(donor_last.float(), -1)  # [P, V]
    index = {id(p): i for i, p in enumerate(pairs)}

    def kl(logits, rows):
        r = ref[[index[id(p)] for p in rows]].to(logits.device)
        return (r.exp() * (r - torch.log_softmax(logits.float(), -1))).sum(-1).clamp(min=0.0)

    kl.__name__ = "kl"
    return replace(config, metric=kl)


def _capture_run(model, donor_batch, sites: tuple[str, ...]) -> dict[str, dict[int, torch.Tensor]]:
    """One run of `batch` capturing every kind `sites` needs: ({kind: {layer: [P, T, ...]}}, last-position logits)."""
    from interp.hooks.capture import Capture

    kinds = sorted({GRID_SITES[s][0].value for s in sites})
    cap_sites = [Site(l, k) for k in kinds for l in range(model.spec.n_layers)]
    cap = Capture(cap_sites)
    with model.intervene(cap):
        last = model.forward(donor_batch, last_only=True)[:, -1]
    return {k: {l: cap[Site(l, k)] for l in range(model.spec.n_layers)} for k in kinds}, last


def sides(pairs, direction: str):
    """(base prompts, donor prompts, lengths, max length): denoising runs the corrupt prompts with clean
    activations; noising the reverse."""
    denoise = direction == "denoising"
    lengths = np.array([p.n for p in pairs])
    return ([p.corrupt if denoise else p.clean for p in pairs], [p.clean if denoise else p.corrupt for p in pairs],
            lengths, int(lengths.max()))


def _check_pairs(model, pairs) -> None:
    if not pairs:
        raise InvalidInputError("no clean/corrupt pairs to patch")
    if not model.spec.causal:
        raise InvalidInputError(f"{model.spec.architecture} is an encoder: patching compares next-token logits")
    for p in pairs:
        for t in (p.answer, p.wrong):
            if not 0 <= t < model.spec.d_vocab:
                raise InvalidInputError(f"{p.source}: token id {t} is outside the vocabulary 0..{model.spec.d_vocab - 1}")


def _position_axis(pairs, config, lengths: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """(anchors, labels): each pair's anchor token (its length when end-aligned) and the position axis."""
    if config.align == "anchor":
        missing = [p.source or str(i) for i, p in enumerate(pairs) if p.anchor is None]
        if missing:
            raise InvalidInputError(f"align='anchor' needs an anchor token in every pair; missing in {missing[:3]}"
                                    f"{'' if len(missing) <= 3 else f' and {len(missing) - 3} more'} (a pairs "
                                    'file gives it as an "anchor" field per line: a token index or text of the '
                                    "clean prompt)")
        anchors = np.array([p.anchor for p in pairs])
    else:
        anchors = lengths
    labels = position_axis(lengths, anchors)
    if config.positions is not None:
        want = sorted(set(int(x) for x in config.positions))
        bad = [x for x in want if x not in set(labels.tolist())]
        if bad or not want:
            raise InvalidInputError(f"positions {bad or want} are not on the position axis {int(labels[0])}.."
                                    f"{int(labels[-1])} ({config.align}-aligned)")
        labels = np.array(want)
    return anchors, labels


def _rows(model, site: str, config, lengths, anchors, labels):
    """`_enumerate`'s rows of `site`, kept to `config.cells` when it names some."""
    row_pair, row_cell, row_k = _enumerate(model, site, lengths, anchors, labels)
    if config.cells is not None:
        want = {tuple(int(i) for i in c) for c in config.cells.get(site, ())}
        keep = np.array([tuple(c) in want for c in row_cell.tolist()], dtype=bool)
        row_pair, row_cell, row_k = row_pair[keep], row_cell[keep], row_k[keep]
    return row_pair, row_cell, row_k


def planned_rows(model, pairs: Sequence[PatchPair], config: PatchingConfig | None = None) -> int:
    """How many (pair, cell) rows `run_patching` will evaluate: the total of its progress bar."""
    return planned_work(model, pairs, config)[0]


def planned_work(model, pairs: Sequence[PatchPair], config: PatchingConfig | None = None) -> tuple[int, int]:
    """(rows, tokens) of the grid `run_patching` will evaluate, counted before it runs: its (pair, cell) rows
    and the token positions they recompute (a row patching position p of an n-token prompt recomputes the n - p
    positions from p on; an all-position cell all n), the measure a grid too large to start is refused by."""
    config = config or PatchingConfig()
    pairs = list(pairs)
    lengths = sides(pairs, config.direction)[2]
    anchors, labels = _position_axis(pairs, config, lengths)
    rows = tokens = 0
    for s in config.sites:
        row_pair, _, row_k = _rows(model, s, config, lengths, anchors, labels)
        rows += len(row_pair)
        tokens += int(np.where(row_k > 0, row_k, lengths[row_pair]).sum())
    return rows, tokens


def run_patching(model, pairs: Sequence[PatchPair], config: PatchingConfig | None = None,
                 progress: Callable[[int], None] | None = None) -> PatchingResult:
    """Patch every cell of every `config.sites` grid (see the module docstring)."""
    from interp import stats
    from interp.runtime.provenance import provenance

    config = config or PatchingConfig()
    pairs = list(pairs)
    _check_pairs(model, pairs)
    spec = model.spec
    base_seqs, donor_seqs, lengths, T = sides(pairs, config.direction)
    anchors, labels = _position_axis(pairs, config, lengths)
    donor_batch = model.pad(donor_seqs)
    reuse = config.reuse_prefix and any("position" in GRID_SITES[s][1] for s in config.sites)
    skip = config.skip_layers and spec.n_layers > 1
    base_sites = (("k", "v") if reuse else ()) + (("resid_pre",) if skip else ())
    with torch.no_grad():
        donor, donor_last = _capture_run(model, donor_batch, config.sites)
        base_acts, base_last = _capture_run(model, model.pad(base_seqs), base_sites) if base_sites else (
            None, model.forward(model.pad(base_seqs), last_only=True)[:, -1])
    mcfg = _kl_to_donor(config, donor_last, pairs) if config.metric == "kl" else config  # what _metric evaluates
    donor_value, base_value = _metric(mcfg, donor_last, pairs), _metric(mcfg, base_last, pairs)
    gap = donor_value - base_value
    excluded = [i for i, g in enumerate(gap) if abs(g) < config.min_gap] if config.normalize else []
    if config.normalize:
        check_gap(gap, metric_name(config.metric))

    budget = 16384 if model.device.type == "cuda" else 2048  # tokens per pass (CPU: cache-friendly batches)
    n_forward = n_rows = n_prefix_rows = n_skip_rows = tokens = 0
    work_bound = work_done = 0.0
    L = spec.n_layers
    overhead = _overhead_token_layers(model) if skip else 0.0
    grids = {}
    for site in config.sites:
        kind, axes = GRID_SITES[site]
        row_pair, row_cell, row_k = _rows(model, site, config, lengths, anchors, labels)
        order = np.argsort(lengths[row_pair], kind="stable")
        row_pair, row_cell, row_k = row_pair[order], row_cell[order], row_k[order]
        raw = np.full(len(row_pair), np.nan)
        prefix = (lengths[row_pair] - row_k) if (reuse and "position" in axes) else np.zeros(len(row_pair), int)
        start = row_cell[:, 0] if skip else np.zeros(len(row_pair), int)  # axis 0 is the layer of every grid site
        chunks = _chunks(lengths[row_pair], prefix, start, config.max_batch, budget, overhead)
        n_pos = np.where(row_k > 0, row_k, lengths[row_pair])  # positions from the cell on (all: every position)
        work_bound += float(np.sum((L - row_cell[:, 0]) / L * n_pos / lengths[row_pair]))

        def unit(j: int, site=site, kind=kind, axes=axes, row_pair=row_pair, row_cell=row_cell, row_k=row_k,
                 chunks=chunks) -> dict:  # one forward pass of patched rows: a sweep unit
            sel, p0, l0 = chunks[j]
            rp, rc = row_pair[sel], row_cell[sel]
            n = len(rp)
            ax = {a: torch.as_tensor(rc[:, i], dtype=torch.long) for i, a in enumerate(axes)}
            cells = Cells(row=torch.arange(n), layer=ax["layer"], k=torch.as_tensor(row_k[sel], dtype=torch.long),
                          head=ax.get("head", ax.get("kv_head", torch.full((n,), -1, dtype=torch.long))),
                          pair=torch.as_tensor(rp, dtype=torch.long))
            idx = torch.as_tensor(rp, dtype=torch.long)
            with torch.no_grad(), model.intervene(CellPatch(kind, cells, donor[kind.value])):
                if p0 > 0:  # every row of the chunk has this prompt length and patches position p0 first
                    n_tok = int(lengths[rp[0]])
                    cache = _prefix_cache(base_acts, rp, T - n_tok, p0, model.spec.n_layers)
                    ids = torch.tensor([base_seqs[i][p0:] for i in rp], device=model.device)
                    mask = torch.ones((n, n_tok), dtype=torch.long, device=model.device)
                    hidden = base_acts["resid_pre"][l0][idx, T - n_tok + p0:] if l0 else None
                    with start_at(model, l0, hidden):
                        last = model.forward_cached(ids, mask, cache)[:, -1]
                    n_tokens, n_prefix = ids.numel(), n
                else:
                    b = model.pad([base_seqs[i] for i in rp])
                    hidden = base_acts["resid_pre"][l0][idx, T - b.input_ids.shape[1]:] if l0 else None
                    with start_at(model, l0, hidden):
                        last = model.forward(b, last_only=True)[:, -1]
                    n_tokens, n_prefix = b.input_ids.numel(), 0
            if progress is not None:
                progress(n)
            done = (L - l0) / L * float(np.sum(n_tokens / n / lengths[rp]))  # each row's positions over its length
            return {"raw": _metric(mcfg, last, [pairs[i] for i in rp]), "tokens": n_tokens, "prefix_rows": n_prefix,
                    "skip_rows": n if l0 else 0, "work": done}

        key = json.dumps({"site": site, "config": repr(asdict(config)),
                          "rows": fingerprint([c for c, _, _ in chunks], [[p for _, p, _ in chunks],
                                                                            [l for _, _, l in chunks]],
                                              [row_pair, row_cell]),
                          "pairs": fingerprint([p.clean for p in pairs], [p.corrupt for p in pairs],
                                               [[p.answer, p.wrong] for p in pairs])})
        for (sel, _, _), r in zip(chunks, map_units(f"patch-{site}", len(chunks), unit, key, progress,
                                                    sizes=[len(c) for c, _, _ in chunks])):
            raw[sel] = r["raw"]
            tokens += int(r["tokens"])
            n_prefix_rows += int(r["prefix_rows"])
            n_skip_rows += int(r.get("skip_rows", 0))
            work_done += float(r.get("work", 0.0))
            n_forward += 1
        n_rows += len(row_pair)
        value = (raw - base_value[row_pair]) / np.where(np.abs(gap[row_pair]) < config.min_gap, np.nan,
                                                        gap[row_pair]) if config.normalize else raw
        shape = _shape(model, site, len(labels))
        per_pair = np.full((len(pairs),) + shape, np.nan)
        per_pair[(row_pair,) + tuple(row_cell.T)] = value
        est = stats.column_mean_ci(per_pair.reshape(len(pairs), -1), n_boot=config.n_boot, seed=config.seed)
        # the effect each pair's cell had, patched - base (normalised values are relative to base already)
        effect = per_pair if config.normalize else per_pair - base_value.reshape((-1,) + (1,) * len(shape))
        test = stats.column_sign_flip(effect.reshape(len(pairs), -1), n_perm=config.n_perm, seed=config.seed)
        grids[site] = SiteGrid(
            site=site, kind=kind.value, axes=list(axes), mean=_nested(est.mean, shape), lo=_nested(est.lo, shape),
            hi=_nested(est.hi, shape), n_pairs=est.n.reshape(shape).tolist(), per_pair=_nested(per_pair, per_pair.shape),
            positions=labels.tolist() if "position" in axes else None,
            kv_query_heads=[[h for h in range(spec.n_heads) if spec.kv_head_of(h) == kv] for kv in range(spec.n_kv_heads)]
            if "kv_head" in axes else None,
            p_value=_nested(test.p_value, shape), p_floor=_nested(test.p_floor, shape), p_bh=_nested(test.p_bh, shape))

    cfg = asdict(config)
    cfg["metric"] = metric_name(config.metric)
    cfg["tokens_per_pass"] = budget
    return PatchingResult(
        model=model.name, direction=config.direction, metric=cfg["metric"], normalized=config.normalize,
        sites=grids, n_pairs=len(pairs), pair_lengths=lengths.tolist(), base_value=base_value.tolist(),
        donor_value=donor_value.tolist(), excluded_pairs=excluded,
        tokens=axis_tokens(model, pairs, anchors, labels), align=config.align,
        n_forward=n_forward, n_rows=n_rows, n_prefix_rows=n_prefix_rows, tokens_computed=tokens,
        work_bound=round(work_bound, 6), work_done=round(work_done, 6), n_skip_rows=n_skip_rows,
        config=cfg, provenance=provenance(model),
        sources=[p.source for p in pairs])


WEAK_GAP = 0.1  # nats: a median |donor - base| below this makes normalised patching values noise


def check_gap(gap: np.ndarray, metric: str) -> None:
    """An InterpWarning when the donor and base runs barely differ in the metric (median |gap| < WEAK_GAP):
    every normalised value divides by that gap, so the grid is noise (e.g. a task the model cannot do)."""
    import warnings

    from interp.errors import InterpWarning

    med = float(np.median(np.abs(gap)))
    weak = WEAK_GAPS.get(metric, WEAK_GAP)
    if med < weak:
        warnings.warn(InterpWarning(
            f"the clean and corrupt runs barely differ: median |{metric}(donor) - {metric}(base)| = {med:.3g} over "
            f"{len(gap)} pairs (< {weak}); normalised patching values divide by it and are noise. Check that "
            "the model does the task (e.g. `interp organisms eval`), or use --raw (normalize=False)"), stacklevel=3)


def metric_name(metric) -> str:
    return metric if isinstance(metric, str) else getattr(metric, "__name__", "callable")


def axis_tokens(model, pairs, anchors, labels) -> dict:
    """{"clean": [...], "corrupt": [...]}: each pair's token at every label of the position axis ("" where
    the pair has none), the labels of the plots."""
    tok = model.tokenizer

    def words(seq, anchor):
        return [(tok.decode([seq[i]]) if tok is not None else str(seq[i])) if 0 <= i < len(seq) else ""
                for i in np.asarray(anchor) + np.asarray(labels)]

    return {"clean": [words(p.clean, a) for p, a in zip(pairs, anchors)],
            "corrupt": [words(p.corrupt, a) for p, a in zip(pairs, anchors)]}


def _chunks(lengths: np.ndarray, prefix: np.ndarray, start: np.ndarray, max_batch: int | None, budget: int,
            overhead: float = 0.0):
    """(row indices, prefix, start layer) per forward pass. Rows with a reusable prefix (> 0) are grouped
    by (prompt length, prefix), the rest run whole, sorted by length; within a group, rows are taken
    from the highest start layer down and a chunk starts at the lowest start layer of its rows. A row
    whose own start is higher recomputes the base run's layers in between (exact, but work), so a
    chunk is cut when adding the next row would make its rows run more extra token-layers than
    `overhead` (a forward pass's fixed cost in token-layers), or hold more than `max_batch` rows
    (default: about `budget` computed tokens)."""
    out = []

    def cut(idx: np.ndarray, p0: int, width: int):
        step = max_batch or max(1, budget // width)
        idx = idx[np.argsort(-start[idx], kind="stable")]
        lo = 0
        for i in range(1, len(idx) + 1):
            full = i - lo >= step
            if i == len(idx) or full or (i - lo) * width * (start[idx[i - 1]] - start[idx[i]]) > overhead:
                out.append((idx[lo:i], p0, int(start[idx[i - 1]])))
                lo = i

    whole = np.nonzero(prefix == 0)[0]
    whole = whole[np.argsort(lengths[whole], kind="stable")]
    if len(whole):
        cut(whole, 0, int(lengths[whole].max()))
    keys = {}
    for i in np.nonzero(prefix > 0)[0]:
        keys.setdefault((int(lengths[i]), int(prefix[i])), []).append(i)
    for (n, p0), idx in sorted(keys.items()):
        cut(np.array(idx), p0, n - p0)
    return out


FORWARD_OVERHEAD_FLOP = {"cpu": 4e8, "cuda": 2e11}  # a forward pass's fixed cost (Python, launches) in FLOP


def _overhead_token_layers(model) -> float:
    """A forward pass's fixed cost in token-layers of this model (2 FLOP per parameter of one layer)."""
    per_layer = sum(p.numel() for p in model.adapter.layers()[0].parameters())
    return FORWARD_OVERHEAD_FLOP.get(model.device.type, 4e8) / (2 * max(per_layer, 1))


def _prefix_cache(base_kv, pairs: np.ndarray, pad: int, p0: int, n_layers: int):
    """A DynamicCache holding the base run's keys/values of positions 0..p0-1 of each row's pair
    (rows all of one prompt length, left-padded by `pad` in the base batch)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    idx = torch.as_tensor(pairs, dtype=torch.long)
    for l in range(n_layers):
        k = base_kv["k"][l][idx, pad:pad + p0].transpose(1, 2)  # [rows, kv_heads, p0, head_dim]
        v = base_kv["v"][l][idx, pad:pad + p0].transpose(1, 2)
        cache.update(k.contiguous(), v.contiguous(), l)
    return cache


def _nested(a: np.ndarray, shape) -> list:
    """NaN-safe nested lists (NaN -> None, so the JSON is valid)."""
    a = np.asarray(a, dtype=float).reshape(shape)
    return np.where(np.isnan(a), None, np.round(a, 8)).tolist()
