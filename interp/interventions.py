"""Interventions: scoped, per head / per site / per batch row. Apply with `model.intervene(...)`.

Attention-level interventions act inside the attention wrapper (see interception.py) on the
post-RoPE q/k, the values, or the per-head output before the output projection. Site-level ones
(residual stream, attention-out, MLP-out) use module hooks resolved by the adapter. Every
intervention may target a subset of batch rows (`rows=`, global row indices).
"""

from __future__ import annotations

import warnings
from typing import Iterable, Sequence

import torch

from .errors import InterventionError, InvalidInputError
from .interception import AttnCall
from .types import HeadId, HeadLike, as_heads

ABLATION_MODES = ("zero", "mean", "uniform")
ZERO_SIDES = ("q", "k", "both")


class Intervention:
    """Base class. Flags tell the attention wrapper which methods to call."""

    edits_qkv = False
    observes_qk = False
    edits_out = False

    def __init__(self, rows: Sequence[int] | None = None):
        self.rows = None if rows is None else tuple(int(r) for r in rows)

    def bind(self, model) -> None:
        """Validate against the model (raise InvalidInputError) and prepare."""
        self.spec = model.spec

    def hooks(self, model) -> list:
        """Module hooks to add; their handles are removed on exit."""
        return []

    def describe(self) -> dict:
        return {"type": type(self).__name__, "rows": self.rows}

    # helpers ---------------------------------------------------------------------------
    def _check_heads(self, heads: tuple[HeadId, ...]) -> None:
        for h in heads:
            if not (0 <= h.layer < self.spec.n_layers and 0 <= h.head < self.spec.n_heads):
                raise InvalidInputError(
                    f"head {h} is outside the model: layers 0..{self.spec.n_layers - 1}, "
                    f"query heads 0..{self.spec.n_heads - 1}"
                )

    def _row_index(self, call: AttnCall, batch_size: int):
        return call.local_rows(self.rows, batch_size)


def _heads_by_layer(heads: Iterable[HeadId]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for h in heads:
        out.setdefault(h.layer, []).append(h.head)
    return out


def _assign(t: torch.Tensor, rows: torch.Tensor | None, head_dim_axis: int, heads: list[int], value) -> torch.Tensor:
    """Out-of-place t[rows][..., heads, ...] = value along `head_dim_axis` (1 for q/k, 2 for out)."""
    t = t.clone()
    idx: list = [slice(None)] * t.ndim
    head_idx = torch.tensor(heads, dtype=torch.long, device=t.device)
    if rows is None:
        idx[head_dim_axis] = head_idx
        t[tuple(idx)] = value
    else:
        rows = rows.to(t.device)
        for r in rows.tolist():
            idx[0] = r
            idx[head_dim_axis] = head_idx
            t[tuple(idx)] = value
    return t


class AblateHeads(Intervention):
    """Ablate query heads on the per-head output before the output projection.

    mode="zero": the head's output is set to 0.
    mode="mean": set to the head's mean output over a reference batch (`means`: tensor
        [n_layers, n_heads, head_dim] from `interp.head_output_means`).
    mode="uniform": the head's QUERY is zeroed, so it attends uniformly to every key it may see
        and outputs the mean of those values (the original retrieval-head code's masking).
    """

    def __init__(self, heads: Iterable[HeadLike] | str, mode: str = "zero", means: torch.Tensor | None = None,
                 rows: Sequence[int] | None = None):
        super().__init__(rows)
        if mode not in ABLATION_MODES:
            raise InvalidInputError(f"unknown ablation mode {mode!r}; valid modes: {', '.join(ABLATION_MODES)}")
        self.heads = as_heads(heads)
        self.mode = mode
        self.means = means
        self.by_layer = _heads_by_layer(self.heads)
        self.edits_qkv = mode == "uniform"
        self.edits_out = mode in ("zero", "mean")

    def bind(self, model):
        super().bind(model)
        self._check_heads(self.heads)
        if self.mode == "mean":
            want = (self.spec.n_layers, self.spec.n_heads, self.spec.head_dim)
            if self.means is None:
                raise InterventionError(
                    "mode='mean' needs reference means: means=interp.head_output_means(model, texts)"
                )
            if tuple(self.means.shape) != want:
                raise InterventionError(f"means has shape {tuple(self.means.shape)}, expected {want}")

    def edit_qkv(self, call, q, k, v):
        heads = self.by_layer.get(call.layer)
        if heads:
            q = _assign(q, self._row_index(call, q.shape[0]), 1, heads, 0.0)
        return q, k, v

    def edit_out(self, call, out):
        heads = self.by_layer.get(call.layer)
        if not heads:
            return out
        if self.mode == "zero":
            value = 0.0
        else:
            value = self.means[call.layer, heads].to(device=out.device, dtype=out.dtype)  # [n, d]
        return _assign(out, self._row_index(call, out.shape[0]), 2, heads, value)

    def describe(self):
        sem = {
            "zero": "per-head output (o_proj input) set to 0",
            "mean": "per-head output (o_proj input) set to its mean over a reference batch",
            "uniform": "query zeroed: uniform attention over visible keys (mean of values)",
        }[self.mode]
        return {**super().describe(), "heads": [str(h) for h in self.heads], "mode": self.mode, "semantics": sem}


class ZeroRopeDims(Intervention):
    """Zero head dimensions of the post-RoPE (post-QK-norm) queries and/or keys.

    `dims` are head-dim indices (pick them with the model's RopeSpec). side="q" acts on the
    listed query heads only; side="k" zeroes the key head each listed query head reads, which under
    GQA also changes every other query head of that group (a warning says so).
    """

    def __init__(self, heads: Iterable[HeadLike] | str, dims: Sequence[int], side: str = "q",
                 rows: Sequence[int] | None = None):
        super().__init__(rows)
        if side not in ZERO_SIDES:
            raise InvalidInputError(f"unknown side {side!r}; valid sides: {', '.join(ZERO_SIDES)}")
        self.heads = as_heads(heads)
        self.dims = tuple(sorted({int(d) for d in dims}))
        self.side = side
        self.edits_qkv = True

    def bind(self, model):
        super().bind(model)
        self._check_heads(self.heads)
        rope = self.spec.rope
        if rope is None:
            raise InvalidInputError(
                f"{self.spec.model_type} has no rotary embedding ({self.spec.positional} positions); "
                "ZeroRopeDims needs a RoPE model"
            )
        bad = [d for d in self.dims if not 0 <= d < rope.rotary_dims]
        if bad:
            raise InvalidInputError(f"dims {bad} are outside the rotary dims 0..{rope.rotary_dims - 1}")
        self.q_by_layer = _heads_by_layer(self.heads)
        self.k_by_layer = {
            layer: sorted({self.spec.kv_head_of(h) for h in hs}) for layer, hs in self.q_by_layer.items()
        }
        if self.side in ("k", "both") and self.spec.group_size > 1:
            warnings.warn(
                f"ZeroRopeDims(side={self.side!r}) under GQA: zeroing a key head changes all "
                f"{self.spec.group_size} query heads that share it, not only the listed ones",
                stacklevel=3,
            )

    def _zero(self, t, call, heads):
        t = t.clone()
        rows = self._row_index(call, t.shape[0])
        dims = torch.tensor(self.dims, device=t.device)
        for h in heads:
            if rows is None:
                t[:, h, :, dims] = 0.0
            else:
                for r in rows.tolist():
                    t[r, h, :, dims] = 0.0
        return t

    def edit_qkv(self, call, q, k, v):
        if call.layer not in self.q_by_layer:
            return q, k, v
        if self.side in ("q", "both"):
            q = self._zero(q, call, self.q_by_layer[call.layer])
        if self.side in ("k", "both"):
            k = self._zero(k, call, self.k_by_layer[call.layer])
        return q, k, v

    def describe(self):
        return {**super().describe(), "heads": [str(h) for h in self.heads], "dims": list(self.dims),
                "side": self.side, "semantics": "post-RoPE (post-QK-norm) q/k dims set to 0"}
