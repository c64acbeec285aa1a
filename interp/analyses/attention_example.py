"""One NIAH prompt's attention rows for a retrieval detection's report page: which keys the top heads read.

For one prompt (`example_index`: a recalled one at the longest context, its needle nearest mid-depth, away
from the first tokens, often an attention sink, and from the recent window), the softmax row of each shown head
at the last prompt position (the query that produces the answer's first token), recomputed from the real
post-RoPE q and k by `hooks.rows.AttentionRows` in one extra forward pass of that prompt alone. A row longer than
`MAX_KEYS` is max-pooled into at most `MAX_KEYS` bins of `bin` keys each (a sharp peak on the needle survives the
pooling); the needle span stays in exact key indices.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

MAX_KEYS = 1024  # stored row length at most: longer rows are max-pooled
MAX_HEADS = 8  # detected heads shown at most (the top by score)
FALLBACK_HEADS = 4  # heads shown when none passes the threshold (the top by score)


def max_pool(row: Sequence[float], max_bins: int) -> tuple[list[float], int]:
    """`row` max-pooled into at most `max_bins` bins of equal width (the last may be shorter): (pooled, width).
    A row of at most `max_bins` values comes back whole with width 1."""
    a = np.asarray(row, dtype=float)
    width = max(1, math.ceil(a.size / max_bins))
    if width == 1:
        return a.tolist(), 1
    pad = (-a.size) % width
    padded = np.concatenate([a, np.full(pad, -np.inf)]) if pad else a
    return padded.reshape(-1, width).max(1).tolist(), width


def shown_heads(mean: np.ndarray, detected: Sequence[tuple]) -> list[tuple[int, int]]:
    """(layer, head) of the heads whose rows are shown: the detected ones (`detected`: (score, layer, head), best
    first) up to MAX_HEADS, or, when none was detected, the FALLBACK_HEADS best by mean score."""
    if len(detected):
        return [(int(l), int(h)) for _, l, h in detected[:MAX_HEADS]]
    flat = np.argsort(-mean, axis=None, kind="stable")[:FALLBACK_HEADS]
    return [tuple(int(x) for x in np.unravel_index(i, mean.shape)) for i in flat]


def example_index(samples: Sequence, recalled: Sequence[bool]) -> int:
    """The shown prompt: among the recalled samples (all when none was), those of the longest context, of them the
    first whose needle depth is nearest 0.5 (a needle at depth 0 shares its keys with the sink)."""
    pool = [i for i, ok in enumerate(recalled) if ok] or list(range(len(samples)))
    longest = max(samples[i].context_length for i in pool)
    return min((i for i in pool if samples[i].context_length == longest), key=lambda i: abs(samples[i].depth - 0.5))


def attention_example(model, samples: Sequence, recalled: Sequence[bool], heads: Sequence[tuple[int, int]]) -> dict:
    """The result's `attention_example`: {sample_id, query_position, n_keys, bin, needle_span [start, end),
    heads {"L2H4": row (max-pooled when longer than MAX_KEYS)}} for the sample `example_index` picks."""
    from interp.hooks.rows import attention_rows

    i = example_index(samples, recalled)
    s = samples[i]
    layers = sorted({l for l, _ in heads})
    rows = attention_rows(model, [s.input_ids], [-1], layers=layers)[0, :, :, 0]  # [len(layers), H, n_keys]
    n = rows.shape[-1]
    out, width = {}, 1
    for l, h in heads:
        pooled, width = max_pool(rows[layers.index(l), h].tolist(), MAX_KEYS)
        out[f"L{l}H{h}"] = [float(f"{v:.4g}") for v in pooled]
    return {"sample_id": s.id, "recalled": bool(recalled[i]), "query_position": n - 1,
            "n_keys": int(n), "bin": width, "needle_span": [int(x) for x in s.needle_span], "heads": out}
