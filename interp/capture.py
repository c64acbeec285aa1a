"""Capture and patching of activations: per-head (inside attention) and per-site (module hooks).

Per-head kinds (head_out, q, k, v) are read inside the attention wrapper; residual kinds
(resid_pre, resid_post, attn_out, mlp_out) through forward hooks on modules the adapter names.
Captured tensors are detached; calls of a cached decode are concatenated along the sequence.
Shapes: residual kinds [batch, seq, d_model]; head kinds [batch, seq, n_heads (n_kv_heads for
k, v), head_dim].
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from .errors import InterventionError, InvalidInputError
from .interventions import Intervention
from .types import Site

HEAD_KINDS = ("head_out", "q", "k", "v")
MODULE_KINDS = ("resid_pre", "resid_post", "attn_out", "mlp_out")


def _as_sites(sites) -> tuple[Site, ...]:
    out = []
    for s in sites:
        s = Site.parse(s) if isinstance(s, str) else s
        if s.kind not in HEAD_KINDS + MODULE_KINDS:
            raise InvalidInputError(f"site kind {s.kind!r} cannot be captured/patched; use one of "
                                    f"{', '.join(HEAD_KINDS + MODULE_KINDS)}")
        out.append(s)
    return tuple(out)


def _module_for(model, site: Site):
    a = model.adapter
    layer = a.layers()[site.layer]
    if site.kind in ("resid_pre", "resid_post"):
        return layer
    if site.kind == "attn_out":
        return a.attn_out_module(site.layer)
    return a.mlp(site.layer)


def _first(output):
    return output[0] if isinstance(output, tuple) else output


def _replace_first(output, new):
    if isinstance(output, tuple):
        return (new,) + tuple(output[1:])
    return new


def _hidden_from_pre(args, kwargs):
    if args:
        return args[0], ("arg", 0)
    return kwargs["hidden_states"], ("kw", "hidden_states")


class _SiteBase(Intervention):
    def __init__(self, sites, rows=None):
        super().__init__(rows)
        self.sites = _as_sites(sites)
        self.head_sites = [s for s in self.sites if s.kind in HEAD_KINDS]
        self.module_sites = [s for s in self.sites if s.kind in MODULE_KINDS]

    def bind(self, model):
        super().bind(model)
        for s in self.sites:
            if not 0 <= s.layer < self.spec.n_layers:
                raise InvalidInputError(f"site {s}: layer out of range 0..{self.spec.n_layers - 1}")

    def hooks(self, model):
        handles = []
        for site in self.module_sites:
            mod = _module_for(model, site)
            if site.kind == "resid_pre":
                handles.append(mod.register_forward_pre_hook(self._pre_hook(site, model), with_kwargs=True))
            else:
                handles.append(mod.register_forward_hook(self._post_hook(site, model)))
        return handles


class Capture(_SiteBase):
    """Record activations at sites. `cap[site]` (Site or 'L3.resid_pre') gives the tensor."""

    def __init__(self, sites: Iterable[Site | str], rows: Sequence[int] | None = None, to_cpu: bool = False):
        super().__init__(sites, rows)
        self.to_cpu = to_cpu
        self._store: dict[Site, list[tuple[int, torch.Tensor]]] = {s: [] for s in self.sites}
        self.edits_qkv = any(s.kind in ("q", "k", "v") for s in self.head_sites)
        self.edits_out = any(s.kind == "head_out" for s in self.head_sites)

    def _keep(self, site, batch_start, t):
        t = t.detach()
        if self.to_cpu:
            t = t.cpu()
        self._store[site].append((batch_start, t))

    def _pre_hook(self, site, model):
        def hook(module, args, kwargs):
            h, _ = _hidden_from_pre(args, kwargs)
            self._keep(site, model._state.batch_start, h)
        return hook

    def _post_hook(self, site, model):
        def hook(module, args, output):
            self._keep(site, model._state.batch_start, _first(output))
        return hook

    def edit_qkv(self, call, q, k, v):
        for s in self.head_sites:
            if s.layer == call.layer and s.kind in ("q", "k", "v"):
                t = {"q": q, "k": k[:, :, -call.q_len:], "v": v[:, :, -call.q_len:]}[s.kind]
                self._keep(s, call.batch_start, t.transpose(1, 2))
        return q, k, v

    def edit_out(self, call, out):
        for s in self.head_sites:
            if s.layer == call.layer and s.kind == "head_out":
                self._keep(s, call.batch_start, out)
        return out

    def __getitem__(self, site) -> torch.Tensor:
        site = Site.parse(site) if isinstance(site, str) else site
        if site not in self._store and site.head is not None and Site(site.layer, site.kind) in self._store:
            return self[Site(site.layer, site.kind)][:, :, site.head]
        if site not in self._store:
            raise InvalidInputError(f"site {site} was not captured; captured: {', '.join(map(str, self.sites))}")
        entries = self._store[site]
        if not entries:
            raise InterventionError(f"nothing was captured at {site}: run a forward pass inside model.intervene()")
        groups: dict[int, list[torch.Tensor]] = {}
        for start, t in entries:
            groups.setdefault(start, []).append(t)
        parts = [torch.cat(groups[k], dim=1) for k in sorted(groups)]
        out = torch.cat(parts, dim=0)
        if site.head is not None:
            out = out[:, :, site.head]
        if self.rows is not None:
            out = out[list(self.rows)]
        return out

    def clear(self):
        for k in self._store:
            self._store[k] = []


class Patch(_SiteBase):
    """Replace activations at sites with given values (or apply a function to them).

    `values` maps Site (or 'L3.resid_pre', 'L2.head_out.H1') to a tensor shaped like the captured
    activation of the rows it targets ([len(rows) or batch, seq, ...]) or to a callable
    `fn(tensor) -> tensor`. `positions` restricts the patch to those sequence positions (the value
    then has that many positions). Values must match the call's sequence length: patching is for
    full forward passes, not single decode steps.
    """

    def __init__(self, values: Mapping, rows: Sequence[int] | None = None, positions: Sequence[int] | None = None):
        super().__init__(list(values.keys()), rows)
        self.values = {(Site.parse(k) if isinstance(k, str) else k): v for k, v in values.items()}
        self.positions = None if positions is None else list(positions)
        self.edits_qkv = any(s.kind in ("q", "k", "v") for s in self.head_sites)
        self.edits_out = any(s.kind == "head_out" for s in self.head_sites)

    def bind(self, model):
        super().bind(model)
        for s in self.head_sites:
            if s.kind in ("k", "v"):
                raise InvalidInputError("patching k/v is not supported (the KV cache would keep the old values); "
                                        "patch head_out or q")

    def _apply(self, site, t: torch.Tensor, batch_start: int, head_axis: int | None) -> torch.Tensor:
        value = self.values[site]
        b = t.shape[0]
        rows = list(range(b)) if self.rows is None else [r - batch_start for r in self.rows if 0 <= r - batch_start < b]
        if not rows:
            return t
        sel_rows = [r + batch_start for r in rows]
        t = t.clone()
        pos = slice(None) if self.positions is None else torch.tensor(self.positions, device=t.device)
        for i, r in enumerate(rows):
            idx = [r, pos]
            if site.head is not None:
                idx.append(site.head)
            cur = t[tuple(idx)]
            if callable(value):
                new = value(cur)
            else:
                src = self.rows.index(sel_rows[i]) if self.rows is not None else sel_rows[i]
                if value.shape[0] <= src:
                    raise InterventionError(f"patch value for {site} has {value.shape[0]} rows; row {src} needed")
                new = value[src].to(device=t.device, dtype=t.dtype)
            if new.shape != cur.shape:
                raise InterventionError(f"patch value for {site} has shape {tuple(new.shape)} per row, "
                                        f"the activation has {tuple(cur.shape)}")
            t[tuple(idx)] = new
        return t

    def _pre_hook(self, site, model):
        def hook(module, args, kwargs):
            h, (where, key) = _hidden_from_pre(args, kwargs)
            new = self._apply(site, h, model._state.batch_start, None)
            if where == "arg":
                return (new,) + tuple(args[1:]), kwargs
            kwargs = dict(kwargs)
            kwargs[key] = new
            return args, kwargs
        return hook

    def _post_hook(self, site, model):
        def hook(module, args, output):
            return _replace_first(output, self._apply(site, _first(output), model._state.batch_start, None))
        return hook

    def edit_qkv(self, call, q, k, v):
        for s in self.head_sites:
            if s.layer == call.layer and s.kind == "q":
                q = self._apply(s, q.transpose(1, 2), call.batch_start, 2).transpose(1, 2)
        return q, k, v

    def edit_out(self, call, out):
        for s in self.head_sites:
            if s.layer == call.layer and s.kind == "head_out":
                out = self._apply(s, out, call.batch_start, 2)
        return out


def head_output_means(model, inputs, attention_mask=None, batch_size: int | None = None) -> torch.Tensor:
    """Mean per-head output (o_proj input) over the real tokens of a reference batch.

    Returns [n_layers, n_heads, head_dim], the `means` of AblateHeads(mode="mean").
    """
    batch = model.as_batch(inputs, attention_mask)
    spec = model.spec
    cap = Capture([Site(l, "head_out") for l in range(spec.n_layers)])
    with model.intervene(cap):
        model.forward(batch, batch_size=batch_size)
    w = batch.attention_mask.to(torch.float32)[:, :, None, None]
    means = [(cap[Site(l, "head_out")].float() * w).sum((0, 1)) / w.sum() for l in range(spec.n_layers)]
    return torch.stack(means)


@torch.no_grad()
def head_write_norms(model, inputs, attention_mask=None, batch_size: int | None = None,
                     layers_per_pass: int = 4) -> torch.Tensor:
    """How much each head writes into the residual stream: the mean over real tokens of
    ||W_O[:, h] z_h|| (z_h the head's output before the output projection). [n_layers, n_heads].

    A head whose ablation leaves everything unchanged because it writes almost nothing shows up
    here with a small value; ablation reports use it to say how active the masked heads were.
    Layers are captured `layers_per_pass` at a time to bound memory on long prompts.
    """
    batch = model.as_batch(inputs, attention_mask)
    spec = model.spec
    w = batch.attention_mask.to(torch.float32)
    out = torch.zeros(spec.n_layers, spec.n_heads)
    for start in range(0, spec.n_layers, layers_per_pass):
        layers = range(start, min(spec.n_layers, start + layers_per_pass))
        cap = Capture([Site(l, "head_out") for l in layers])
        with model.intervene(cap):
            model.forward(batch, batch_size=batch_size, logits=False)
        for l in layers:
            z = cap[Site(l, "head_out")].float()  # [b, s, H, hd]
            wo = model.adapter.o_weight(l).detach().float().to(z.device)
            wo = wo.view(spec.d_model, spec.n_heads, spec.head_dim)
            norms = torch.einsum("bshd,mhd->bshm", z, wo).norm(dim=-1)  # [b, s, H]
            m = w.to(norms.device)[:, :, None]
            out[l] = ((norms * m).sum((0, 1)) / m.sum((0, 1))).cpu()
    return out
