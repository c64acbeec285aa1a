"""Copy-suppression (negative copy) heads and self-repair (McDougall et al.; GPT-2 small L10H7).

Per query head:
(a) `ov_suppression`: fraction of sampled tokens t (by default from the ids seen in held-out corpus
    text when the model has a tokenizer, see tasks/repeated.token_pool) whose own logit is among the k most negative
    that the head's OV circuit writes when it reads t's effective embedding (circuits.py);
    `ov_self_z`: mean z-score of t's own logit in that column. `qk_circuit`: fraction of tokens
    whose own key (effective embedding) is among the k best for a query made from W_U[t].
(b) QK on natural text: at each position i >= 1, the token the head's input predicts (logit lens:
    final norm + unembedding applied to the residual stream entering the head's layer); where that
    token occurs at an earlier key 1..i-1, `qk_mass` = the head's attention on those occurrences and
    `qk_chance` = their share of the visible keys (uniform attention); `qk_lift` = mass / chance.
(c) `dla_attended`: direct logit attribution of the head to the token at its top key (position 0,
    the attention sink, excluded), at positions where that key has weight >= `min_attention`:
    W_U'[t] . L(W_O^h z_h) / s(x_final), with W_U' the unembedding centred over the vocabulary,
    L and s the final norm's linear part and its scale frozen from the clean run.
(d) For candidate heads (the `n_candidates` best by ov_suppression, or `heads`): the head is
    ablated and, for the same attended ("copied") tokens, `delta_prob` = p_ablated - p_clean
    (> 0: the model is overconfident without the head), `direct` = the head's direct effect on the
    centred logit (as in (c), with the ablated output subtracted, frozen scale), `total` = clean -
    ablated centred logit (full forward, final norm recomputed), `self_repair` = direct - total
    (downstream compensation, including the final norm's rescaling), `self_repair_fraction` =
    mean self_repair / mean direct (positive when the rest of the model compensates, whatever the
    sign of the head's effect).
The per-head maps of (b) and (c) pool all qualifying positions of all texts; the CIs of the
candidates are bootstrap CIs over per-text means (positions of one text are not independent).
Where the attention output is normalised before it is added to the residual stream (post-attention norms:
OLMo-2, Gemma-2, Gemma-3) a head's output is read through that norm's linear part with the scale of the whole
attention output frozen from the clean run, L(W_O^h z_h) / s(sum_h' W_O^h' z_h'), exactly as the final norm is
(circuits.post_attn_norms: the heads' shares add up to the norm's output); the OV scores of (a) read through
the same linear part. Any other architecture whose residual stream is not resid_pre + attn_out + mlp_out is
refused.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np
import torch

from interp.hooks.capture import Capture
from interp.errors import InvalidInputError, UnsupportedModelError
from interp.hooks.interventions import ABLATION_MODES, AblateHeads, Intervention
from interp.hooks.rows import compute_rows
from interp.tasks.repeated import resolve_source, token_pool
from interp.sites import HeadId, Site, SiteKind, as_heads
from interp.analyses.circuits import (FinalNormLinear, centered_unembed, ov_scores, post_attn_norms, qk_self_match,
                                     through, token_sample)


@dataclass
class CopySuppressionConfig:
    """`n_texts` natural-text windows of `seq_len` tokens (from `texts`, else held-out corpus documents).
    `tokens` / `token_source`: size and pool of the token sample for the OV/QK circuit scores; `k`: their
    top/bottom-k; `embedding`: "layer0" or "embed" effective embeddings (circuits.py). `min_attention`: top-key
    weight from which a position counts for `dla_attended`. `heads` (else the `n_candidates` best by
    ov_suppression) are ablated with `mode`. `ov_min`, `qk_lift_min`, `min_effect`: the copy-suppression
    criteria. `n_boot`: bootstrap resamples for the CIs."""

    n_texts: int = 64
    seq_len: int = 128
    texts: tuple[str, ...] | None = None  # documents (default: held-out corpus documents)
    seed: int = 0
    batch_size: int = 8
    tokens: int | None = 2048  # token sample size for the OV/QK circuit scores (None: the whole pool)
    token_source: str | tuple[int, ...] = "auto"  # pool of that sample: auto | vocab | corpus | ids
    k: int = 10
    embedding: str = "layer0"
    min_attention: float = 0.2
    heads: tuple | None = None  # heads for the ablation part (default: best by ov_suppression)
    n_candidates: int = 3
    mode: str = "zero"
    ov_min: float = 0.5  # criteria of a copy-suppression head (see `criteria` in the result)
    qk_lift_min: float = 2.0
    min_effect: float = 0.01  # |direct logit effect| in nats below which a head does not count as negative
    n_boot: int = 10000

    def __post_init__(self):
        if self.mode not in ABLATION_MODES:
            raise InvalidInputError(f"unknown ablation mode {self.mode!r}; valid: {', '.join(ABLATION_MODES)}")
        from interp.analyses.circuits import EMBEDDINGS

        if self.embedding not in EMBEDDINGS:
            raise InvalidInputError(f"unknown embedding mode {self.embedding!r}; valid: {', '.join(EMBEDDINGS)}")
        if not 0.0 <= self.min_attention <= 1.0:
            raise InvalidInputError("min_attention must lie in [0, 1]")
        if self.k < 1:
            raise InvalidInputError(f"k must be >= 1 (the top/bottom-k of the circuit scores), got {self.k}")
        if self.n_candidates < 0 or (self.batch_size != "auto" and self.batch_size < 1):
            raise InvalidInputError("n_candidates must be >= 0 and batch_size >= 1")


@dataclass
class CopySuppressionResult:
    model: str
    scores: dict  # name -> [layer][head]
    candidates: list[dict]  # ablation numbers, criteria and verdict per candidate head
    copy_suppression_heads: list[str]  # candidates meeting every criterion
    ranked: list[dict]  # every head by ov_suppression
    n_texts: int
    seq_len: int
    config: dict
    provenance: dict
    found: bool = False
    summary: str = ""

    def to_frame(self):
        """One row per (layer, head, quantity): every per-head score, `is_copy_suppression` and `is_candidate`."""
        from interp.figures.tables import head_frame

        return head_frame(self.scores, {"is_copy_suppression": self.copy_suppression_heads,
                                        "is_candidate": [c["head"] for c in self.candidates]}, model=self.model)

    def to_dict(self) -> dict:
        return asdict(self)

    @classmethod
    def from_dict(cls, d: dict) -> CopySuppressionResult:
        """A CopySuppressionResult from its dict (`to_dict()`, the result file), nested records rebuilt: the exact inverse of
        `to_dict`. InvalidInputError naming the field when one is missing or of the wrong shape."""
        from interp.runtime.records import from_dict

        return from_dict(cls, d)


class _TextRecorder(Intervention):
    """Per layer: top non-sink key and its weight per head; attention on earlier occurrences of the
    logit-lens prediction of the layer's input (read from `cap`, captured just before)."""

    observes_qkv = True

    def __init__(self, model, cap: Capture):
        super().__init__(None)
        self.cap, self.lens = cap, _logit_lens(model)

    def begin(self, ids: torch.Tensor):
        self.ids, self.top, self.qk = ids, {}, {}

    def observe_qkv(self, call, q, k, v):
        b, _, s, _ = q.shape
        pos = torch.arange(s, device=q.device)
        rows = compute_rows(call, q, k, pos.expand(b, s))  # [b, H, s, s]
        w, key = rows[..., 1:].max(-1)  # sink key 0 excluded
        self.top[call.layer] = (w, key + 1)
        pred = self.lens(self.cap[Site(call.layer, "resid_pre")])  # [b, s]
        ids = self.ids.to(q.device)
        visible = (pos[None, :] < pos[:, None]) & (pos[None, :] >= 1)  # earlier keys 1..i-1
        occ = (ids[:, None, :] == pred[:, :, None]) & visible  # [b, s, s]
        elig = occ.any(-1).float()
        mass = (rows * occ[:, None].float()).sum(-1)  # [b, H, s]
        chance = occ.sum(-1).float() / (pos + 1).float()
        self.qk[call.layer] = ((mass * elig[:, None]).sum(-1), (chance * elig).sum(-1), elig.sum(-1))


def _logit_lens(model):
    norm, unembed = model.adapter.final_norm(), model.adapter.unembed()

    @torch.no_grad()
    def predict(x: torch.Tensor) -> torch.Tensor:
        out = []
        for chunk in x.reshape(-1, x.shape[-1]).split(1024):
            h = norm(chunk) if norm is not None else chunk
            out.append(unembed(h).argmax(-1))
        return torch.cat(out).view(x.shape[:-1])

    return predict


def additive_tolerance(dtype: torch.dtype) -> float:
    """Relative tolerance of resid_pre + attn_out + mlp_out == resid_post: the model adds its residual stream in its
    own dtype, two roundings of at most half an ulp each at the stream's scale (bfloat16: 2^-8 of it, so a bf16
    model misses a float32 sum by ~0.4% of the largest activation), with a float32 floor of 1e-3. A post-attention
    norm breaks the sum by order 1, far above either."""
    return max(1e-3, 2 * torch.finfo(dtype).eps) if dtype.is_floating_point else 1e-3


def _check_additive(model, ids: torch.Tensor) -> None:
    """Refuse direct effects where the residual stream is not resid_pre + attn_out + mlp_out (attn_out and mlp_out
    are the sublayers' contributions, after a post-norm where the architecture has one)."""
    sites = [Site(0, k) for k in (SiteKind.RESID_PRE, SiteKind.ATTN_OUT, SiteKind.MLP_OUT, SiteKind.RESID_POST)]
    cap = Capture(sites)
    try:
        with model.intervene(cap):
            model.forward(ids[:1].to(model.device), logits=False)
    except UnsupportedModelError as e:
        raise UnsupportedModelError(f"copy-suppression direct effects need per-sublayer outputs: {e}") from None
    pre, attn, mlp, post = (cap[s].float() for s in sites)
    err = (pre + attn + mlp - post).abs().max().item()
    if err > additive_tolerance(cap[sites[3]].dtype) * max(1.0, post.abs().max().item()):
        raise UnsupportedModelError(
            f"{model.spec.architecture}: the residual stream is not resid_pre + attn_out + mlp_out (a post-attention "
            "norm?), so a head's direct logit effect is not defined here; copy-suppression analysis is refused")


class _Acc:
    """Per-text sums and counts of a per-head quantity: [n_texts, L, H]."""

    def __init__(self, n, L, H):
        self.sum, self.cnt = np.zeros((n, L, H)), np.zeros((n, L, H))

    def add(self, rows: slice, layer: int, values: torch.Tensor, mask: torch.Tensor):
        """values, mask [b, H, s]."""
        m = mask.float()
        self.sum[rows, layer] += (values.float() * m).sum(-1).cpu().numpy()
        self.cnt[rows, layer] += m.sum(-1).cpu().numpy()

    def per_text(self, layer: int, head: int) -> np.ndarray:
        c = self.cnt[:, layer, head]
        return self.sum[c > 0, layer, head] / c[c > 0]

    def pooled(self) -> np.ndarray:
        with np.errstate(invalid="ignore", divide="ignore"):
            return np.where(self.cnt.sum(0) > 0, self.sum.sum(0) / np.maximum(self.cnt.sum(0), 1), np.nan)


def detect_copy_suppression(model, config: CopySuppressionConfig | None = None, ids: torch.Tensor | None = None,
                            exclude_tokens=None, progress=None) -> CopySuppressionResult:
    """Score every head for copy suppression and ablate the candidates (see module docstring).

    `ids` [n, seq_len] replaces the natural text (needed for models without a tokenizer);
    `exclude_tokens` are left out of the token sample (default: the tokenizer's special tokens).
    """
    from interp import stats
    from interp.runtime.provenance import provenance
    from interp.tasks.text import text_windows

    from dataclasses import replace

    from interp.models.batching import resolve_batch_size

    config = config or CopySuppressionConfig()
    config = replace(config, batch_size=resolve_batch_size(model, config.batch_size, "ablate", [config.seq_len],
                                                           config.n_texts, logits="all"))
    spec = model.spec
    if not spec.causal:
        raise InvalidInputError(f"{spec.architecture} is an encoder: copy suppression is about next-token logits")
    if config.heads:
        AblateHeads(config.heads).bind(model)  # heads outside the model: InvalidInputError before any work
    if ids is None:
        ids = text_windows(model, config.n_texts, config.seq_len, config.seed, config.texts)
    ids = torch.as_tensor(ids, dtype=torch.long)
    if ids.ndim != 2 or ids.shape[1] < 2:
        raise InvalidInputError("ids must be [n_texts, seq_len] with seq_len >= 2")
    _check_additive(model, ids)
    if exclude_tokens is None:
        tok = model.tokenizer
        exclude_tokens = list(getattr(tok, "all_special_ids", None) or []) if tok is not None else []
    toks = token_sample(model, config.tokens, config.seed, exclude=exclude_tokens,
                        pool=token_pool(model, config.token_source))
    bs = max(64, config.batch_size)
    ov = ov_scores(model, toks, config.embedding, config.k, batch_size=bs)
    qk_circuit = qk_self_match(model, toks, config.embedding, config.k, batch_size=bs)
    if progress:
        progress(1)
    sup, z = np.array(ov["suppress_top_k"]), np.array(ov["self_logit_z"])
    if config.heads:
        cands = list(as_heads(config.heads))
    else:
        order = sorted(((-sup[l, h], z[l, h], l, h) for l in range(spec.n_layers) for h in range(spec.n_heads)))
        cands = [HeadId(l, h) for _, _, l, h in order[:config.n_candidates]]
    means = _reference_means(model, config) if config.mode == "mean" and cands else None
    text = _scan_texts(model, ids, cands, config, means, progress)

    n = ids.shape[0]
    scores = {"ov_suppression": sup, "ov_self_z": z, "qk_circuit": np.array(qk_circuit),
              "qk_mass": text["qk_mass"].pooled(), "qk_chance": text["qk_chance"].pooled(),
              "dla_attended": text["dla"].pooled(), "attended_frac": text["dla"].cnt.sum(0) / (n * (ids.shape[1] - 1))}
    with np.errstate(invalid="ignore", divide="ignore"):
        scores["qk_lift"] = scores["qk_mass"] / scores["qk_chance"]
    kw = dict(n_boot=config.n_boot, seed=config.seed)
    candidates = []
    for h in cands:
        l, hh = h.layer, h.head
        dla_t = text["dla"].per_text(l, hh)
        c = {"head": str(h), **{k: _num(v[l, hh]) for k, v in scores.items()},
             "dla_attended_ci": stats.mean_ci(dla_t, **kw).to_dict() if len(dla_t) else None,
             "n_texts_used": int(len(dla_t))}
        abl = {name: acc.per_text(l, hh) for name, acc in text["ablation"][h].items()}
        c["ablation"] = {name: (stats.mean_ci(v, **kw).to_dict() if len(v) else None) for name, v in abl.items()}
        c["self_repair_fraction"] = (_num(abl["self_repair"].mean() / abl["direct"].mean())
                                     if len(abl["direct"]) and abs(abl["direct"].mean()) > 1e-9 else None)
        c["criteria"] = {
            f"ov_suppression >= {config.ov_min}": bool(sup[l, hh] >= config.ov_min),
            f"qk_lift >= {config.qk_lift_min}": bool(np.nan_to_num(scores["qk_lift"][l, hh]) >= config.qk_lift_min),
            f"dla_attended < -{config.min_effect} (95% CI)": bool(c["dla_attended_ci"]
                                                                  and c["dla_attended_ci"]["hi"] < -config.min_effect),
            "ablation raises p(copied token) (95% CI)": bool(c["ablation"]["delta_prob"]
                                                              and c["ablation"]["delta_prob"]["lo"] > 0),
        }
        c["is_copy_suppression"] = all(c["criteria"].values())
        candidates.append(c)
    found = [c["head"] for c in candidates if c["is_copy_suppression"]]
    ranked = sorted(({"head": f"L{l}H{h}", **{k: _num(v[l, h]) for k, v in scores.items()}}
                     for l in range(spec.n_layers) for h in range(spec.n_heads)),
                    key=lambda r: (-r["ov_suppression"], r["ov_self_z"]))
    cfg = asdict(config)
    cfg["heads"] = None if config.heads is None else [str(x) for x in as_heads(config.heads)]
    cfg["texts"] = None if config.texts is None else f"{len(config.texts)} user documents"
    cfg["n_tokens_sampled"] = int(toks.numel())
    cfg["token_source"] = resolve_source(model, config.token_source)
    return CopySuppressionResult(
        model=model.name, scores={k: [[_num(x) for x in row] for row in v] for k, v in scores.items()},
        candidates=candidates,
        copy_suppression_heads=found, ranked=ranked, n_texts=n, seq_len=int(ids.shape[1]), config=cfg,
        provenance=provenance(model), found=bool(found), summary=_summary(candidates, found))


def _num(x) -> float | None:
    x = float(x)
    return None if not np.isfinite(x) else round(x, 6)


def _summary(candidates, found) -> str:
    if found:
        return f"copy-suppression head(s) found: {', '.join(found)} (every criterion met)"
    if not candidates:
        return "no candidate heads were tested"
    best = candidates[0]
    missed = [k for k, ok in best["criteria"].items() if not ok]
    return (f"no copy-suppression head found among {len(candidates)} candidates; the best by OV suppression, "
            f"{best['head']}, misses: {'; '.join(missed)}")


def _reference_means(model, config):
    """Mean head outputs over held-out corpus windows of another seed (disjoint from the scanned texts)."""
    from interp.experiments import mean_head_outputs
    from interp.tasks.text import text_windows

    if config.texts is not None or model.tokenizer is None:
        raise InvalidInputError("mode='mean' needs reference texts: use the default corpus text or mode='zero'")
    ref = text_windows(model, max(2, config.n_texts // 2), config.seq_len, config.seed + 1, None).to(model.device)
    return mean_head_outputs(model, [(ref, torch.ones_like(ref))], config.batch_size)


@torch.no_grad()
def _scan_texts(model, ids, cands, config, means, progress) -> dict:
    spec = model.spec
    L, H, n = spec.n_layers, spec.n_heads, ids.shape[0]
    norm, wuc = FinalNormLinear(model), centered_unembed(model)
    final_norm = model.adapter.final_norm()
    if final_norm is None:
        final_norm = torch.nn.Identity()
    wo = [model.adapter.o_weight(l).detach().float().view(spec.d_model, H, spec.head_dim) for l in range(L)]
    post = post_attn_norms(model)
    last = Site(L - 1, "resid_post")
    acc = {name: _Acc(n, L, H) for name in ("qk_mass", "qk_chance", "dla")}
    abl = {h: {name: _Acc(n, L, H) for name in ("delta_prob", "direct", "total", "self_repair")} for h in cands}
    for start in range(0, n, config.batch_size):
        x = ids[start:start + config.batch_size].to(model.device)
        rows = slice(start, start + x.shape[0])
        cap = Capture([Site(l, "resid_pre") for l in range(L)] + [Site(l, "head_out") for l in range(L)] + [last])
        rec = _TextRecorder(model, cap)
        rec.begin(x)
        with model.intervene(cap, rec):
            logits = model.forward(x)
        xf = cap[last].float()
        sf = norm.scale(xf)  # [b, s]
        sa = [_attn_scale(post[l], cap[Site(l, "head_out")], wo[l], model.adapter.o_proj(l).bias) for l in range(L)]
        for l in range(L):
            mass, chance, cnt = rec.qk[l]
            acc["qk_mass"].sum[rows, l] += mass.cpu().numpy()
            acc["qk_chance"].sum[rows, l] += chance.cpu().numpy()[:, None]
            acc["qk_mass"].cnt[rows, l] += cnt.cpu().numpy()[:, None]
            acc["qk_chance"].cnt[rows, l] += cnt.cpu().numpy()[:, None]
            w, key = rec.top[l]  # [b, H, s]
            att_tok = torch.gather(x[:, None, :].expand(-1, H, -1), 2, key)  # [b, H, s]
            sel = w >= config.min_attention
            sel[..., 0] = False
            z = cap[Site(l, "head_out")].float()  # [b, s, H, hd]
            dla = torch.stack([_direct(norm, wuc, wo[l][:, h], z[:, :, h], att_tok[:, h], sf, post[l], sa[l])
                               for h in range(H)], 1)
            acc["dla"].add(rows, l, dla, sel)
        if cands:
            _ablate(model, x, rows, cands, config, means, logits, xf, sf, cap, rec, norm, wuc, wo, final_norm, abl,
                    post, sa)
        if progress:
            progress(x.shape[0])
    return {**acc, "ablation": abl}


def _attn_scale(post, z: torch.Tensor, wo: torch.Tensor, bias) -> torch.Tensor | None:
    """The post-attention norm's scale of the whole attention output sum_h W_O^h z_h (+ b_O) [b, s] (clean run),
    None without a post-attention norm."""
    if post is None:
        return None
    a = torch.einsum("bshd,mhd->bsm", z.float(), wo)
    return post.scale(a + bias.float() if bias is not None else a)


def _direct(norm, wuc, wo_h, z_h, tokens, sf, post=None, sa=None) -> torch.Tensor:
    """Direct effect of head output z_h [b, s, hd] on the centred logits of `tokens` [b, s]: [b, s]; through the
    post-attention norm (`post`, its frozen scale `sa` [b, s]) where the architecture has one."""
    o = z_h @ wo_h.t()
    if post is not None:
        o = through(post, o) / sa.clamp(min=1e-30)[..., None]
    c = norm.linear(o)  # [b, s, d]
    return (c * wuc[tokens]).sum(-1) / sf.clamp(min=1e-30)


def _ablate(model, x, rows, cands, config, means, logits, xf, sf, cap, rec, norm, wuc, wo, final_norm, abl,
            post, sa):
    L = model.spec.n_layers
    last = Site(L - 1, "resid_post")
    p_clean = torch.softmax(logits.float(), -1)
    r_clean = final_norm(cap[last]).float()
    for h in cands:
        w, key = rec.top[h.layer]
        tok = torch.gather(x, 1, key[:, h.head])  # [b, s] attended ("copied") token
        sel = (w[:, h.head] >= config.min_attention)
        sel[:, 0] = False
        cap2 = Capture([last, Site(h.layer, "head_out")])
        with model.intervene(AblateHeads([h], mode=config.mode, means=means), cap2):
            lg = model.forward(x)
        p_abl = torch.softmax(lg.float(), -1)
        r_abl = final_norm(cap2[last]).float()
        dp = (p_abl.gather(-1, tok[..., None]) - p_clean.gather(-1, tok[..., None]))[..., 0]
        total = ((r_clean - r_abl) * wuc[tok]).sum(-1)
        dz = cap[Site(h.layer, "head_out")][:, :, h.head].float() - cap2[Site(h.layer, "head_out")][:, :, h.head].float()
        direct = _direct(norm, wuc, wo[h.layer][:, h.head], dz, tok, sf, post[h.layer], sa[h.layer])
        for name, val in (("delta_prob", dp), ("direct", direct), ("total", total), ("self_repair", direct - total)):
            abl[h][name].add(rows, h.layer, val[:, None].expand(-1, model.spec.n_heads, -1),
                             _one_head(sel, h.head, model.spec.n_heads))


def _one_head(sel: torch.Tensor, head: int, n_heads: int) -> torch.Tensor:
    m = torch.zeros(sel.shape[0], n_heads, sel.shape[1], dtype=torch.bool, device=sel.device)
    m[:, head] = sel
    return m
