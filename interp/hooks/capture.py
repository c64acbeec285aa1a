"""Capture and patching of activations: per-head (inside attention) and per-site (module hooks).

Per-head kinds (head_out, q, k, v) are read inside the attention wrapper; residual kinds
(resid_pre, resid_post, attn_out, mlp_out) through hooks on modules the adapter names (see
`SiteKind` in sites.py for every kind's location and shape). Captured tensors are detached; calls
of a cached decode are concatenated along the sequence. Shapes: residual kinds [batch, seq,
d_model]; head kinds [batch, seq, n_heads (n_kv_heads for k, v), head_dim].

`Capture` is an observer and `Patch` an editor: a capture always records the values after every
patch and edit, whatever the order of `model.intervene(...)` arguments or nesting.
"""

from __future__ import annotations

from typing import Iterable, Mapping, Sequence

import torch

from interp.errors import InterventionError, InvalidInputError
from interp.hooks.interception import SiteHook
from interp.hooks.interventions import Intervention
from interp.sites import CAPTURE_KINDS, HEAD_KINDS, MODULE_KINDS, Site, SiteKind  # noqa: F401 (kind tuples re-exported)


def _as_sites(sites) -> tuple[Site, ...]:
    out = []
    for s in sites:
        s = Site.parse(s) if isinstance(s, str) else s
        if s.kind not in CAPTURE_KINDS:
            raise InvalidInputError(f"site kind {s.kind!r} cannot be captured/patched; use one of "
                                    f"{', '.join(CAPTURE_KINDS)}")
        out.append(s)
    return tuple(out)


def module_for(model, site: Site):
    """The module whose hook reads or patches a module-level `site` (resid_pre / resid_post: the layer)."""
    a = model.adapter
    if site.kind in (SiteKind.RESID_PRE, SiteKind.RESID_POST):
        return a.layers()[site.layer]
    if site.kind == SiteKind.ATTN_OUT:
        return a.attn_out_module(site.layer)
    if site.kind == SiteKind.MLP_OUT:
        return a.mlp_out_module(site.layer)
    raise InvalidInputError(f"site {site} is not a module-level site")


class _SiteBase(Intervention):
    site_edits = False  # whether this intervention's module-level site functions are editors

    def __init__(self, sites, rows=None):
        super().__init__(rows)
        self.sites = _as_sites(sites)
        self.head_sites = [s for s in self.sites if s.site_kind.in_attention]
        self.module_sites = [s for s in self.sites if s.site_kind.on_module]

    def bind(self, model):
        super().bind(model)
        for s in self.sites:
            if not 0 <= s.layer < self.spec.n_layers:
                raise InvalidInputError(f"site {s}: layer out of range 0..{self.spec.n_layers - 1}")
            n = s.site_kind.n_heads(self.spec)
            if s.head is not None and not 0 <= s.head < n:
                raise InvalidInputError(f"site {s}: head out of range 0..{n - 1}")

    def site_hooks(self, model):
        return [SiteHook(module_for(model, s), s.site_kind.hook, self._site_fn(s), edits=self.site_edits)
                for s in self.module_sites]

    def _site_fn(self, site):
        raise NotImplementedError


class Capture(_SiteBase):
    """Record activations at sites. `cap[site]` (Site or 'L3.resid_pre') gives the tensor.

    An observer: it records the values after every edit (ablations, RoPE zeroing, patches)."""

    def __init__(self, sites: Iterable[Site | str], rows: Sequence[int] | None = None, to_cpu: bool = False):
        super().__init__(sites, rows)
        self.to_cpu = to_cpu
        self._store: dict[Site, list[tuple[int, torch.Tensor]]] = {s: [] for s in self.sites}
        self.observes_qkv = any(s.kind in ("q", "k", "v") for s in self.head_sites)
        self.observes_out = any(s.kind == "head_out" for s in self.head_sites)

    def bind(self, model):
        """Called once by `model.intervene(...)` on entry: check every site's layer and head against the
        model (InvalidInputError) and clear earlier records, so a reused Capture starts a new record."""
        super().bind(model)
        self.clear()  # reusing a Capture starts a new record (old data would be concatenated to the new)

    def _keep(self, site, batch_start, t):
        t = t.detach()
        if self.to_cpu:
            t = t.cpu()
        self._store[site].append((batch_start, t))

    def _site_fn(self, site):
        def observe(t, batch_start):
            self._keep(site, batch_start, t)
        return observe

    def observe_qkv(self, call, q, k, v):
        """Called by the attention wrapper after every edit, with the final post-RoPE q, k, v of one attention
        call: keeps, for this layer's q/k/v sites, [batch, q_len, heads, head_dim] (k, v: the last q_len
        cache entries, i.e. this call's own positions). Changes nothing."""
        for s in self.head_sites:
            if s.layer == call.layer and s.kind in ("q", "k", "v"):
                t = {"q": q, "k": k[:, :, -call.q_len:], "v": v[:, :, -call.q_len:]}[s.kind]
                self._keep(s, call.batch_start, t.transpose(1, 2))

    def observe_out(self, call, out):
        """Called after every `edit_out` with the final per-head output [batch, q_len, n_heads, head_dim] (the
        o_proj input): keeps it for this layer's head_out sites. Changes nothing."""
        for s in self.head_sites:
            if s.layer == call.layer and s.kind == "head_out":
                self._keep(s, call.batch_start, out)

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
        """Drop everything recorded so far (the sites stay)."""
        for k in self._store:
            self._store[k] = []


class Patch(_SiteBase):
    """Replace activations at sites with given values (or apply a function to them).

    `values` maps Site (or 'L3.resid_pre', 'L2.head_out.H1') to a tensor shaped like the captured
    activation of the rows it targets ([len(rows) or batch, seq, ...]; row i of the value patches
    rows[i], or global batch row i without `rows`) or to a callable `fn(tensor) -> tensor`, called
    once per forward chunk on the targeted block [n_rows, n_positions, ...]. `positions`
    restricts the patch to those sequence positions (the value then has that many positions).
    Values must match the call's sequence length: patching is for full forward passes, not single
    decode steps. Rows are patched together with index tensors, so hundreds of rows (each with its
    own value row) cost one indexed copy per site and chunk. An editor: captures see the patched
    values.
    """

    site_edits = True

    def __init__(self, values: Mapping, rows: Sequence[int] | None = None, positions: Sequence[int] | None = None):
        super().__init__(list(values.keys()), rows)
        self.values = {(Site.parse(k) if isinstance(k, str) else k): v for k, v in values.items()}
        self.positions = None if positions is None else [int(p) for p in positions]
        self.edits_qkv = any(s.kind == "q" for s in self.head_sites)
        self.edits_out = any(s.kind == "head_out" for s in self.head_sites)

    def bind(self, model):
        """Called once by `model.intervene(...)` on entry: check every site's layer and head against the
        model; raises InvalidInputError for k/v sites (the KV cache would keep the old values)."""
        super().bind(model)
        for s in self.sites:
            if not s.site_kind.patchable:
                raise InvalidInputError("patching k/v is not supported (the KV cache would keep the old values); "
                                        "patch head_out or q")

    def _apply(self, site, t: torch.Tensor, batch_start: int) -> torch.Tensor:
        """t [b, s, ...] (q transposed to [b, s, heads, d]) with the patch applied to its rows, out of place."""
        value = self.values[site]
        b, n_pos = t.shape[0], t.shape[1]
        dev = t.device
        if self.rows is None:
            local = torch.arange(b)
            src = local + batch_start  # value rows are global batch rows
        else:
            local, src = self._rows_in(batch_start, b)  # value rows are positions in `rows`
            if local.numel() == 0:
                return t
        if not callable(value):
            value = torch.as_tensor(value)
            need = int(src.max())  # on the CPU: no device sync
            if value.shape[0] <= need:
                raise InterventionError(f"patch value for {site} has {value.shape[0]} rows; row {need} needed")
        local = local.to(dev)
        pos = (torch.arange(n_pos, device=dev) if self.positions is None
               else torch.as_tensor(self.positions, dtype=torch.long, device=dev))
        idx = (local[:, None], pos[None, :]) + (() if site.head is None else (site.head,))
        cur = t[idx]  # [n_rows, n_positions, ...]
        if callable(value):
            new = value(cur)
        else:
            new = value.index_select(0, src.to(value.device)).to(device=dev, dtype=t.dtype)
        if new.shape != cur.shape:
            raise InterventionError(f"patch value for {site} has shape {tuple(new.shape[1:])} per row, "
                                    f"the activation has {tuple(cur.shape[1:])}")
        t = t.clone()
        t[idx] = new
        return t

    def _site_fn(self, site):
        def edit(t, batch_start):
            return self._apply(site, t, batch_start)
        return edit

    def edit_qkv(self, call, q, k, v):
        """Called by the attention wrapper on every attention call with the post-RoPE q, k, v: returns (q, k, v)
        with the patch applied to q for this layer's q sites (targeted rows and positions, out of place);
        k and v unchanged."""
        for s in self.head_sites:
            if s.layer == call.layer and s.kind == "q":
                q = self._apply(s, q.transpose(1, 2), call.batch_start).transpose(1, 2)
        return q, k, v

    def edit_out(self, call, out):
        """Called after the base attention with the per-head output [batch, q_len, n_heads, head_dim], before
        the output projection: returns it patched for this layer's head_out sites (out of place)."""
        for s in self.head_sites:
            if s.layer == call.layer and s.kind == "head_out":
                out = self._apply(s, out, call.batch_start)
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
