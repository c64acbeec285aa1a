"""Head ablation, patching and capture written as nnsight code, for use inside an nnsight trace.

Each function edits or reads the input of a layer's output projection (o_proj / c_proj / dense: the
per-head outputs laid side by side, [..., n_heads * head_dim], query heads also under GQA), which is
exactly the tensor interp's AblateHeads and head_out patches edit. They run on an nnsight
`LanguageModel` or `TransformersModel` (or `NNsight`) around a transformers model, and are plain
nnsight interventions, so the same code runs on NDIF::

    import nnsight
    from interp.interop.nnsight import ablate_heads, head_outputs, patch_heads

    lm = nnsight.TransformersModel("meta-llama/Llama-3.1-8B", task="text-generation")
    with lm.trace(prompt):                        # add remote=True to run on NDIF
        ablate_heads(lm, ["L12H3", "L14H0"])      # zero; or mode="mean", means=...
        logits = lm.output.logits.save()

    with lm.trace(clean):
        z = head_outputs(lm, layers=[12])         # {12: [batch, seq, n_heads, head_dim]}, saved
    with lm.trace(corrupt):
        patch_heads(lm, {"L12H3": z[12][:, :, 3]})
        patched = lm.output.logits.save()

Remote use: the NDIF server does not have interp installed, so ship it with the request by calling
`nnsight.register("interp")` once before the trace (nnsight then serialises interp's functions by
value; they need only torch there).

nnsight runs a trace body alongside the model and refuses a module the model has already run past
(OutOfOrderError): call these in layer order with respect to your other reads and writes (each
works through its layers in ascending order). `mode="mean"` takes `means` [n_layers, n_heads,
head_dim], e.g. `interp.head_output_means(interp.Model(lm), reference_texts)`.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

# module-level imports only: with nnsight.register("interp") these functions are shipped by value to
# a server without interp, where an import inside a function would fail
from interp.models.adapters import adapter_for
from interp.errors import InvalidInputError, UnsupportedModelError
from interp.sites import HeadLike, as_head, as_heads

MODES = ("zero", "mean")


def _layout(lm) -> tuple[list[str], int, int]:
    """(o_proj path per layer, n_heads, head_dim) of the transformers model inside an nnsight wrapper."""
    try:
        hf = object.__getattribute__(lm, "_module")
    except AttributeError:
        raise InvalidInputError(f"expected an nnsight model (LanguageModel, TransformersModel, NNsight), got "
                                f"{type(lm).__name__}") from None
    if not hasattr(hf, "config"):
        raise UnsupportedModelError(f"the nnsight model wraps a {type(hf).__name__}, not a transformers model")
    adapter = adapter_for(hf)  # works on an undispatched (meta) model too: module paths and config only
    names = {id(m): n for n, m in hf.named_modules()}
    paths = [names[id(adapter.o_proj(layer))] for layer in range(len(adapter.layers()))]
    return paths, adapter.n_heads(), adapter.head_dim()


def _check(heads, n_layers: int, n_heads: int) -> None:
    for h in heads:
        if not (0 <= h.layer < n_layers and 0 <= h.head < n_heads):
            raise InvalidInputError(f"head {h} is outside the model: layers 0..{n_layers - 1}, "
                                    f"query heads 0..{n_heads - 1}")


def _rows(rows, device):
    if rows is None:
        return slice(None)
    r = [int(x) for x in rows]
    if any(x < 0 for x in r):
        raise InvalidInputError(f"rows {[x for x in r if x < 0]}: batch rows are >= 0")
    return torch.tensor(r, dtype=torch.long, device=device)


def ablate_heads(lm, heads: Iterable[HeadLike] | str, mode: str = "zero", means=None,
                 rows: Sequence[int] | None = None) -> None:
    """Inside `lm.trace(...)`: ablate query heads on their output before the output projection.

    mode="zero" sets each head's slice of the o_proj input to 0; mode="mean" to `means[layer, head]`
    (`means`: [n_layers, n_heads, head_dim], e.g. from interp.head_output_means). `rows` limits the
    edit to those batch rows (of the current invoke). The same numbers as
    `model.intervene(interp.AblateHeads(heads, mode=mode, means=means, rows=rows))`. Writes are out of
    place (a clone of the input is edited and set back).
    """
    if mode not in MODES:
        raise InvalidInputError(f"unknown ablation mode {mode!r} for nnsight; valid modes: {', '.join(MODES)} "
                                "(uniform ablation edits the query inside attention: use interp.AblateHeads)")
    hs = as_heads(heads)
    paths, n_heads, head_dim = _layout(lm)
    _check(hs, len(paths), n_heads)
    if mode == "mean":
        want = (len(paths), n_heads, head_dim)
        if means is None:
            raise InvalidInputError("mode='mean' needs means [n_layers, n_heads, head_dim]: "
                                    "means=interp.head_output_means(interp.Model(lm), reference_texts)")
        if tuple(means.shape) != want:
            raise InvalidInputError(f"means has shape {tuple(means.shape)}, expected {want}")
    for layer in sorted({h.layer for h in hs}):
        env = lm.get(paths[layer])
        x = env.input.clone()
        z = x.view(*x.shape[:-1], n_heads, head_dim)
        r = _rows(rows, x.device)
        for h in (h.head for h in hs if h.layer == layer):
            z[r, :, h] = 0.0 if mode == "zero" else means[layer, h].to(device=x.device, dtype=x.dtype)
        env.input = x


def ablated_logits(lm, input_ids, heads: Iterable[HeadLike] | str, mode: str = "zero", means=None,
                   rows: Sequence[int] | None = None, **trace_kwargs):
    """The logits of `lm` on `input_ids` with `heads` ablated (:func:`ablate_heads`), in one trace that this
    module owns. nnsight reads a `with lm.trace(...)` body back from its source file, so a trace written in
    a script piped on stdin cannot run; this one can be called from anywhere. `trace_kwargs` go to
    `lm.trace` (e.g. remote=True for NDIF)."""
    with lm.trace(input_ids, **trace_kwargs):
        ablate_heads(lm, heads, mode=mode, means=means, rows=rows)
        logits = lm.output.logits.save()
    return logits


def patch_heads(lm, values: Mapping, rows: Sequence[int] | None = None,
                positions: Sequence[int] | None = None) -> None:
    """Inside `lm.trace(...)`: replace heads' outputs (before the output projection) with given values.

    `values` maps a head ('L2H1', (2, 1), HeadId) to a tensor [n_rows, n_positions, head_dim]: all
    batch rows and positions by default, or those of `rows` / `positions`. A source run's outputs come
    from `head_outputs` (its [batch, seq, n_heads, head_dim] tensor sliced at the head). The same
    numbers as interp.Patch({"L2.head_out.H1": value}, rows=rows, positions=positions).
    """
    if not isinstance(values, Mapping) or not values:
        raise InvalidInputError("values must be a non-empty mapping head -> tensor [rows, positions, head_dim]")
    items = [(as_head(h), v) for h, v in values.items()]
    if len({h for h, _ in items}) != len(items):
        raise InvalidInputError("a head is listed more than once in values")
    paths, n_heads, head_dim = _layout(lm)
    _check([h for h, _ in items], len(paths), n_heads)
    for layer in sorted({h.layer for h, _ in items}):
        env = lm.get(paths[layer])
        x = env.input.clone()
        z = x.view(*x.shape[:-1], n_heads, head_dim)
        r = _rows(rows, x.device)
        p = slice(None) if positions is None else _rows(positions, x.device)
        for h, v in ((h, v) for h, v in items if h.layer == layer):
            v = v.to(device=x.device, dtype=x.dtype)
            if isinstance(r, slice):
                z[:, p, h.head] = v
            elif isinstance(p, slice):
                z[r, :, h.head] = v
            else:
                z[r[:, None], p[None, :], h.head] = v
        env.input = x


def head_outputs(lm, layers: Iterable[int] | None = None) -> dict:
    """Inside `lm.trace(...)`: every head's output before the output projection, per layer.

    Returns {layer: [batch, seq, n_heads, head_dim]} (all layers by default), saved (nnsight.save),
    so it is readable after the trace: the tensor interp.Capture(['L{layer}.head_out']) records.
    """
    import nnsight

    paths, n_heads, head_dim = _layout(lm)
    ls = range(len(paths)) if layers is None else sorted({int(x) for x in layers})
    bad = [x for x in ls if not 0 <= x < len(paths)]
    if bad:
        raise InvalidInputError(f"layers {bad} are outside the model: 0..{len(paths) - 1}")
    out = {}
    for layer in ls:
        x = lm.get(paths[layer]).input
        out[layer] = x.clone().view(*x.shape[:-1], n_heads, head_dim)
    return nnsight.save(out)
