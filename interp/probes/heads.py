"""Per-head structure vs semantic classification from attention patterns.

Prompts are corpus-generator passages written twice (A A, held-out seeds, A of 2-4 sentences), so
every token has a content match at a varying, long distance. Over all non-special queries q:
- offset_mass: the largest mean attention on one fixed relative offset d (|d| <= window; d = 0 is
  the token itself), with that best offset;
- sink_mass: mean attention on special tokens (BOS, CLS, SEP);
- match_mass: mean attention on content matches, keys farther than `window` from q holding the
  query's token or following an occurrence of it (duplicate-token and induction-style matching),
  over queries that have one; match_uniform is what uniform attention would put there.
Each mass is compared with what uniform attention over the visible keys would give (offset_uniform,
match_uniform). A head is "content" (semantic) if match_mass >= threshold, at least `enrichment`
times its uniform value, and more enriched than its best offset; else "offset" (structure) if
offset_mass >= threshold and at least `enrichment` times uniform; else "sink" (structure) if
sink_mass >= sink_threshold; else "mixed" (diffuse or none of these).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass

import numpy as np

from interp.errors import InvalidInputError

GROUPS = {"offset": "structure", "sink": "structure", "content": "semantic", "mixed": "mixed"}


@dataclass
class HeadConfig:
    n_prompts: int = 24
    max_length: int = 128
    window: int = 8
    threshold: float = 0.2
    enrichment: float = 3.0
    sink_threshold: float = 0.5
    seed: int = 0

    def __post_init__(self):
        if self.n_prompts < 1 or self.max_length < 8 or self.window < 1:
            raise InvalidInputError("head classification needs n_prompts >= 1, max_length >= 8, window >= 1")


@dataclass
class HeadResult:
    model: str
    heads: list[dict]
    per_layer: list[dict]
    config: dict

    def to_dict(self) -> dict:
        return asdict(self)

    def to_frame(self):
        """One row per head: its class and the scores behind it."""
        from interp.figures.tables import records_frame

        return records_frame(self.heads, model=self.model)

    def label_grid(self) -> list[list[str]]:
        L = len(self.per_layer)
        H = len(self.heads) // max(L, 1)
        return [[self.heads[l * H + h]["label"] for h in range(H)] for l in range(L)]


def repeated_prompts(tokenizer, cfg: HeadConfig) -> list[tuple[np.ndarray, np.ndarray]]:
    """(token ids, special mask) of `n_prompts` passages written twice, truncated to max_length."""
    import random

    from interp.corpus import heldout_seed, make_haystack

    out = []
    for i in range(cfg.n_prompts):
        seed = heldout_seed(900 * 10**6 + cfg.seed * 10**4 + i)
        a = make_haystack(random.Random(seed).randint(2, 4), rng=seed)
        enc = tokenizer(a + a, truncation=True, max_length=cfg.max_length, return_special_tokens_mask=True)
        out.append((np.asarray(enc["input_ids"]), np.asarray(enc["special_tokens_mask"], dtype=bool)))
    return out


def _match_mask(tok: np.ndarray, special: np.ndarray, window: int, causal: bool) -> np.ndarray:
    T = len(tok)
    q = np.arange(T)[:, None]
    k = np.arange(T)[None, :]
    same = tok[None, :] == tok[:, None]
    after = np.zeros((T, T), bool)
    after[:, 1:] = tok[None, :-1] == tok[:, None]
    m = (same | after) & (np.abs(k - q) > window) & ~special[None, :]
    if causal:
        m &= k <= q
    return m


def classify_heads(model, config: HeadConfig | None = None) -> HeadResult:
    from interp.hooks.rows import attention_rows

    cfg = config or HeadConfig()
    if model.tokenizer is None:
        raise InvalidInputError(f"{model.name} has no tokenizer; head classification builds text prompts")
    spec = model.spec
    L, H, W = spec.n_layers, spec.n_heads, cfg.window
    off_sum = np.zeros((L, H, 2 * W + 1))
    off_n = np.zeros(2 * W + 1)
    sink_sum = np.zeros((L, H))
    match_sum = np.zeros((L, H))
    unif_sum = off_unif = n_q = n_match = 0.0
    for tok, special in repeated_prompts(model.tokenizer, cfg):
        T = len(tok)
        a = attention_rows(model, tok[None], list(range(T)))[0].float().cpu().numpy()  # [L, H, T, T]
        qs = np.flatnonzero(~special)
        for j, d in enumerate(range(-W, W + 1)):
            ok = qs[(qs + d >= 0) & (qs + d < T)]
            off_sum[:, :, j] += a[:, :, ok, ok + d].sum(-1)
            off_n[j] += len(ok)
        sink_sum += a[:, :, qs][:, :, :, special].sum((-1, -2))
        n_q += len(qs)
        off_unif += float((1.0 / ((qs + 1) if spec.causal else np.full(len(qs), T))).sum())
        M = _match_mask(tok, special, W, spec.causal)[qs]
        has = M.any(1)
        if has.any():
            match_sum += (a[:, :, qs[has]] * M[has]).sum((-1, -2))
            visible = (np.arange(T)[None, :] <= qs[has, None]) if spec.causal else np.ones((has.sum(), T), bool)
            unif_sum += float((M[has].sum(1) / visible.sum(1)).sum())
            n_match += float(has.sum())
    offset = off_sum / np.maximum(off_n, 1)
    best = offset.argmax(-1)
    off_mass = offset.max(-1)
    sink = sink_sum / max(n_q, 1)
    match = match_sum / max(n_match, 1)
    unif = unif_sum / max(n_match, 1)
    ounif = off_unif / max(n_q, 1)
    heads = []
    for l in range(L):
        for h in range(H):
            om, mm, sm = float(off_mass[l, h]), float(match[l, h]), float(sink[l, h])
            m_enr, o_enr = mm / max(unif, 1e-12), om / ounif
            if mm >= cfg.threshold and m_enr >= cfg.enrichment and m_enr > o_enr:
                label = "content"
            elif om >= cfg.threshold and o_enr >= cfg.enrichment:
                label = "offset"
            elif sm >= cfg.sink_threshold:
                label = "sink"
            else:
                label = "mixed"
            heads.append({"head": f"L{l}H{h}", "layer": l, "index": h, "label": label, "group": GROUPS[label],
                          "best_offset": int(best[l, h]) - W, "offset_mass": om, "match_mass": mm,
                          "match_uniform": unif, "offset_uniform": ounif, "sink_mass": sm,
                          "offset_profile": offset[l, h].round(4).tolist()})
    per_layer = []
    for l in range(L):
        labels = [x["label"] for x in heads if x["layer"] == l]
        per_layer.append({"layer": l, **{k: labels.count(k) for k in GROUPS}})
    return HeadResult(model=model.name, heads=heads, per_layer=per_layer, config=asdict(cfg))
