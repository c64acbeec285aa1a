"""Interventions: scoped, per head / per site / per batch row. Apply with `model.intervene(...)`.

Attention-level interventions act inside the attention wrapper (see interception.py) on the
post-RoPE q/k, the values, or the per-head output before the output projection. Site-level ones
(residual stream, attention-out, MLP-out) use module hooks resolved by the adapter. Every
intervention may target a subset of batch rows (`rows=`, global row indices).

Editors and observers. An intervention EDITS through `edit_qkv` / `edit_out` (flags `edits_qkv`,
`edits_out`) and editor `SiteHook`s; it OBSERVES through `observe_qkv` (flag `observes_qkv`), `observe_out` (flag
`observes_out`) and observer `SiteHook`s. Observers always run after every editor, so they see
the edited values whatever the order of `model.intervene(...)` arguments or the nesting of
`intervene` contexts; editors run in the order they became active.
"""

from __future__ import annotations

import warnings
from typing import Iterable, Sequence

import torch

from interp.errors import InterventionError, InvalidInputError
from interp.hooks.interception import AttnCall, SiteHook, select_rows
from interp.sites import HeadId, HeadLike, as_heads

ABLATION_MODES = ("zero", "mean", "uniform")
ZERO_SIDES = ("q", "k", "both")


class Intervention:
    """Base class. Flags tell the attention wrapper which methods to call.

    Editors: edit_qkv(call, q, k, v) -> (q, k, v) and edit_out(call, out) -> out, out of place.
    Observers: observe_qkv(call, q, k, v) and observe_out(call, out),
    which return nothing and run after every editor. Module-level sites: `site_hooks(model)`.
    """

    edits_qkv = False
    edits_out = False
    observes_qkv = False
    observes_out = False

    def __init__(self, rows: Sequence[int] | None = None):
        self.rows = None if rows is None else tuple(int(r) for r in rows)
        if self.rows is not None and any(r < 0 for r in self.rows):
            raise InvalidInputError(f"rows {[r for r in self.rows if r < 0]}: rows are global batch row ids >= 0 "
                                    "(negative indices are not supported)")

    def bind(self, model) -> None:
        """Validate against the model (raise InvalidInputError) and prepare."""
        self.spec = model.spec

    def site_hooks(self, model) -> list[SiteHook]:
        """Module-level site functions (editors and observers); removed on exit."""
        return []

    def hooks(self, model) -> list:
        """Raw torch module hooks to add; their handles are removed on exit. They are not ordered
        against editors/observers: prefer `site_hooks`."""
        return []

    def edit_qkv(self, call: AttnCall, q, k, v):
        return q, k, v

    def edit_out(self, call: AttnCall, out):
        return out

    def observe_qkv(self, call: AttnCall, q, k, v) -> None:
        pass

    def observe_out(self, call: AttnCall, out) -> None:
        pass

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
        """Indices into this call's batch of the targeted rows (distinct); None means every row."""
        return None if self.rows is None else self._rows_in(call.batch_start, batch_size)[0]

    def _row_table(self) -> tuple[torch.Tensor, torch.Tensor]:
        """The distinct rows of `rows` and the position where each first appears (built once)."""
        if getattr(self, "_row_table_of", None) != self.rows:
            first: dict[int, int] = {}
            for i, r in enumerate(self.rows):
                first.setdefault(r, i)
            self._row_ids = torch.tensor(list(first.keys()), dtype=torch.long)
            self._row_src = torch.tensor(list(first.values()), dtype=torch.long)
            self._row_table_of = self.rows
        return self._row_ids, self._row_src

    def _rows_in(self, batch_start: int, batch_size: int, device=None) -> tuple[torch.Tensor, torch.Tensor]:
        """(indices in the chunk, positions in `rows`) of the distinct targeted rows inside the chunk;
        rows outside the chunk (or negative) are left out."""
        ids, first = self._row_table()
        local, where = select_rows(ids, batch_start, batch_size)
        src = first[where]
        if device is not None:
            local, src = local.to(device), src.to(device)
        return local, src


def _heads_by_layer(heads: Iterable[HeadId]) -> dict[int, list[int]]:
    out: dict[int, list[int]] = {}
    for h in heads:
        out.setdefault(h.layer, []).append(h.head)
    return out


def _assign(t: torch.Tensor, rows: torch.Tensor | None, head_dim_axis: int, heads: list[int], value) -> torch.Tensor:
    """Out-of-place t[rows][..., heads, ...] = value, heads on `head_dim_axis` (1 for q/k
    [b, H, s, d], 2 for out [b, s, H, d]). `value`: a scalar or [len(heads), head_dim]. One clone;
    rows and heads are index tensors."""
    t = t.clone()
    view = t if head_dim_axis == 1 else t.transpose(1, 2)  # [b, H, s, d], sharing the clone's storage
    h = torch.as_tensor(heads, dtype=torch.long, device=t.device)
    if torch.is_tensor(value):
        value = value.to(device=t.device, dtype=t.dtype)[:, None, :]  # [n_heads, 1 (seq), d]
    if rows is None:
        view[:, h] = value
    else:
        r = rows.to(t.device)
        view[r[:, None], h[None, :]] = value  # [n_rows, n_heads, s, d]
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
        """Called once by `model.intervene(...)` on entry: check that every head lies in the model
        (InvalidInputError) and, for mode="mean", that `means` is given with shape
        [n_layers, n_heads, head_dim] (InterventionError otherwise)."""
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
        """Called by the attention wrapper (mode="uniform" only) on every attention call with the post-RoPE
        q [batch, n_heads, q_len, head_dim] and the cached k, v: returns (q, k, v) with the queries of
        `call.layer`'s listed heads zeroed in the targeted rows (out of place); k and v unchanged."""
        heads = self.by_layer.get(call.layer)
        if heads:
            q = _assign(q, self._row_index(call, q.shape[0]), 1, heads, 0.0)
        return q, k, v

    def edit_out(self, call, out):
        """Called after the base attention (mode="zero"/"mean") with the per-head output `out`
        [batch, q_len, n_heads, head_dim], before the output projection: returns it with `call.layer`'s
        listed heads set to 0 or to their means in the targeted rows (out of place)."""
        heads = self.by_layer.get(call.layer)
        if not heads:
            return out
        if self.mode == "zero":
            value = 0.0
        else:
            value = self.means[call.layer, heads].to(device=out.device, dtype=out.dtype)  # [n, d]
        return _assign(out, self._row_index(call, out.shape[0]), 2, heads, value)

    def describe(self):
        """JSON-able summary: type, rows, heads (as 'L3H1'), mode and `semantics` (what the mode does)."""
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
        """Called once by `model.intervene(...)` on entry: check the heads, that the model has RoPE and that
        `dims` lie in its rotary dims (InvalidInputError), and map each layer's query heads to the key heads
        they read; warns when side="k"/"both" under GQA (other query heads of the group change too)."""
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
        """t [b, heads, s, d] with dims `self.dims` of `heads` (of the targeted rows) set to 0, out of place."""
        b, n, _, d = t.shape
        dev = t.device
        hd = torch.zeros(n, d, dtype=torch.bool, device=dev)
        hd[torch.as_tensor(heads, dtype=torch.long, device=dev)[:, None],
           torch.as_tensor(self.dims, dtype=torch.long, device=dev)[None, :]] = True
        mask = hd[None, :, None, :]  # [1, heads, 1, d]
        rows = self._row_index(call, b)
        if rows is not None:
            rm = torch.zeros(b, dtype=torch.bool, device=dev)
            rm[rows.to(dev)] = True
            mask = mask & rm[:, None, None, None]
        return t.masked_fill(mask, 0.0)

    def edit_qkv(self, call, q, k, v):
        """Called by the attention wrapper on every attention call with the post-RoPE q, k, v: returns
        (q, k, v) with `dims` of `call.layer`'s listed query heads (side q) and/or of the key heads they
        read (side k) set to 0 in the targeted rows, out of place; v unchanged."""
        if call.layer not in self.q_by_layer:
            return q, k, v
        if self.side in ("q", "both"):
            q = self._zero(q, call, self.q_by_layer[call.layer])
        if self.side in ("k", "both"):
            k = self._zero(k, call, self.k_by_layer[call.layer])
        return q, k, v

    def describe(self):
        """JSON-able summary: type, rows, heads, dims, side and `semantics`."""
        return {**super().describe(), "heads": [str(h) for h in self.heads], "dims": list(self.dims),
                "side": self.side, "semantics": "post-RoPE (post-QK-norm) q/k dims set to 0"}
