"""Attribution patching: every cell of a grid from one donor forward, one base forward and one backward.

AtP (Nanda 2023; Kramar et al. 2024, "AtP*", arXiv 2403.00745): the effect of patching activation a
from the donor into the base run is estimated to first order as (a_donor - a_base) . dM/da, with the
gradient taken in the base run (M = the per-pair raw metric; pairs are independent batch rows, so one
backward of their sum gives every pair's gradient). Gradients flow through the model's own attention
implementation (sdpa / eager); they are read from zero "probes" added to the activations.

What is exact and what is linear:
* method="atp": linear in every activation, including q and k, where a linear estimate through the
  softmax misses large changes of the pattern (attention saturation).
* method="atp-qk" (the AtP* QK fix): for q (per query head) and k (per key-value head) the head's
  attention pattern is recomputed EXACTLY with the donor query (or key) and the base keys (or
  queries), the head output z' = A' v follows exactly, and only the effect of z' - z on the metric is
  linearised (through dM/dz). Under GQA a patched key changes every query head of its group: their
  contributions are summed. Other sites are as in "atp" (v is linear in z given the pattern, so
  AtP on v is already exact up to the head output).
Values are reported like exact patching's: normalised, (estimated change) / (donor - base); raw, the
estimated patched metric base + estimated change.
Cancellation of direct and indirect effects is not fixed (a known AtP false-negative source): the
built-in verification runs exact patching on the top cells and a random sample of the rest and
reports the agreement.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.hooks.capture import Capture, module_for
from interp.hooks.interception import SiteHook
from interp.hooks.interventions import Intervention
from interp.sites import Site, SiteKind
from interp.patching.cells import GRID_SITES
from interp.patching.pairs import PatchPair
from interp.patching.config import PatchingConfig
from interp.patching.metrics import check_gap, metric_name, metric_values
from interp.patching.plan import check_pairs, sides
from interp.patching.result import PatchingResult, SiteGrid, axis_tokens, nested
from interp.patching.run import run_patching

METHODS = ("atp", "atp-qk")


class _Probes(Intervention):
    """Editor adding a zero tensor that requires grad to every layer's activation of `kinds`; after the
    backward, `grad(kind, layer)` is dM/da in the Capture layout ([b, s, d] or [b, s, heads, d])."""

    def __init__(self, kinds: set[str], n_layers: int):
        super().__init__(None)
        self.kinds, self.n_layers = set(kinds), n_layers
        self.probes: dict[tuple[str, int], torch.Tensor] = {}
        self.edits_qkv = bool(self.kinds & {"q", "k", "v"})
        self.edits_out = "head_out" in self.kinds

    def _add(self, kind, layer, t):  # t in the [b, s, ...] layout
        p = torch.zeros_like(t, requires_grad=True)
        self.probes[(kind, layer)] = p
        return t + p

    def site_hooks(self, model):
        out = []
        for kind in self.kinds:
            k = SiteKind(kind)
            if k.on_module:
                for l in range(self.n_layers):
                    out.append(SiteHook(module_for(model, Site(l, kind)), k.hook,
                                        lambda t, bs, kind=kind, l=l: self._add(kind, l, t), edits=True))
        return out

    def edit_qkv(self, call, q, k, v):
        t = {"q": q, "k": k, "v": v}
        for kind in ("q", "k", "v"):
            if kind in self.kinds:
                t[kind] = self._add(kind, call.layer, t[kind].transpose(1, 2)).transpose(1, 2)
        return t["q"], t["k"], t["v"]

    def edit_out(self, call, out):
        return self._add("head_out", call.layer, out)

    def tensors(self) -> list[torch.Tensor]:
        return list(self.probes.values())


class _Calls(Intervention):
    """Observer keeping each layer's AttnCall (mask, scaling, softcap) of the base run (for atp-qk)."""

    observes_qkv = True

    def __init__(self):
        super().__init__(None)
        self.calls = {}

    def observe_qkv(self, call, q, k, v):
        self.calls[call.layer] = call


@dataclass
class _Run:
    acts: dict  # (kind, layer) -> activation [P, T, ...] (detached)
    grads: dict  # (kind, layer) -> dM/da, same layout
    calls: dict  # layer -> AttnCall
    value: np.ndarray  # per-pair raw metric


def base_run(model, batch, kinds: set[str], config, pairs, want_calls: bool = False) -> _Run:
    """The probed base run, AtP's one forward and backward: every layer's activations of `kinds` and the metric's
    gradient with respect to them, the per-pair metric, and (`want_calls`) each layer's attention call."""
    L = model.spec.n_layers
    probes = _Probes(kinds, L)
    cap = Capture([Site(l, k) for k in sorted(kinds) for l in range(L)])
    rec = _Calls() if want_calls else None
    ivs = (probes, cap) + ((rec,) if rec else ())
    with torch.enable_grad(), model.intervene(*ivs):
        last = model.forward(batch, last_only=True, grad=True)[:, -1].float()
        a = torch.tensor([p.answer for p in pairs], device=last.device)
        if callable(config.metric):
            m = torch.as_tensor(config.metric(last, list(pairs)))
        elif config.metric == "logprob":
            m = torch.log_softmax(last, -1).gather(1, a[:, None])[:, 0]
        elif config.metric == "prob":
            m = torch.softmax(last, -1).gather(1, a[:, None])[:, 0]
        elif config.metric == "kl":
            raise InvalidInputError("metric 'kl' is for exact patching; attribution takes logit_diff, logprob or prob")
        else:
            w = torch.tensor([p.wrong for p in pairs], device=last.device)
            m = (last.gather(1, a[:, None]) - last.gather(1, w[:, None]))[:, 0]
        keys = list(probes.probes)
        grads = torch.autograd.grad(m.sum(), [probes.probes[k] for k in keys], allow_unused=True)
    acts = {(k, l): cap[Site(l, k)] for k in kinds for l in range(L)}
    g = {key: (torch.zeros_like(probes.probes[key]) if gr is None else gr.detach()) for key, gr in zip(keys, grads)}
    return _Run(acts, g, rec.calls if rec else {}, m.detach().cpu().numpy().astype(float))


def _head_output(call, q_h, k_h, v_h) -> torch.Tensor:
    """Exact output of one head [b, s, d] from q_h [b, 1, s, d], k_h, v_h [b, 1, s, d] (the base run's mask)."""
    from interp.hooks.rows import compute_rows

    b, _, s, _ = q_h.shape
    pos = torch.arange(s, device=q_h.device).expand(b, s)
    rows = compute_rows(call, q_h, k_h, pos)  # [b, 1, s, s] fp32
    return torch.matmul(rows, v_h.float())[:, 0]


def _qk_fixed(model, kind: str, run: _Run, donor: dict, layer: int) -> torch.Tensor:
    """[P, heads] estimates for q (query heads) or k (key-value heads) with the pattern recomputed exactly."""
    spec = model.spec
    call = run.calls[layer]
    q = run.acts[("q", layer)].transpose(1, 2)  # [P, H, T, d]
    k = run.acts[("k", layer)].transpose(1, 2)  # [P, KV, T, d]
    v = run.acts[("v", layer)].transpose(1, 2)
    z = run.acts[("head_out", layer)].float()  # [P, T, H, d]
    gz = run.grads[("head_out", layer)].float()
    n = spec.n_heads if kind == "q" else spec.n_kv_heads
    out = torch.zeros(q.shape[0], n)
    for h in range(spec.n_heads):
        kv = spec.kv_head_of(h)
        if kind == "q":
            qh = donor[("q", layer)].transpose(1, 2)[:, h:h + 1]
            kh = k[:, kv:kv + 1]
        else:
            qh = q[:, h:h + 1]
            kh = donor[("k", layer)].transpose(1, 2)[:, kv:kv + 1]
        z2 = _head_output(call, qh, kh, v[:, kv:kv + 1])
        est = ((z2 - z[:, :, h]) * gz[:, :, h]).sum((1, 2)).cpu()
        out[:, h if kind == "q" else kv] += est
    return out


def _linear(site: str, run: _Run, donor: dict, layer: int) -> torch.Tensor:
    kind, axes = GRID_SITES[site]
    kind = kind.value
    d = (donor[(kind, layer)].float() - run.acts[(kind, layer)].float()) * run.grads[(kind, layer)].float()
    if axes == ("layer", "position"):
        return d.sum(-1).cpu()  # [P, T]
    if axes == ("layer", "position", "head"):
        return d.sum(-1).cpu()  # [P, T, H]
    return d.sum((1, 3)).cpu()  # all positions: [P, heads]


def run_attribution(model, pairs: Sequence[PatchPair], config: PatchingConfig | None = None, method: str = "atp-qk",
                    verify_top: int = 10, verify_sample: int = 20, progress=None) -> PatchingResult:
    """Estimate every cell of `config.sites` by attribution patching, then check the estimate against
    exact patching on the `verify_top` cells with the largest |estimate| and `verify_sample` random
    other cells per site (0 and 0: no check). End-aligned positions only."""
    from interp import stats
    from interp.runtime.provenance import provenance

    config = config or PatchingConfig()
    if config.metric == "kl":
        raise InvalidInputError("metric 'kl' is for exact patching; attribution takes logit_diff, logprob or prob")
    if method not in METHODS:
        raise InvalidInputError(f"unknown attribution method {method!r}; valid: {', '.join(METHODS)} (or exact)")
    if config.align != "end":
        raise InvalidInputError("attribution patching supports end-aligned positions only (align='end')")
    pairs = list(pairs)
    check_pairs(model, pairs)
    spec = model.spec
    base_seqs, donor_seqs, lengths, T = sides(pairs, config.direction)
    labels = np.arange(-T, 0)
    qk = method == "atp-qk" and any(s in ("q", "k") for s in config.sites)
    kinds = {GRID_SITES[s][0].value for s in config.sites} | ({"q", "k", "v", "head_out"} if qk else set())
    donor_b, base_b = model.pad(donor_seqs), model.pad(base_seqs)
    with torch.no_grad():
        cap = Capture([Site(l, k) for k in sorted(kinds) for l in range(spec.n_layers)])
        with model.intervene(cap):
            donor_last = model.forward(donor_b, last_only=True)[:, -1]
        donor = {(k, l): cap[Site(l, k)] for k in kinds for l in range(spec.n_layers)}
    run = base_run(model, base_b, kinds, config, pairs, want_calls=qk)
    donor_value = metric_values(config, donor_last, pairs)
    gap = donor_value - run.value
    if config.normalize:
        check_gap(gap, metric_name(config.metric))
    valid = np.abs(gap) >= config.min_gap
    excluded = [int(i) for i in np.nonzero(~valid)[0]] if config.normalize else []
    has_pos = np.arange(T)[None, :] >= (T - lengths)[:, None]  # [P, T]: the pair has that position
    idx = list(range(T)) if config.positions is None else [int(p) + T for p in sorted(set(config.positions))]
    if any(not 0 <= i < T for i in idx):
        raise InvalidInputError(f"positions {config.positions} are not on the position axis -{T}..-1")
    pos_labels = [int(labels[i]) for i in idx]
    grids = {}
    for site in config.sites:
        kind, axes = GRID_SITES[site]
        with torch.no_grad():
            per_layer = [(_qk_fixed(model, kind.value, run, donor, l) if qk and kind.value in ("q", "k")
                          else _linear(site, run, donor, l)).numpy() for l in range(spec.n_layers)]
        est = np.stack(per_layer, 1).astype(float)  # [P, L, ...]
        if "position" in axes:
            mask = has_pos[:, None, :] if est.ndim == 3 else has_pos[:, None, :, None]
            est = np.where(mask, est, np.nan)
        per_pair_shape = (-1,) + (1,) * (est.ndim - 1)
        if config.normalize:  # the estimated change over the donor-base gap, like exact patching's
            est = est / np.where(valid, gap, np.nan).reshape(per_pair_shape)
        else:  # raw: the estimated patched metric (base + estimated change), like exact patching's raw values
            est = est + run.value.reshape(per_pair_shape)
        if config.positions is not None and "position" in axes:
            est = est[:, :, idx] if est.ndim == 3 else est[:, :, idx, :]
        shape = est.shape[1:]
        g = stats.column_mean_ci(est.reshape(len(pairs), -1), n_boot=config.n_boot, seed=config.seed)
        grids[site] = SiteGrid(
            site=site, kind=kind.value, axes=list(axes), mean=nested(g.mean, shape), lo=nested(g.lo, shape),
            hi=nested(g.hi, shape), n_pairs=g.n.reshape(shape).tolist(), per_pair=nested(est, est.shape),
            positions=pos_labels if "position" in axes else None,
            kv_query_heads=[[h for h in range(spec.n_heads) if spec.kv_head_of(h) == kv]
                            for kv in range(spec.n_kv_heads)] if "kv_head" in axes else None)
        if progress is not None:
            progress(1)
    verification = _verify(model, pairs, config, grids, verify_top, verify_sample) if (verify_top or verify_sample) \
        else None
    from dataclasses import asdict

    cfg = asdict(config)
    cfg["metric"] = metric_name(config.metric)
    cfg.update(method=method, verify_top=verify_top, verify_sample=verify_sample)
    return PatchingResult(
        model=model.name, direction=config.direction, metric=cfg["metric"], normalized=config.normalize, sites=grids,
        n_pairs=len(pairs), pair_lengths=lengths.tolist(), base_value=run.value.tolist(),
        donor_value=donor_value.tolist(), excluded_pairs=excluded,
        tokens=axis_tokens(model, pairs, lengths, np.array(pos_labels)),
        n_forward=2, n_rows=0, n_prefix_rows=0, tokens_computed=int(donor_b.input_ids.numel() * 2), align="end",
        config=cfg, provenance=provenance(model), sources=[p.source for p in pairs], method=method,
        verification=verification)


def _verify(model, pairs, config, grids: dict, top: int, sample: int) -> dict:
    """Exact patching on the top-|estimate| cells and a random sample of the others, per site."""
    from scipy import stats as sps

    rng = np.random.default_rng(config.seed)
    out = {}
    for site, g in grids.items():
        est = np.array(g.mean, dtype=float)
        flat = est.ravel()
        ok = np.nonzero(np.isfinite(flat))[0]
        order = ok[np.argsort(-np.abs(flat[ok]), kind="stable")]
        top_i = order[:top]
        rest = order[top:]
        samp = rng.choice(rest, size=min(sample, len(rest)), replace=False) if len(rest) else np.array([], int)
        chosen = np.concatenate([top_i, samp]).astype(int)
        cells = [tuple(int(x) for x in np.unravel_index(i, est.shape)) for i in chosen]
        exact = run_patching(model, pairs, PatchingConfig(
            sites=(site,), direction=config.direction, metric=config.metric, normalize=config.normalize,
            min_gap=config.min_gap, n_boot=10, seed=config.seed, max_batch=config.max_batch,
            positions=config.positions, cells={site: cells}))  # the same end-aligned axis: same indices
        ex = np.array(exact.sites[site].mean, dtype=float)
        e_vals = np.array([ex[c] for c in cells])
        a_vals = flat[chosen]
        k = len(top_i)
        ex_top = set(np.argsort(-np.abs(e_vals), kind="stable")[:k].tolist())
        recall = len(ex_top & set(range(k))) / k if k else None
        samp_e = e_vals[k:]
        miss = int(np.argmax(np.abs(samp_e))) if len(samp_e) else None
        warn = [f"{_label(cells[i], g)}: estimate {a_vals[i]:+.3f}, exact {e_vals[i]:+.3f}" for i in range(k)
                if np.sign(a_vals[i]) != np.sign(e_vals[i]) and abs(e_vals[i]) > 0.05]
        both = np.isfinite(e_vals) & np.isfinite(a_vals)
        labels = [_label(c, g) for c in cells]
        top_both = both[:k]
        out[site] = {
            "n_checked": int(len(chosen)), "top": k, "sample": int(len(samp)),
            "pearson": _corr(sps.pearsonr, a_vals[both], e_vals[both]),
            "spearman": _corr(sps.spearmanr, a_vals[both], e_vals[both]),
            **scale_agreement(a_vals[both], e_vals[both], [l for l, b in zip(labels, both) if b],
                              top=a_vals[:k][top_both], top_exact=e_vals[:k][top_both]),
            "top_k_recall": recall,
            "largest_missed": None if miss is None else {"cell": _label(cells[k + miss], g),
                                                          "exact": float(samp_e[miss]),
                                                          "estimate": float(a_vals[k + miss])},
            "sign_warnings": warn,
            "cells": [{"cell": _label(c, g), "estimate": float(a), "exact": float(e)}
                      for c, a, e in zip(cells, a_vals, e_vals)]}
    return out


def scale_agreement(a, e, labels, top=None, top_exact=None, n_misses: int = 3) -> dict:
    """How the estimates' SCALE agrees with the exact effects (a correlation cannot show it: estimates at half the
    truth correlate perfectly): `slope`, the least-squares slope of estimate on exact through 0 (estimate ~ slope x
    exact; 1 is a calibrated estimate), `ratio_top` (min, median, max of estimate / exact over the `top` cells whose
    |exact| is at least a tenth of the largest; None without them) and `largest_misses`, the `n_misses` cells with
    the largest |estimate - exact|, each {cell, estimate, exact}."""
    a, e = np.asarray(a, dtype=float), np.asarray(e, dtype=float)
    ee = float(np.sum(e * e))
    slope = float(np.sum(a * e) / ee) if ee > 0 else None
    ratio = None
    if top is not None and len(top):
        t, te = np.asarray(top, dtype=float), np.asarray(top_exact, dtype=float)
        big = np.abs(te) >= 0.1 * np.max(np.abs(e)) if e.size and np.max(np.abs(e)) > 0 else np.zeros(te.size, bool)
        if big.any():
            r = t[big] / te[big]
            ratio = {"min": float(r.min()), "median": float(np.median(r)), "max": float(r.max()), "n": int(big.sum())}
    order = np.argsort(-np.abs(a - e), kind="stable")[:n_misses]
    return {"slope": slope, "ratio_top": ratio,
            "largest_misses": [{"cell": labels[i], "estimate": float(a[i]), "exact": float(e[i])} for i in order]}


def _label(cell: tuple, g: SiteGrid) -> str:
    parts = []
    for ax, i in zip(g.axes, cell):
        parts.append(f"L{i}" if ax == "layer" else f"pos {g.positions[i]}" if ax == "position"
                     else f"KV{i}" if ax == "kv_head" else f"H{i}")
    return " ".join(parts)


def _corr(fn, a, b):
    if len(a) < 3 or np.std(a) == 0 or np.std(b) == 0:
        return None
    return float(fn(a, b)[0])


def grid_agreement(estimate, exact, site: str, ks: Sequence[int] = (10, 20)) -> dict:
    """How well a full attribution grid (`run_attribution`) matches a full exact grid (`run_patching`) of the
    same pairs and site, over every cell both have (the built-in verification checks only the top cells and a
    sample): Pearson and Spearman of the per-cell means, and per k in `ks` the top-k recall (the share of the
    k cells with the largest |exact effect| that are among the k largest |estimates|), the exact top-k cells
    with both values, and the ones the estimate missed; and the agreement of scale (`scale_agreement`: the slope
    of estimate on exact, estimate / exact over the top estimates, the largest misses). Takes result objects or
    their dicts."""
    from scipy import stats as sps

    d_est, d_ex = (r if isinstance(r, dict) else r.to_dict() for r in (estimate, exact))
    for name, d in (("estimate", d_est), ("exact", d_ex)):
        if site not in d["sites"]:
            raise InvalidInputError(f"the {name} result has no {site!r} grid (it has {', '.join(d['sites'])})")
    if d_est["n_pairs"] != d_ex["n_pairs"] or d_est.get("sources") != d_ex.get("sources"):
        raise InvalidInputError("the two results are not of the same pairs")
    g_est, g_ex = d_est["sites"][site], d_ex["sites"][site]
    a, e = np.array(g_est["mean"], dtype=float), np.array(g_ex["mean"], dtype=float)
    if a.shape != e.shape:
        raise InvalidInputError(f"the {site} grids differ in shape: {a.shape} vs {e.shape}")
    flat_a, flat_e = a.ravel(), e.ravel()
    ok = np.nonzero(np.isfinite(flat_a) & np.isfinite(flat_e))[0]
    g = SiteGrid(**g_ex)
    lab = [_label(tuple(int(x) for x in np.unravel_index(i, a.shape)), g) for i in range(a.size)]
    by_est = ok[np.argsort(-np.abs(flat_a[ok]), kind="stable")]
    by_ex = ok[np.argsort(-np.abs(flat_e[ok]), kind="stable")]
    top = {}
    for k in ks:
        k = min(int(k), len(ok))
        te, ta = by_ex[:k], set(by_est[:k].tolist())
        top[str(k)] = {"recall": len([i for i in te if i in ta]) / k if k else None,
                       "exact_top": [{"cell": lab[i], "exact": float(flat_e[i]), "estimate": float(flat_a[i]),
                                      "estimate_rank": int(np.nonzero(by_est == i)[0][0]) + 1} for i in te],
                       "missed": [lab[i] for i in te if i not in ta]}
    k0 = min(int(max(ks)) if ks else 10, len(ok))
    return {"site": site, "n_cells": int(len(ok)), "pearson": _corr(sps.pearsonr, flat_a[ok], flat_e[ok]),
            "spearman": _corr(sps.spearmanr, flat_a[ok], flat_e[ok]),
            **scale_agreement(flat_a[ok], flat_e[ok], [lab[i] for i in ok], top=flat_a[by_est[:k0]],
                              top_exact=flat_e[by_est[:k0]]),
            "top_k": top}
