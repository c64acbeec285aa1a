"""The logit lens and direct logit attribution, read through the model's own final norm and unembedding.

Logit lens (nostalgebraist 2020): the residual stream after each layer (and the embeddings before the first)
decoded as if it were the last: the model's own final norm module, then its unembedding (bias and Gemma-2's final
logit softcap included), so the last layer's lens is the model's logits. `logit_lens` returns those logits per
layer and position, their log-probabilities, each layer's top tokens, the log-probability of given target
tokens and the KL divergence from each layer's distribution to the model's final one.

Direct logit attribution (Elhage et al. 2021; TransformerLens's `stack_head_results` @ logit directions): the
final residual stream x is a sum of what the embeddings, every attention head and every MLP wrote into it, so
with the final norm's scale s(x) frozen at its value on x, N(x) = L(x) / s(x) + b_N is linear in each part (L the
norm's linear part: its gain, and centring for LayerNorm) and the logit difference of two tokens splits exactly:

    logit(a) - logit(b) = sum over parts p of (W_U[a] - W_U[b]) . L(p) / s(x)  +  (W_U[a] - W_U[b]) . b_N + b_U[a] - b_U[b]

Parts: the embeddings (the residual stream entering layer 0: position embeddings and Gemma's scaling included),
each head's W_O^h z_h, each layer's attention output bias, each MLP's output. Where the architecture normalises a
sublayer's output before adding it (Gemma-2/3, OLMo-2), a head's share goes through that norm with its scale
frozen at the whole attention output's, so the heads and the bias still add up to what the layer wrote.
`direct_logit_attribution` returns the per-head grid, the per-layer attention and MLP totals, the embeddings'
share, the constant (bias) term, their sum and the model's own logit difference, which it equals up to float
rounding (`check`). With `wrong=None` it attributes the answer's logit minus the mean logit over the vocabulary.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field
from typing import Sequence

import numpy as np
import torch

from interp.errors import InvalidInputError
from interp.sites import Site


def _batch(model, inputs, attention_mask=None):
    return model.as_batch(inputs, attention_mask)


def _positions(batch, positions) -> tuple[list[int], torch.Tensor]:
    """Position labels (negative: from the end; the batch is left-padded, so -1 is every prompt's last token)
    and their column indices."""
    s = batch.input_ids.shape[1]
    pos = [int(p) for p in ([positions] if isinstance(positions, int) else positions)]
    if not pos:
        raise InvalidInputError("positions is empty: give token positions, e.g. -1 (the last token)")
    cols = []
    for p in pos:
        c = p if p >= 0 else s + p
        if not 0 <= c < s:
            raise InvalidInputError(f"position {p} is outside the {s}-token inputs")
        cols.append(c)
    lengths = batch.attention_mask.sum(-1)
    if any(c < s - int(lengths.min()) for c in cols):
        raise InvalidInputError(f"positions {pos}: some prompts are shorter and left-padded there; count positions "
                                "from the end (negative) or pass prompts of one length")
    return pos, torch.tensor(cols, device=batch.input_ids.device)


def _token(model, t, what: str) -> int:
    if isinstance(t, str):
        if model.tokenizer is None:
            raise InvalidInputError(f"{model.name} has no tokenizer: give the {what} as a token id")
        ids = model.tokenizer.encode(t, add_special_tokens=False)
        if len(ids) != 1:
            raise InvalidInputError(f"the {what} {t!r} is {len(ids)} tokens for {model.name}; give one token (with its "
                                    "leading space, e.g. ' Paris') or its id")
        return int(ids[0])
    t = int(t)
    if not 0 <= t < model.spec.d_vocab:
        raise InvalidInputError(f"{what} token id {t} is outside the vocabulary (0..{model.spec.d_vocab - 1})")
    return t


def _tokens(model, toks, n: int, what: str) -> list[int]:
    if isinstance(toks, (str, int, np.integer)):
        return [_token(model, toks, what)] * n
    toks = list(toks)
    if len(toks) != n:
        raise InvalidInputError(f"{len(toks)} {what} tokens for {n} prompts: give one per prompt, or one for all")
    return [_token(model, t, what) for t in toks]


def _cap(model) -> float | None:
    """The model's final logit softcap (Gemma-2: logits = cap * tanh(logits / cap)), None without one."""
    cap = getattr(model.hf.config, "final_logit_softcapping", None)
    text = getattr(model.hf.config, "text_config", None)
    if cap is None and text is not None:
        cap = getattr(text, "final_logit_softcapping", None)
    return float(cap) if cap else None


def _softcap(model, logits: torch.Tensor) -> torch.Tensor:
    cap = _cap(model)
    return logits if cap is None else torch.tanh(logits / cap) * cap


def _unembed(model, h: torch.Tensor) -> torch.Tensor:
    """Logits of final-normed hidden states h [..., d] through the model's own output head, in float32."""
    from interp.analyses.circuits import unembed_weight

    u = model.adapter.unembed()
    w = unembed_weight(model).float()
    b = getattr(u, "bias", None)
    out = h.float() @ w.t()
    if b is not None:
        out = out + b.detach().float()
    return _softcap(model, out)


@dataclass
class LogitLensResult:
    """`logits` [batch, n_layers + 1, n_positions, vocab] (float32): layer index 0 is the embeddings (the residual
    stream entering layer 0), index l + 1 the residual stream after layer l; the last equals the model's logits.
    `layers`: their labels ("embed", "L0", ...); `positions`: the position labels. `logprobs`: log-softmax of
    `logits`; `top_tokens` / `top_logprobs` [batch, layers, positions, k]; `target_logprob` [batch, layers,
    positions] for `targets` (None without); `kl_to_final` [batch, layers, positions]: KL(final || layer) in nats."""

    model: str
    layers: list[str]
    positions: list[int]
    logits: torch.Tensor
    logprobs: torch.Tensor
    top_tokens: torch.Tensor
    top_logprobs: torch.Tensor
    kl_to_final: torch.Tensor
    targets: list[int] | None = None
    target_logprob: torch.Tensor | None = None
    token_strings: list | None = None  # decoded top tokens [batch][layer][position][k] with a tokenizer

    def to_frame(self):
        """One row per (prompt, layer, position): KL to the final layer, the target's log-prob and probability,
        and the top token with its probability."""
        import pandas as pd

        recs = []
        b, n_l, n_p, _ = self.top_tokens.shape
        for i in range(b):
            for li in range(n_l):
                for pi in range(n_p):
                    rec = {"model": self.model, "prompt": i, "layer": self.layers[li], "position": self.positions[pi],
                           "kl_to_final": float(self.kl_to_final[i, li, pi]),
                           "top_token": int(self.top_tokens[i, li, pi, 0]),
                           "top_prob": float(self.top_logprobs[i, li, pi, 0].exp())}
                    if self.token_strings is not None:
                        rec["top_token_str"] = self.token_strings[i][li][pi][0]
                    if self.target_logprob is not None:
                        lp = float(self.target_logprob[i, li, pi])
                        rec.update(target=self.targets[i], target_logprob=lp, target_prob=float(np.exp(lp)))
                    recs.append(rec)
        return pd.DataFrame.from_records(recs)


@torch.no_grad()
def logit_lens(model, inputs, positions: int | Sequence[int] = -1, targets=None, top_k: int = 5,
               attention_mask=None) -> LogitLensResult:
    """The logit lens (module docstring) on `inputs` (a text, texts, token ids [seq] / [batch, seq], or a Batch) at
    `positions` (default the last token; negative counts from the end). `targets`: a token (id or one-token string)
    for every prompt, or one per prompt, whose log-probability is read at every layer. Decoder models only."""
    if not model.spec.causal:
        raise InvalidInputError(f"{model.spec.architecture} is an encoder: the logit lens reads a causal LM's head")
    if top_k < 1:
        raise InvalidInputError("top_k must be >= 1")
    batch = _batch(model, inputs, attention_mask)
    pos, cols = _positions(batch, positions)
    L = model.spec.n_layers
    sites = [Site(0, "resid_pre")] + [Site(l, "resid_post") for l in range(L)]
    from interp.hooks.capture import Capture

    cap = Capture(sites)
    with model.intervene(cap):
        final = model.forward(batch).float()[:, cols]  # [b, p, V]
    norm = model.adapter.final_norm() or torch.nn.Identity()
    per_layer = []
    for site in sites:
        h = cap[site][:, cols]  # [b, p, d]
        per_layer.append(_unembed(model, norm(h)))
    logits = torch.stack(per_layer, 1).float()  # [b, L + 1, p, V]
    logp = torch.log_softmax(logits, -1)
    final_lp = torch.log_softmax(final, -1)[:, None]  # [b, 1, p, V]
    kl = (final_lp.exp() * (final_lp - logp)).sum(-1).clamp(min=0.0)
    k = min(top_k, logits.shape[-1])
    top_lp, top_t = logp.topk(k, dim=-1)
    tg, tlp = None, None
    if targets is not None:
        tg = _tokens(model, targets, logits.shape[0], "target")
        idx = torch.tensor(tg, device=logp.device)[:, None, None, None].expand(-1, logp.shape[1], logp.shape[2], 1)
        tlp = logp.gather(-1, idx)[..., 0]
    strings = None
    if model.tokenizer is not None:
        dec = model.tokenizer.convert_ids_to_tokens
        strings = [[[dec(top_t[i, li, pi].tolist()) for pi in range(len(pos))] for li in range(L + 1)]
                   for i in range(top_t.shape[0])]
    return LogitLensResult(model=model.name, layers=["embed"] + [f"L{l}" for l in range(L)], positions=pos,
                           logits=logits.cpu(), logprobs=logp.cpu(), top_tokens=top_t.cpu(), top_logprobs=top_lp.cpu(),
                           kl_to_final=kl.cpu(), targets=tg, target_logprob=None if tlp is None else tlp.cpu(),
                           token_strings=strings)


@dataclass
class DirectLogitAttribution:
    """Direct logit attribution of `metric` (see the module docstring) at one position per prompt.

    Per prompt ([batch, ...] arrays, float64): `heads` [batch, n_layers, n_heads], `attn_bias` [batch, n_layers]
    (the attention output's bias share; 0 without one), `attn` [batch, n_layers] (each layer's whole attention
    output: its heads and bias), `mlp` [batch, n_layers], `embed` [batch], `constant` [batch] (the final norm's
    and the unembedding's biases), `total` [batch] (every part summed) and `logit_diff` [batch] (the model's own
    value, read off its logits). `mean_*`: the same averaged over prompts, as nested lists."""

    model: str
    metric: str
    position: int
    answer: list[int]
    wrong: list[int] | None
    heads: np.ndarray
    attn_bias: np.ndarray
    attn: np.ndarray
    mlp: np.ndarray
    embed: np.ndarray
    constant: np.ndarray
    total: np.ndarray
    logit_diff: np.ndarray
    extra: dict = field(default_factory=dict)

    @property
    def check(self) -> float:
        """max |total - logit_diff| over prompts: how exactly the parts add up to the model's own number."""
        return float(np.max(np.abs(self.total - self.logit_diff)))

    def to_dict(self) -> dict:
        d = asdict(self)
        for k, v in list(d.items()):
            if isinstance(v, np.ndarray):
                d[k] = v.tolist()
        d["check"] = self.check
        d["mean_heads"] = self.heads.mean(0).tolist()
        d["mean_attn"], d["mean_mlp"] = self.attn.mean(0).tolist(), self.mlp.mean(0).tolist()
        return d

    def to_frame(self):
        """One row per part, averaged over prompts: embed, every head (L{l}H{h}), each layer's attention bias and
        MLP, the constant, the total and the model's logit difference."""
        import pandas as pd

        L, H = self.heads.shape[1:]
        recs = [{"part": "embed", "layer": None, "head": None, "value": float(self.embed.mean())}]
        for l in range(L):
            recs += [{"part": f"L{l}H{h}", "layer": l, "head": h, "value": float(self.heads[:, l, h].mean())}
                     for h in range(H)]
            recs.append({"part": f"L{l} attn bias", "layer": l, "head": None, "value": float(self.attn_bias[:, l].mean())})
            recs.append({"part": f"L{l} mlp", "layer": l, "head": None, "value": float(self.mlp[:, l].mean())})
        recs += [{"part": "constant (biases)", "layer": None, "head": None, "value": float(self.constant.mean())},
                 {"part": "total", "layer": None, "head": None, "value": float(self.total.mean())},
                 {"part": "model logit difference", "layer": None, "head": None, "value": float(self.logit_diff.mean())}]
        df = pd.DataFrame.from_records(recs)
        df.insert(0, "metric", self.metric)
        df.insert(0, "model", self.model)
        return df


@torch.no_grad()
def direct_logit_attribution(model, inputs, answer, wrong=None, position: int = -1,
                             attention_mask=None) -> DirectLogitAttribution:
    """How much every head, every MLP and the embeddings write DIRECTLY into logit(answer) - logit(wrong) at
    `position` (default the last token) of each prompt (module docstring). `answer` / `wrong`: a token (id or
    one-token string) for every prompt, or one per prompt; `wrong=None`: logit(answer) minus the mean logit over
    the vocabulary. Through the model's own final norm (its scale frozen at the final residual stream) and its
    post-sublayer norms where it has them. Decoder models with an unembedding only."""
    from interp.analyses.circuits import FinalNormLinear, post_attn_norms, through, unembed_weight
    from interp.hooks.capture import Capture

    if not model.spec.causal:
        raise InvalidInputError(f"{model.spec.architecture} is an encoder: direct logit attribution needs its LM head")
    if _cap(model) is not None:
        raise InvalidInputError(f"{model.spec.architecture} softcaps its final logits (tanh): they are not a sum of "
                                "parts; the logit lens (interp.logit_lens) applies the softcap")
    batch = _batch(model, inputs, attention_mask)
    (pos,), cols = _positions(batch, [position])
    n = batch.input_ids.shape[0]
    a_tok = _tokens(model, answer, n, "answer")
    w_tok = None if wrong is None else _tokens(model, wrong, n, "wrong")
    spec = model.spec
    L, H, hd, d = spec.n_layers, spec.n_heads, spec.head_dim, spec.d_model
    sites = ([Site(0, "resid_pre"), Site(L - 1, "resid_post")] + [Site(l, k) for l in range(L)
                                                                 for k in ("head_out", "attn_out", "mlp_out")])
    cap = Capture(sites)
    with model.intervene(cap):
        logits = model.forward(batch).float()[:, cols[0]]  # [b, V]
    W = unembed_weight(model).float()  # [V, d]
    u = model.adapter.unembed()
    bu = getattr(u, "bias", None)
    bu = torch.zeros(W.shape[0], device=W.device) if bu is None else bu.detach().float()
    a_idx = torch.tensor(a_tok, device=W.device)
    if w_tok is None:  # answer minus the mean logit over the vocabulary
        direction = W[a_idx] - W.mean(0, keepdim=True)
        const_u = bu[a_idx] - bu.mean()
        model_ld = logits[torch.arange(n), a_idx.to(logits.device)] - logits.mean(-1)
    else:
        w_idx = torch.tensor(w_tok, device=W.device)
        direction = W[a_idx] - W[w_idx]
        const_u = bu[a_idx] - bu[w_idx]
        rows = torch.arange(n, device=logits.device)
        model_ld = logits[rows, a_idx.to(logits.device)] - logits[rows, w_idx.to(logits.device)]
    direction = direction.to(model.device)  # [b, d]
    norm = FinalNormLinear(model)
    x = cap[Site(L - 1, "resid_post")][:, cols[0]].float()  # [b, d] the final residual stream
    s = norm.scale(x) if norm.norm is not None else torch.ones(n, device=x.device)

    def score(v: torch.Tensor) -> torch.Tensor:  # v [b, ..., d] -> [b, ...]: direct share in the logit difference
        lin = norm.linear(v)
        shape = (n,) + (1,) * (lin.dim() - 2)
        return (lin * direction.view(n, *([1] * (lin.dim() - 2)), d)).sum(-1) / s.view(shape)

    zero_n = norm.norm(torch.zeros(1, d, device=x.device, dtype=norm.dtype)).float()[0] if norm.norm is not None \
        else torch.zeros(d, device=x.device)
    constant = (direction * zero_n).sum(-1) + const_u.to(model.device)
    post = post_attn_norms(model)
    heads = torch.zeros(n, L, H, device=x.device)
    attn_bias = torch.zeros(n, L, device=x.device)
    attn = torch.zeros(n, L, device=x.device)
    mlp = torch.zeros(n, L, device=x.device)
    for l in range(L):
        z = cap[Site(l, "head_out")][:, cols[0]].float()  # [b, H, hd]
        wo = model.adapter.o_weight(l).detach().float().view(d, H, hd)
        per_head = torch.einsum("bhe,mhe->bhm", z, wo)  # [b, H, d]: W_O^h z_h
        ob = model.adapter.o_proj(l).bias
        bias = None if ob is None else ob.detach().float().expand(n, d)
        if post[l] is not None:  # the sublayer's norm, its scale frozen at the whole attention output's
            whole = per_head.sum(1) + (0 if bias is None else bias)
            sa = post[l].scale(whole).clamp(min=1e-30)  # [b]
            per_head = through(post[l], per_head) / sa[:, None, None]
            bias = None if bias is None else through(post[l], bias) / sa[:, None]
        heads[:, l] = score(per_head)
        if bias is not None:
            attn_bias[:, l] = score(bias)
        attn[:, l] = score(cap[Site(l, "attn_out")][:, cols[0]].float())
        mlp[:, l] = score(cap[Site(l, "mlp_out")][:, cols[0]].float())
    embed = score(cap[Site(0, "resid_pre")][:, cols[0]].float())
    total = embed + attn.sum(1) + mlp.sum(1) + constant

    def f64(t):
        return t.double().cpu().numpy()

    metric = "logit(answer) - logit(wrong)" if w_tok is not None else "logit(answer) - mean logit"
    return DirectLogitAttribution(
        model=model.name, metric=metric, position=pos, answer=a_tok, wrong=w_tok, heads=f64(heads),
        attn_bias=f64(attn_bias), attn=f64(attn), mlp=f64(mlp), embed=f64(embed), constant=f64(constant),
        total=f64(total), logit_diff=f64(model_ld.to(x.device)),
        extra={"heads_plus_bias_minus_attn": float((heads.sum(-1) + attn_bias - attn).abs().max())})
