"""What a model does on IOI pairs (`ioi_pairs`), before any patching: the logit difference IO - S and the
accuracy (IO's logit above S's) at the last token, each with a bootstrap CI over prompts, on the clean and
the corrupt prompts, by first-clause order and by template; and where each head looks from the last token
(its attention to the IO mention, S1 and S2 on the clean prompts), the signature Wang et al. (2022) give
name-mover heads (they attend to IO from the end).

IO and S are the clean prompt's names (`info["io_token"]`, `info["s_token"]`), on both prompts of a pair:
on an "abc" or "s2" corrupt prompt nothing says which of them is the answer ("s2") or they are absent
("abc"), so a model that does IOI has a logit difference near 0 there. For "both" the corrupt prompt is an
IOI prompt of its own (IO' and S' repeated), measured as `corrupt_own`.
"""

from __future__ import annotations

from typing import Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError


def _estimate(x, n_boot: int, seed: int) -> dict:
    from interp.stats import mean_ci

    e = mean_ci(np.asarray(x, dtype=float), n_boot=n_boot, seed=seed)
    return {"mean": e.mean, "lo": e.lo, "hi": e.hi, "n": e.n, "method": e.method}


def _summary(ld: np.ndarray, n_boot: int, seed: int) -> dict:
    return {"logit_diff": _estimate(ld, n_boot, seed), "accuracy": _estimate(ld > 0, n_boot, seed)}


def _last_logits(model, seqs) -> torch.Tensor:
    with torch.no_grad():
        return model.forward(model.pad(seqs), last_only=True)[:, -1].float().cpu()


def ioi_scores(model, pairs: Sequence, n_boot: int = 1000, seed: int = 0, attention: bool = True) -> dict:
    """IOI behaviour on `pairs` (built by `ioi_pairs`): see the module docstring. Returns a JSON-ready dict:
    `clean` / `corrupt` {"logit_diff", "accuracy"} (each {"mean", "lo", "hi", "n", "method"}, 95% bootstrap
    CI over pairs), `corrupt_own` (corruption "both" only), `by_order` and `by_template` (clean), `per_pair`
    (the clean and corrupt logit differences) and, with `attention`, `attention` {"io", "s1", "s2"}: [layer]
    [head] mean attention weight from the last clean token to that mention."""
    pairs = list(pairs)
    if not pairs:
        raise InvalidInputError("no IOI pairs to score")
    for p in pairs:
        if not p.info or "io_token" not in p.info or "s_token" not in p.info:
            raise InvalidInputError(f"{p.source or 'pair'}: not an IOI pair of `ioi_pairs` (its info has no IO and "
                                    "S token ids)")
    io = torch.tensor([p.info["io_token"] for p in pairs])
    s = torch.tensor([p.info["s_token"] for p in pairs])
    rows = torch.arange(len(pairs))
    clean = _last_logits(model, [p.clean for p in pairs])
    corrupt = _last_logits(model, [p.corrupt for p in pairs])
    ld_clean = (clean[rows, io] - clean[rows, s]).numpy().astype(float)
    ld_corrupt = (corrupt[rows, io] - corrupt[rows, s]).numpy().astype(float)
    kinds = {p.info.get("corrupt", "both") for p in pairs}
    out = {"n_pairs": len(pairs), "corrupt_kind": sorted(kinds)[0] if len(kinds) == 1 else sorted(kinds),
           "metric": "logit(IO) - logit(S) at the last token, IO and S the clean prompt's names; accuracy: the "
                     "fraction of prompts with IO's logit above S's; 95% bootstrap CIs over prompts",
           "clean": _summary(ld_clean, n_boot, seed), "corrupt": _summary(ld_corrupt, n_boot, seed)}
    if kinds == {"both"}:  # the corrupt prompt's own IOI task: its IO' vs its S'
        t = torch.tensor([p.info["corrupt_tokens"][:2] for p in pairs])  # IO' and S' (at S1 and S2)
        out["corrupt_own"] = _summary((corrupt[rows, t[:, 0]] - corrupt[rows, t[:, 1]]).numpy().astype(float),
                                      n_boot, seed)
    for key, attr in (("by_order", "order"), ("by_template", "template")):
        groups = sorted({p.info[attr] for p in pairs})
        out[key] = {str(g): _summary(ld_clean[[i for i, p in enumerate(pairs) if p.info[attr] == g]], n_boot, seed)
                    for g in groups}
    out["per_pair"] = {"clean": ld_clean.tolist(), "corrupt": ld_corrupt.tolist(),
                       "sources": [p.source for p in pairs]}
    if attention:
        out["attention"] = ioi_attention(model, pairs)
    return out


def ioi_attention(model, pairs: Sequence) -> dict:
    """{"io", "s1", "s2"}: [layer][head] mean over pairs of the attention weight from the last token of the
    clean prompt to the IO mention, S's first and S's second mention (sdpa kept; rows recomputed from q, k)."""
    from interp.hooks.rows import attention_rows

    batch = model.pad([p.clean for p in pairs])
    T = batch.input_ids.shape[1]
    with torch.no_grad():
        rows = attention_rows(model, batch.input_ids, [-1], attention_mask=batch.attention_mask)[:, :, :, 0]
    rows = rows.float().cpu()  # [P, L, H, T], end-aligned (left padding)
    r = torch.arange(len(pairs))
    at = {"io": [T + p.info["io_position"] for p in pairs], "s1": [T + p.info["s_positions"][0] for p in pairs],
          "s2": [T + p.info["s_positions"][1] for p in pairs]}
    return {k: rows[r, :, :, torch.tensor(v)].mean(0).tolist() for k, v in at.items()}
