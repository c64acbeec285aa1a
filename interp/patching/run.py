"""Activation patching: every cell of a grid, many cells per forward pass, equal to one pass per cell.

Procedure (direction "denoising", the default: clean activations into the corrupt run; "noising" swaps
the roles of the two prompts):
1. Base and donor baselines: the base prompts (corrupt) and the donor prompts (clean) of every pair
   run once; the donor run records the activations the grid needs (and only those), end-aligned
   and left-padded ([n_pairs, T, ...] per layer and kind).
2. Rows: one per (pair, cell), cut into passes (see the pass plan below); each pass is one forward
   pass of the base prompts, left-padded, with a `CellPatch` per site kind that writes each row's own
   cell from its pair's donor activations.
3. Metric on the last position's logits (the LM head runs on that position only): the logit
   difference answer - wrong (default), the answer's log-prob, or a callable
   `fn(last_logits [rows, vocab], pairs) -> [rows]`. Normalised (default) per pair as
   (patched - base) / (donor - base): 0 = the patch changes nothing, 1 = it restores the donor's
   value fully (denoising: (patched - corrupt) / (clean - corrupt)); pairs whose donor and base
   values differ by less than `min_gap` are left out of the normalised numbers (counted in
   `excluded_pairs`).
4. Per cell: the mean over the pairs that have it and a percentile bootstrap CI over pairs.

Reuse of the unpatched prefix (`reuse_prefix`, default on): a row that patches position -k (the
per-position sites: resid_*, attn_out, mlp_out, head_out_by_pos) leaves every earlier position of
every layer as in the base run (attention is causal), so it needs to compute its last k positions
only. A pass computes the last w positions of each of its rows (w: the largest k among them), whatever
their prompt lengths: everything is end-aligned, so the positions before the window are the same
padded indices of the left-padded base batch for every row, and they come from the base run's keys
and values (captured once, post-RoPE, what the KV cache holds; the left padding of shorter prompts
stays masked as in the base run). Exact up to float rounding (the equality tests run with it on and
off, on pairs of different lengths sharing passes). All-position cells (head_out, q, k, v) change
position 0 already, so they run whole.

Layer skipping (`skip_layers`, default on): a row whose cell sits at layer l leaves layers < l as in
the base run, so it starts at layer l from the base run's residual stream entering that layer
(captured once; `models.skip.start_at`), with the KV cache of earlier positions as above. A pass
starts at the lowest start layer of its rows. Exact up to float rounding (the equality tests run with it on
and off).

The pass plan (`_chunks`): rows are grouped by start layer and window, and passes are only merged
across start layers or windows where a separate pass would cost more (its fixed overhead) than the
layers and positions the merge recomputes.

The work bound: a row patching layer l at token p of an n-token prompt (p = 0 for all-position
cells) must recompute the share (L - l) / L x (n - p) / n of one forward pass of its prompt; the sum
over rows is `work_bound` W, in forward-pass equivalents (about 1/4 per cell of a full resid_pre
grid). `work_done` counts what the patched passes ran in the same unit (layers run x positions
computed, padding included); `work_ratio` = done / W (1 = nothing recomputed that the bound does not
need; the LM head and attention's reads of cached keys are not counted).
"""

from __future__ import annotations

import json
from contextlib import nullcontext
from dataclasses import asdict
from typing import Callable, Sequence

import numpy as np
import torch

from interp.hooks.float_logits import head_columns, output_head
from interp.runtime.distributed import fingerprint, map_units
from interp.sites import Site
from interp.patching.cells import GRID_SITES, CellPatch, Cells
from interp.patching.config import ALIGNS, DIRECTIONS, PatchingConfig
from interp.patching.metrics import METRICS, WEAK_GAP, WEAK_GAPS, check_gap, kl_to_donor, metric_name, metric_values
from interp.patching.pairs import PatchPair
from interp.patching.plan import (aligned_axis, check_pairs, grid_shape, planned_rows, planned_work, position_axis,
                                  sides, site_rows)
from interp.patching.result import (PatchingResult, SiteGrid, axis_tokens, nested, pooled_effect, site_effect,
                                    unstable_gaps)
from interp.models.skip import start_at

# the names this module held before the package was split by role (config, plan, metrics, result) stay importable
# from here: `from interp.patching.run import run_patching, PatchingConfig, PatchingResult, SiteGrid`
__all__ = ["ALIGNS", "DIRECTIONS", "METRICS", "WEAK_GAP", "WEAK_GAPS", "PatchingConfig", "PatchingResult", "SiteGrid",
           "axis_tokens", "check_gap", "metric_name", "planned_rows", "planned_work", "pooled_effect", "position_axis",
           "run_patching", "sides", "site_effect", "unstable_gaps"]


def run_patching(model, pairs: Sequence[PatchPair], config: PatchingConfig | None = None,
                 progress: Callable[[int], None] | None = None) -> PatchingResult:
    """Patch every cell of every `config.sites` grid (see the module docstring)."""
    from interp import stats
    from interp.runtime.provenance import provenance

    config = config or PatchingConfig()
    pairs = list(pairs)
    check_pairs(model, pairs)
    spec = model.spec
    base_seqs, donor_seqs, lengths, T = sides(pairs, config.direction)
    anchors, labels = aligned_axis(pairs, config, lengths)
    donor_batch, base_batch = model.pad(donor_seqs), model.pad(base_seqs)
    reuse = config.reuse_prefix and any("position" in GRID_SITES[s][1] for s in config.sites)
    skip = config.skip_layers and spec.n_layers > 1
    base_sites = (("k", "v") if reuse else ()) + (("resid_pre",) if skip else ())
    with torch.no_grad():
        donor, donor_last = _capture_run(model, donor_batch, config.sites)
        base_acts, base_last = _capture_run(model, base_batch, base_sites) if base_sites else (
            None, model.forward(base_batch, last_only=True)[:, -1])
    mcfg = kl_to_donor(config, donor_last, pairs) if config.metric == "kl" else config  # what metric_values evaluates
    donor_value, base_value = metric_values(mcfg, donor_last, pairs), metric_values(mcfg, base_last, pairs)
    gap = donor_value - base_value
    excluded = [i for i, g in enumerate(gap) if abs(g) < config.min_gap] if config.normalize else []
    if config.normalize:
        check_gap(gap, metric_name(config.metric))

    budget = 16384 if model.device.type == "cuda" else 2048  # tokens per pass (CPU: cache-friendly batches)
    two_logits = mcfg.metric == "logit_diff" and output_head(model.hf) is not None
    n_forward = n_rows = n_prefix_rows = n_skip_rows = tokens = 0
    work_bound = work_done = 0.0
    L = spec.n_layers
    overhead = _overhead_token_layers(model)
    grids = {}
    for site in config.sites:
        kind, axes = GRID_SITES[site]
        row_pair, row_cell, row_k = site_rows(model, site, config, lengths, anchors, labels)
        raw = np.full(len(row_pair), np.nan)
        # the positions a row computes, counted from the end: from its cell on (with prefix reuse), else all
        need = row_k if (reuse and "position" in axes) else lengths[row_pair]
        start = row_cell[:, 0] if skip else np.zeros(len(row_pair), int)  # axis 0 is the layer of every grid site
        chunks = _chunks(need, start, config.max_batch, budget, overhead, L)
        n_pos = np.where(row_k > 0, row_k, lengths[row_pair])  # positions from the cell on (all: every position)
        work_bound += float(np.sum((L - row_cell[:, 0]) / L * n_pos / lengths[row_pair]))

        def unit(j: int, site=site, kind=kind, axes=axes, row_pair=row_pair, row_cell=row_cell, row_k=row_k,
                 chunks=chunks) -> dict:  # one forward pass of patched rows: a sweep unit
            sel, w, l0 = chunks[j]
            rp, rc = row_pair[sel], row_cell[sel]
            n = len(rp)
            ax = {a: torch.as_tensor(rc[:, i], dtype=torch.long) for i, a in enumerate(axes)}
            cells = Cells(row=torch.arange(n), layer=ax["layer"], k=torch.as_tensor(row_k[sel], dtype=torch.long),
                          head=ax.get("head", ax.get("kv_head", torch.full((n,), -1, dtype=torch.long))),
                          pair=torch.as_tensor(rp, dtype=torch.long))
            idx = torch.as_tensor(rp, dtype=torch.long)
            # the pass computes the last w positions of every row (end-aligned: padded indices T-w..T-1 of the
            # base batch) from layer l0 on; the c positions before them, up to the longest prompt, come from the
            # base run's keys and values (left padding included, masked as in the base run)
            c = int(lengths[rp].max()) - w
            # the logit difference reads two logits of each row: the head computes just those
            cols = torch.tensor([[pairs[i].answer, pairs[i].wrong] for i in rp]) if two_logits else None
            hidden = base_acts["resid_pre"][l0][idx, T - w:] if l0 else None
            with torch.no_grad(), model.intervene(CellPatch(kind, cells, donor[kind.value])), \
                    (head_columns(model.hf, cols) if two_logits else nullcontext()), start_at(model, l0, hidden):
                if c > 0:
                    cache = _prefix_cache(base_acts, idx, T - w - c, T - w, model.spec.n_layers)
                    last = model.forward_cached(base_batch.input_ids[idx, T - w:],
                                                base_batch.attention_mask[idx, T - w - c:], cache)[:, -1]
                else:
                    last = model.forward(model.pad([base_seqs[i] for i in rp]), last_only=True)[:, -1]
            n_tokens, n_prefix = n * w, (n if c > 0 else 0)
            if progress is not None:
                progress(n)
            done = (L - l0) / L * float(np.sum(n_tokens / n / lengths[rp]))  # each row's positions over its length
            raw = ((last[:, 0] - last[:, 1]).float().cpu().numpy().astype(float) if two_logits
                   else metric_values(mcfg, last, [pairs[i] for i in rp]))
            return {"raw": raw, "tokens": n_tokens, "prefix_rows": n_prefix,
                    "skip_rows": n if l0 else 0, "work": done}

        key = json.dumps({"site": site, "config": repr(asdict(config)),
                          "rows": fingerprint([c for c, _, _ in chunks], [[w for _, w, _ in chunks],
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
        shape = grid_shape(model, site, len(labels))
        per_pair = np.full((len(pairs),) + shape, np.nan)
        per_pair[(row_pair,) + tuple(row_cell.T)] = value
        est = stats.column_mean_ci(per_pair.reshape(len(pairs), -1), n_boot=config.n_boot, seed=config.seed)
        # the effect each pair's cell had, patched - base (normalised values are relative to base already)
        effect = per_pair if config.normalize else per_pair - base_value.reshape((-1,) + (1,) * len(shape))
        test = stats.column_sign_flip(effect.reshape(len(pairs), -1), n_perm=config.n_perm, seed=config.seed)
        grids[site] = SiteGrid(
            site=site, kind=kind.value, axes=list(axes), mean=nested(est.mean, shape), lo=nested(est.lo, shape),
            hi=nested(est.hi, shape), n_pairs=est.n.reshape(shape).tolist(), per_pair=nested(per_pair, per_pair.shape),
            positions=labels.tolist() if "position" in axes else None,
            kv_query_heads=[[h for h in range(spec.n_heads) if spec.kv_head_of(h) == kv] for kv in range(spec.n_kv_heads)]
            if "kv_head" in axes else None,
            p_value=nested(test.p_value, shape), p_floor=nested(test.p_floor, shape), p_bh=nested(test.p_bh, shape))

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


def _chunks(need: np.ndarray, start: np.ndarray, max_batch: int | None, budget: int, overhead: float = 0.0,
            n_layers: int | None = None) -> list[tuple[np.ndarray, int, int]]:
    """(row indices, window w, start layer l0) per forward pass. Row r must compute its last `need[r]` positions
    (end-aligned: from its cell to the end, or its whole prompt) from layer `start[r]` on; a pass computes the last
    w positions (the largest need of its rows) of every row from l0 (the lowest start of its rows) on, whatever
    the rows' prompt lengths: a row whose need is smaller or whose start is higher recomputes base-run positions
    or layers (exact, but work). Rows are taken in one of two orders (start layer, highest first, then need; or
    need, lowest first, then start layer), and a pass is cut when adding the next row would add more extra
    token-layers than `overhead` (a forward pass's fixed cost in token-layers), or more than `max_batch` rows
    (default: about `budget` computed tokens); of the two orders the one whose passes cost less (token-layers +
    `overhead` per pass) is taken."""
    L = int(n_layers if n_layers is not None else (start.max() + 1 if len(start) else 1))

    def cut(order: np.ndarray) -> tuple[list, float]:
        out, lo, w, l0, cost, total = [], 0, 0, 0, 0.0, 0.0
        for i, r in enumerate(order):
            nr, sr = int(need[r]), int(start[r])
            own = nr * (L - sr)
            if i > lo:
                w1, m0 = max(w, nr), min(l0, sr)
                grown = (i - lo + 1) * w1 * (L - m0)
                full = (i - lo + 1) * w1 > budget if max_batch is None else i - lo >= max_batch
                if not full and grown - cost - own <= overhead:  # the extra work this row adds to the pass
                    w, l0, cost = w1, m0, grown
                    continue
                out.append((order[lo:i], w, l0))
                total += cost + overhead
                lo = i
            w, l0, cost = nr, sr, own
        if len(order):
            out.append((order[lo:], w, l0))
            total += cost + overhead
        return out, total

    by_layer = cut(np.lexsort((need, -start)))  # lexsort: the last key is the primary one
    by_need = cut(np.lexsort((-start, need)))
    return min(by_layer, by_need, key=lambda c: c[1])[0]


#: a forward pass's fixed cost in FLOP per device type: the seconds a pass costs beyond its token-proportional work
#: (Python, kernel launches, small matmuls running below peak) times a matmul rate. Measured on the CPU with
#: `bench/patch_overhead.py` (the CPU time of exact resid_pre grids at 4e8, 1.6e9 and 6.4e9, in float32 and in
#: bfloat16: 1.6e9 is the best or within 5% of it in both dtypes, docs/precision.md#speed).
FORWARD_OVERHEAD_FLOP = {"cpu": 1.6e9, "cuda": 2e11}


def _overhead_token_layers(model) -> float:
    """A forward pass's fixed cost in token-layers of this model (2 FLOP per parameter of one layer)."""
    per_layer = sum(p.numel() for p in model.adapter.layers()[0].parameters())
    return FORWARD_OVERHEAD_FLOP.get(model.device.type, FORWARD_OVERHEAD_FLOP["cpu"]) / (2 * max(per_layer, 1))


def _prefix_cache(base_kv, rows: torch.Tensor, a: int, b: int, n_layers: int):
    """A DynamicCache holding the base run's keys/values at padded indices a..b-1 of each row's pair (the base
    batch is left-padded and end-aligned: the same indices are the same position from the end in every pair)."""
    from transformers import DynamicCache

    cache = DynamicCache()
    for l in range(n_layers):
        k = base_kv["k"][l][rows, a:b].transpose(1, 2)  # [rows, kv_heads, b - a, head_dim]
        v = base_kv["v"][l][rows, a:b].transpose(1, 2)
        cache.update(k.contiguous(), v.contiguous(), l)
    return cache


def _capture_run(model, donor_batch, sites: tuple[str, ...]) -> dict[str, dict[int, torch.Tensor]]:
    """One run of `batch` capturing every kind `sites` needs: ({kind: {layer: [P, T, ...]}}, last-position logits)."""
    from interp.hooks.capture import Capture

    kinds = sorted({GRID_SITES[s][0].value for s in sites})
    cap_sites = [Site(l, k) for k in kinds for l in range(model.spec.n_layers)]
    cap = Capture(cap_sites)
    with model.intervene(cap):
        last = model.forward(donor_batch, last_only=True)[:, -1]
    return {k: {l: cap[Site(l, k)] for l in range(model.spec.n_layers)} for k in kinds}, last
