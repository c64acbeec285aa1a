"""OV and QK circuits of attention heads, read from the model's own modules and weights.

Conventions (shared by the induction and copy-suppression analyses):

* Effective embedding of token t for a head in layer l >= 1: "layer0" (default) is the residual
  stream after block 0 when t is fed alone (embedding + layer-0 attention, which can only see t,
  + MLP0; on GPT-2 this includes position 0's embedding), McDougall et al.'s choice for GPT-2;
  "embed" is the raw embedding row. Heads in layer 0 always read the raw embedding row.
* A head's input: that residual vector passed through whatever the attention module receives
  (the layer's own input norm), obtained by running the model on single tokens with the residual
  stream at layer l patched, and reading the attention module's input. Queries and keys are read
  at position 0, where RoPE is the identity; QK-norm and biases are the model's own.
* OV output: W_O[:, head] (W_V[kv head] x + b_V). GQA: a query head reads the values of
  `spec.kv_head_of(head)`.
* Unembedding: logits of a residual-stream vector o are W_U L(o), with L the final norm's linear
  part (its gain, and mean-centering for LayerNorm) and the norm's input scale left out; the
  final norm's and unembedding's biases do not depend on o and are dropped. Ranking tokens
  within one OV column does not depend on that scale. The embedding and unembedding are read
  separately, so untied models are handled as they are.
"""

from __future__ import annotations

import torch

from interp.hooks.capture import Capture, Patch
from interp.errors import InvalidInputError, UnsupportedModelError
from interp.sites import Site

EMBEDDINGS = ("layer0", "embed")


_FINAL = object()


class FinalNormLinear:
    """The final norm (or another norm `module` of the model) as a linear map with a frozen scale:
    N(x) = L(x) / s(x) (+ bias).

    Works for LayerNorm and RMSNorm variants (incl. Gemma's 1 + w gain) by evaluating the module
    itself: L(o) = (N(lam o) - N(0)) s(lam o) / lam at a large lam (eps negligible); whether the
    norm centers is read off N(ones) == N(0).
    """

    def __init__(self, model, module=_FINAL):
        self.norm = model.adapter.final_norm() if module is _FINAL else module
        self.centers = False
        self.eps = 0.0
        if self.norm is None:
            return
        for name in ("eps", "variance_epsilon", "epsilon"):  # LayerNorm / Gemma, Llama-style, others
            if isinstance(getattr(self.norm, name, None), (int, float)):
                self.eps = float(getattr(self.norm, name))
                break
        p = next(model.hf.parameters())
        self.dtype, d = p.dtype, model.spec.d_model
        with torch.no_grad():
            zero = self.norm(torch.zeros(1, d, device=p.device, dtype=p.dtype)).float()
            ones = self.norm(torch.ones(1, d, device=p.device, dtype=p.dtype)).float()
        self.zero = zero[0]
        self.centers = bool((ones - zero).abs().max() <= 1e-6 * max(1.0, zero.abs().max().item()))

    def _p(self, x: torch.Tensor) -> torch.Tensor:
        return x - x.mean(-1, keepdim=True) if self.centers else x

    def scale(self, x: torch.Tensor) -> torch.Tensor:
        """s(x): the norm's divisor for residual vectors x [..., d] (with the module's eps)."""
        return (self._p(x.float()).pow(2).mean(-1) + self.eps).sqrt()

    @torch.no_grad()
    def linear(self, o: torch.Tensor) -> torch.Tensor:
        """L(o) for vectors o [..., d] (float32)."""
        o = o.float()
        if self.norm is None:
            return o
        lam = 1e3 / self.scale(o).clamp(min=1e-30)  # [...]
        big = o * lam[..., None]
        y = self.norm(big.to(self.dtype)).float() - self.zero
        return y * (self.scale(big) / lam)[..., None]


def post_attn_norms(model) -> list[FinalNormLinear | None]:
    """Each layer's post-attention norm (Gemma-2/3, OLMo-2: the attention output is normalised before it is added
    to the residual stream) as a linear map with a frozen scale; None for every layer of an architecture that adds
    the attention output as it is. With the scale s(a) of the whole attention output a = sum_h W_O^h z_h frozen,
    head h's share of the sublayer's output is L(W_O^h z_h) / s(a): the shares add up to the norm's output
    exactly (RMSNorm: N(0) = 0), so a head's direct effect is defined at that point, as the final norm's frozen
    scale defines it after the residual stream (the linearisation of Elhage et al. 2021 / TransformerLens)."""
    if model.adapter.attn_out_norm_attr is None:
        return [None] * model.spec.n_layers
    return [FinalNormLinear(model, model.adapter.attn_out_module(l)) for l in range(model.spec.n_layers)]


def through(norm: FinalNormLinear | None, o: torch.Tensor) -> torch.Tensor:
    """L(o) of a (post-attention) norm, o itself where there is none."""
    return o.float() if norm is None else norm.linear(o)


def centered_unembed(model) -> torch.Tensor:
    """W_U - mean over the vocabulary [V, d] (float32): logit differences to the mean logit."""
    w = unembed_weight(model).float()
    return w - w.mean(0, keepdim=True)


def unembed_weight(model) -> torch.Tensor:
    u = model.adapter.unembed()
    if u is None or not hasattr(u, "weight"):
        raise UnsupportedModelError(f"{model.spec.architecture} has no unembedding (lm_head); load the causal LM")
    return u.weight.detach()


def embed_weight(model) -> torch.Tensor:
    return model.adapter.embed().weight.detach()


def token_sample(model, n: int | None, seed: int = 0, exclude=(), pool=None) -> torch.Tensor:
    """Token ids to analyse: `pool` (default the whole vocabulary) minus `exclude`, all of them when n
    is None or large enough, else n drawn without replacement (seeded); sorted."""
    ex = set(int(t) for t in exclude)
    pool = range(model.spec.d_vocab) if pool is None else pool
    ids = torch.tensor(sorted({int(t) for t in pool} - ex), dtype=torch.long)
    if ids.numel() < 2 or (n is not None and n < 2):
        raise InvalidInputError("the token sample needs at least 2 tokens")
    if n is None or n >= ids.numel():
        return ids
    g = torch.Generator().manual_seed(int(seed))
    return ids[torch.randperm(ids.numel(), generator=g)[:n]].sort().values


@torch.no_grad()
def effective_embedding(model, tokens: torch.Tensor, mode: str = "layer0", batch_size: int = 512) -> torch.Tensor:
    """[n, d_model] float32 residual vectors standing for `tokens` (see module docstring)."""
    if mode not in EMBEDDINGS:
        raise InvalidInputError(f"unknown embedding mode {mode!r}; valid: {', '.join(EMBEDDINGS)}")
    if mode == "embed" or model.spec.n_layers < 2:
        return embed_weight(model)[tokens.to(embed_weight(model).device)].float()
    site = Site(1, "resid_pre")
    parts = []
    for start in range(0, tokens.numel(), batch_size):
        ids = tokens[start:start + batch_size, None].to(model.device)
        cap = Capture([site])
        with model.intervene(cap):
            model.forward(ids, logits=False)
        parts.append(cap[site][:, 0].float())
    return torch.cat(parts)


class _AttnInputs:
    """Forward pre-hooks on attention modules recording the hidden states they receive."""

    def __init__(self, model, layers):
        self.model, self.layers, self.got = model, list(layers), {}

    def __enter__(self):
        self.handles = []
        for l in self.layers:
            def hook(module, args, kwargs, l=l):
                x = args[0] if args else kwargs["hidden_states"]
                self.got[l] = x.detach()
            self.handles.append(self.model.adapter.attention(l).register_forward_pre_hook(hook, with_kwargs=True))
        return self

    def __exit__(self, *exc):
        for h in self.handles:
            h.remove()


@torch.no_grad()
def head_inputs(model, resid: torch.Tensor, layers, want_qk: bool = False, batch_size: int = 512):
    """Run single-position forwards with resid_pre of every layer in `layers` replaced by `resid`
    [n, d]. Returns {layer: (x [n, d] attention-module input, q [n, H, hd] or None, k [n, Hkv, hd]
    or None)} (float32; q/k at position 0, so unrotated)."""
    layers = sorted(set(int(l) for l in layers))
    out: dict[int, list] = {l: [[], [], []] for l in layers}
    dt = next(model.hf.parameters()).dtype
    for start in range(0, resid.shape[0], batch_size):
        r = resid[start:start + batch_size].to(model.device, dt)[:, None, :]
        ids = torch.zeros(r.shape[0], 1, dtype=torch.long, device=model.device)
        patch = Patch({Site(l, "resid_pre"): r for l in layers})
        ivs = [patch]
        cap = None
        if want_qk:
            cap = Capture([Site(l, kind) for l in layers for kind in ("q", "k")])
            ivs.append(cap)
        with _AttnInputs(model, layers) as rec, model.intervene(*ivs):
            model.forward(ids, logits=False)
        for l in layers:
            out[l][0].append(rec.got[l][:, 0].float())
            if want_qk:
                out[l][1].append(cap[Site(l, "q")][:, 0].float())
                out[l][2].append(cap[Site(l, "k")][:, 0].float())
    return {l: (torch.cat(v[0]), torch.cat(v[1]) if want_qk else None, torch.cat(v[2]) if want_qk else None)
            for l, v in out.items()}


def head_ov_outputs(model, layer: int, x: torch.Tensor, heads=None) -> torch.Tensor:
    """W_O[:, h] (W_V[kv(h)] x + b_V) for query heads h (default all): [n, len(heads), d_model] (float32)."""
    spec = model.spec
    heads = list(range(spec.n_heads)) if heads is None else list(heads)
    wo = model.adapter.o_weight(layer).detach().float().to(x.device).view(spec.d_model, spec.n_heads, spec.head_dim)
    return torch.stack([head_values(model, layer, h, x) @ wo[:, h].t() for h in heads], dim=1)


def self_ranks(logits: torch.Tensor, tokens: torch.Tensor, flat: torch.Tensor | None = None):
    """For columns logits [n, V] of input tokens [n]: (#other tokens with logit >= own, #other tokens
    with logit <= own). Ties count against the token; a `flat` column (rounding noise only) ranks it
    last both ways."""
    own = logits.gather(1, tokens[:, None].to(logits.device))
    above = (logits >= own).sum(1) - 1
    below = (logits <= own).sum(1) - 1
    if flat is not None:
        last = torch.full_like(above, logits.shape[1])
        above, below = torch.where(flat, last, above), torch.where(flat, last, below)
    return above, below


def eig_copying(u: torch.Tensor, v: torch.Tensor, scale: float = 0.0) -> float:
    """Olsson et al.'s copying score sum(lambda) / sum(|lambda|) of the n x n matrix u @ v.T
    (u, v [n, r], r << n), from the r x r matrix v.T @ u, which has the same non-zero eigenvalues.
    0 when sum(|lambda|) <= 1e-6 * scale (a circuit that is zero up to rounding)."""
    lam = torch.linalg.eigvals((v.t().double() @ u.double()))
    denom = lam.abs().sum().item()
    return float(lam.real.sum().item() / denom) if denom > 1e-6 * scale and denom > 0 else 0.0


@torch.no_grad()
def ov_scores(model, tokens: torch.Tensor, embedding: str = "layer0", k: int = 10, layers=None,
              batch_size: int = 512) -> dict[str, list[list[float]]]:
    """Per head [layer][head]: `copy_top_k` (fraction of `tokens` whose own logit is among the k
    highest of the head's OV output on that token, read through the linear parts of the post-attention norm
    where there is one and of the final norm), `suppress_top_k` (among the k lowest),
    `copying` (eigenvalue score of the tokens x tokens OV block, in [-1, 1]) and `self_logit_z`
    (mean z-score of a token's own logit within its OV column)."""
    spec = model.spec
    layers = list(range(spec.n_layers)) if layers is None else list(layers)
    tokens = tokens.to(model.device)
    norm = FinalNormLinear(model)
    post = post_attn_norms(model)  # the post-attention norm's linear part, where the architecture has one
    wu = centered_unembed(model)  # uniform shifts of every logit are not copying
    row_norm = wu.norm(dim=1).pow(2).mean().sqrt()
    raw = embed_weight(model)[tokens].float()
    eff = effective_embedding(model, tokens, embedding, batch_size) if any(l > 0 for l in layers) else raw
    inputs = head_inputs(model, raw, [l for l in layers if l == 0], batch_size=batch_size) if 0 in layers else {}
    inputs.update(head_inputs(model, eff, [l for l in layers if l > 0], batch_size=batch_size))
    names = ("copy_top_k", "suppress_top_k", "copying", "self_logit_z")
    res = {n: [[0.0] * spec.n_heads for _ in range(spec.n_layers)] for n in names}
    for l in layers:
        x = inputs[l][0]
        wo = model.adapter.o_weight(l).detach().float().view(spec.d_model, spec.n_heads, spec.head_dim)
        for h in range(spec.n_heads):
            top = low = z = 0.0
            for start in range(0, tokens.numel(), batch_size):
                t = tokens[start:start + batch_size]
                ov = head_ov_outputs(model, l, x[start:start + batch_size], heads=[h])[:, 0]
                lo = norm.linear(through(post[l], ov))
                logits = lo @ wu.t()  # [n, V]
                sd = logits.std(1)
                flat = sd <= 1e-5 * lo.norm(dim=1) * row_norm  # the head writes nothing W_U can read
                above, below = self_ranks(logits, t, flat)
                top += (above < k).sum().item()
                low += (below < k).sum().item()
                own = logits.gather(1, t[:, None])[:, 0]
                z += torch.where(flat, 0.0, (own - logits.mean(1)) / sd.clamp(min=1e-30)).sum().item()
            n = tokens.numel()
            res["copy_top_k"][l][h], res["suppress_top_k"][l][h], res["self_logit_z"][l][h] = top / n, low / n, z / n
            # eigen score of the tokens x tokens block: logits[:, tokens] = (W_U[tokens] L(W_O^h)) v_h(x)
            lw = norm.linear(through(post[l], wo[:, h].t())).t()  # [d, hd]
            v = head_values(model, l, h, x)
            u = wu[tokens] @ lw  # [n, hd]
            scale = (wu[tokens].norm() * lw.norm() * v.norm()).item()
            res["copying"][l][h] = eig_copying(u, v, scale)
    return res


def head_values(model, layer: int, head: int, x: torch.Tensor) -> torch.Tensor:
    """W_V x + b_V of the key/value head that query head `head` reads (GQA-aware): [n, head_dim]."""
    spec, a = model.spec, model.adapter
    rows = slice(spec.kv_head_of(head) * spec.head_dim, (spec.kv_head_of(head) + 1) * spec.head_dim)
    v = x.float() @ a.v_weight(layer).detach().float().to(x.device)[rows].t()
    bv = a.v_bias(layer)
    return v if bv is None else v + bv.detach().float().to(x.device)[rows]


@torch.no_grad()
def qk_self_match(model, tokens: torch.Tensor, embedding: str = "layer0", k: int = 10, layers=None,
                  batch_size: int = 512) -> list[list[float]]:
    """Per head: fraction of `tokens` t for which the query made from t's unembedding row W_U[t]
    (a residual stream predicting t) scores the key made from t's effective embedding among its k
    highest keys over all sampled tokens (McDougall et al.'s QK circuit of copy suppression)."""
    spec = model.spec
    layers = list(range(spec.n_layers)) if layers is None else list(layers)
    tokens = tokens.to(model.device)
    qin = head_inputs(model, unembed_weight(model)[tokens].float(), layers, want_qk=True, batch_size=batch_size)
    raw = embed_weight(model)[tokens].float()
    kin = head_inputs(model, raw, [l for l in layers if l == 0], want_qk=True, batch_size=batch_size) \
        if 0 in layers else {}
    if any(l > 0 for l in layers):
        eff = effective_embedding(model, tokens, embedding, batch_size)
        kin.update(head_inputs(model, eff, [l for l in layers if l > 0], want_qk=True, batch_size=batch_size))
    out = [[0.0] * spec.n_heads for _ in range(spec.n_layers)]
    for l in layers:
        q, kk = qin[l][1], kin[l][2]  # [n, H, hd], [n, Hkv, hd]
        for h in range(spec.n_heads):
            scores = q[:, h] @ kk[:, spec.kv_head_of(h)].t()  # [n query tokens, n key tokens]
            own = scores.diagonal()[:, None]
            above = (scores >= own).sum(1) - 1
            out[l][h] = (above < k).float().mean().item()
    return out
