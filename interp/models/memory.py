"""Memory planner: the peak memory of a run estimated from the model's config alone, before loading it.

`estimate(model, lengths, batch_size, dtype, analysis=...)` -> `MemoryPlan` with each part in bytes;
`pick_batch_size(budget, ...)` -> the largest batch that fits (or an InvalidInputError saying what batch 1
needs); `interp.runtime.devices.default_budget(device)` -> the memory a run may use. Nothing is loaded: the model is built on the
meta device (no weights, no RAM) to count its parameters exactly.

The parts (B = batch, T = tokens of the longest prompt, K = T + new tokens = key length, b = bytes of the
model dtype, L layers, H query heads, G key/value heads, d head dim, D d_model, I intermediate size, V vocab):

- weights: sum of p.numel() over the model's parameters (tied weights once) x b.
- kv_cache: 2 x L x G x d x K x B x b. Every forward of a decoder returns one (transformers' use_cache
  default; greedy_decode's prefill keeps it). Sliding windows (Gemma-2, Mistral) do not shrink it: interp's
  greedy_decode uses a full DynamicCache (the window is applied by the mask), so this is an upper bound for
  plain forwards, whose cache transformers may build with sliding layers.
- activations: the largest transient of one layer's forward, B x T x b x (max(3 I, 5 H d + 3 G d) + 2 D)
  (MLP: gate, act(gate) and up alive together; attention: q, k, v, the roped q and k, k and v repeated to H
  heads for sdpa, the output; plus the residual stream and its normed copy), plus the 4D boolean mask
  B x T x K and, for a left-padded batch (`padded`, the default), the additive mask sdpa makes of it,
  B x T x K x b; for eager attention (Gemma-2, whose softcap sdpa cannot apply) the scores B x H x T x K in b,
  their float32 softmax and its cast back.
- logits: B x n x V x b, n = T (all positions: greedy_decode's prefill, loss metrics), 1 (last position:
  logits_to_keep=1) or 0 (body only), with the final hidden states B x T x D x b alive at the same time. The
  logits come after the last layer, so the peak takes the larger of `activations` and `logits`. Encoders
  have no LM head: 0.
- attention_rows (recorded rows): float32 B x L x H x n_query x K.
- clean_cache (patching: the clean run's activations at every patched site; cache: one batch of the sites
  before they are written to the store): per site kind, layers x B x T x width x bytes, width D for resid*,
  attn_out, mlp_out; H d for head_out and q; G d for k and v; `resid` is every depth (L + 1 layers).

peak = weights + kv_cache + attention_rows + clean_cache + max(activations, logits). Everything but the
weights grows linearly with B, so the largest batch under a budget is floor((budget - weights) / per_row).
Not counted: the allocator's slack and fragmentation, the framework's own memory (CUDA context, Python,
torch's libraries on CPU), autograd graphs (attribution patching), tokenizer and result objects: hence the
safety fraction of `default_budget` (SAFETY = 0.9 of the free memory).
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

import torch

from interp.errors import InvalidInputError
from interp.models.spec import ModelSpec


from interp.runtime.records import memory_profiles

# per analysis profile (interp.runtime.records: each analysis's record names its profile): which logits a forward
# keeps, whether attention rows are recorded, the default sites
_PROFILES = memory_profiles()
ANALYSES = tuple(_PROFILES)  # detect, ablate, patch, cache
_DEFAULTS = {n: dict(logits=p.logits, rows=p.rows, sites=p.sites) for n, p in _PROFILES.items()}
_RESID = ("resid_pre", "resid_post", "attn_out", "mlp_out")
SITE_KINDS = ("resid",) + _RESID + ("head_out", "q", "k", "v")


def dtype_of(dtype) -> torch.dtype:
    """torch dtype from a torch dtype or a name (float32, bf16, ...: interp.models.loading.DTYPES)."""
    from interp.models.loading import DTYPES

    if isinstance(dtype, torch.dtype):
        return dtype
    if dtype not in DTYPES:
        raise InvalidInputError(f"unknown dtype {dtype!r}; valid: {', '.join(DTYPES)}")
    return DTYPES[dtype]


def nbytes_of(dtype) -> int:
    return torch.empty((), dtype=dtype_of(dtype)).element_size()


@dataclass(frozen=True)
class Geometry:
    """What the planner reads from a config: its ModelSpec, plus the exact parameter count, the MLP width and
    the attention implementation."""

    name: str
    spec: ModelSpec
    n_params: int
    intermediate: int
    attn_implementation: str


_GEOMETRY: dict = {}


def geometry(config_or_name) -> Geometry:
    """The Geometry of a model name (alias, directory, Hub id: only its config is read) or a transformers
    config. The model is built on the meta device (`loading.meta_adapter`) to count its parameters exactly
    (tied weights once)."""
    from interp.models.loading import load_config, meta_adapter

    key = config_or_name if isinstance(config_or_name, str) else None
    if key is not None and key in _GEOMETRY:
        return _GEOMETRY[key]
    config = load_config(config_or_name) if key is not None else config_or_name
    adapter = meta_adapter(config)
    text = adapter.config
    d_model = int(text.hidden_size)
    inter = getattr(text, "intermediate_size", None) or getattr(text, "n_inner", None) or 4 * d_model
    g = Geometry(name=key or getattr(config, "name_or_path", "") or config.model_type, spec=adapter.spec(),
                 n_params=int(sum(p.numel() for p in adapter.hf.parameters())), intermediate=int(inter),
                 attn_implementation=type(adapter).default_attn_implementation_for(config))
    if key is not None:
        _GEOMETRY[key] = g
    return g


@dataclass
class MemoryPlan:
    """The estimated memory of one run, each part in bytes (see the module docstring for the formulas)."""

    model: str
    analysis: str
    length: int
    key_length: int
    batch_size: int
    dtype: str
    n_params: int
    weights: int
    kv_cache: int
    activations: int
    logits: int
    attention_rows: int
    clean_cache: int
    sites: tuple = ()
    notes: list = field(default_factory=list)

    @property
    def per_row(self) -> int:
        """Bytes that grow with each batch row (everything but the weights), at this batch size."""
        return self.peak - self.weights

    @property
    def peak(self) -> int:
        return (self.weights + self.kv_cache + self.attention_rows + self.clean_cache
                + max(self.activations, self.logits))

    def to_dict(self) -> dict:
        d = asdict(self)
        d["sites"] = list(self.sites)
        d["peak"] = self.peak
        return d


def _site_bytes(g: Geometry, sites, batch: int, length: int, nbytes: int) -> int:
    total = 0
    for s in sites:
        kind = s.split(".")[-1] if "." in s else s
        if kind.startswith("H") and "." in s:  # L2.head_out.H1: one head
            kind = s.split(".")[-2]
        if kind not in SITE_KINDS:
            raise InvalidInputError(f"unknown site {s!r}; site kinds: {', '.join(SITE_KINDS)}")
        sp = g.spec
        layers = 1 if s.startswith("L") and "." in s else (sp.n_layers + 1 if kind == "resid" else sp.n_layers)
        width = {"head_out": sp.n_heads * sp.head_dim, "q": sp.n_heads * sp.head_dim,
                 "k": sp.n_kv_heads * sp.head_dim, "v": sp.n_kv_heads * sp.head_dim}.get(kind, sp.d_model)
        total += layers * batch * length * width * nbytes
    return total


def estimate(config_or_name, lengths, batch_size: int = 1, dtype="float32", analysis: str = "ablate", *,
             new_tokens: int = 0, logits: str | None = None, rows: bool | None = None, n_query: int = 1,
             sites=None, store_dtype="float32", padded: bool = True) -> MemoryPlan | list[MemoryPlan]:
    """The MemoryPlan of a run of `analysis` at prompt length `lengths` (an int; a list gives one plan per
    length) with `batch_size` rows in `dtype`. `new_tokens`: decoded tokens (the KV cache and rows then span
    T + new_tokens keys). `logits` ("all", "last", "none"), `rows` (record attention rows of `n_query`
    queries per row) and `sites` (patching's clean caches / the cache command's sites) default per analysis.
    `padded`: the batch is left-padded (prompts of different lengths, the analyses' case), so attention gets a
    4D mask that sdpa turns into an additive mask in the model dtype; False for equal-length batches, where
    transformers passes none (is_causal)."""
    if not isinstance(lengths, int):
        return [estimate(config_or_name, int(t), batch_size, dtype, analysis, new_tokens=new_tokens, logits=logits,
                         rows=rows, n_query=n_query, sites=sites, store_dtype=store_dtype, padded=padded)
                for t in lengths]
    if analysis not in ANALYSES:
        raise InvalidInputError(f"unknown analysis {analysis!r}; choose from {', '.join(ANALYSES)}")
    if lengths < 1 or batch_size < 1 or new_tokens < 0:
        raise InvalidInputError(f"length and batch size must be >= 1 (got {lengths}, {batch_size})")
    g = geometry(config_or_name)
    d = _DEFAULTS[analysis]
    logits = d["logits"] if logits is None else logits
    if logits not in ("all", "last", "none"):
        raise InvalidInputError(f"logits must be all, last or none, got {logits!r}")
    rows = d["rows"] if rows is None else rows
    sites = tuple(d["sites"] if sites is None else sites)
    b, B, T = nbytes_of(dtype), batch_size, lengths
    K = T + new_tokens
    sp = g.spec
    H, G, hd, D, L = sp.n_heads, sp.n_kv_heads, sp.head_dim, sp.d_model, sp.n_layers
    notes = []
    kv = 2 * L * G * hd * K * B * b if sp.causal else 0
    per_tok = max(3 * g.intermediate, 5 * H * hd + 3 * G * hd) + 2 * D
    act = B * T * b * per_tok + B * T * K  # + the 4D boolean mask
    if padded:  # sdpa's additive copy of the boolean mask (measured on CPU: +3.3 MB per row at T = K = 1024)
        act += B * T * K * b
    if g.attn_implementation == "eager":
        act += B * H * T * K * (2 * b + 4)
        notes.append("eager attention: scores, their float32 softmax and its cast back are [batch, heads, T, K]")
    n_logits = {"all": T, "last": 1, "none": 0}[logits]
    if not sp.causal:  # an encoder (AutoModel): no LM head, its output is the last hidden states
        n_logits = 0
    lg = B * n_logits * sp.d_vocab * b + B * T * D * b if n_logits else 0
    rw = 4 * B * L * H * n_query * K if rows else 0
    clean = 0
    if sites:
        clean = _site_bytes(g, sites, B, T, b if analysis == "patch" else nbytes_of(store_dtype))
        if analysis == "cache":  # the model-dtype activations and their store-dtype copy
            clean += _site_bytes(g, sites, B, T, b) if nbytes_of(store_dtype) != b else 0
    if sp.max_positions is not None and K > sp.max_positions:
        notes.append(f"{K} tokens exceed the config's max_position_embeddings {sp.max_positions}")
    return MemoryPlan(model=g.name, analysis=analysis, length=T, key_length=K, batch_size=B,
                      dtype=str(dtype_of(dtype)).replace("torch.", ""), n_params=g.n_params, weights=g.n_params * b,
                      kv_cache=kv, activations=act, logits=lg, attention_rows=rw, clean_cache=clean, sites=sites,
                      notes=notes)


def pick_batch_size(budget_bytes: int, config_or_name, lengths, dtype="float32", analysis: str = "ablate",
                    max_batch: int | None = None, **kw) -> int:
    """The largest batch whose peak (at the longest of `lengths`) fits `budget_bytes`, at most `max_batch`.
    Refuses (InvalidInputError) with the bytes batch 1 needs when it does not fit."""
    T = max(lengths) if not isinstance(lengths, int) else lengths
    one = estimate(config_or_name, T, 1, dtype, analysis, **kw)
    if one.peak > budget_bytes:
        raise InvalidInputError(
            f"{one.model} ({one.analysis}, {T} tokens, {one.dtype}) needs {one.peak} bytes ({gib(one.peak)}) at "
            f"batch size 1 (weights {gib(one.weights)}, per row {gib(one.per_row)}); the budget is {budget_bytes} "
            f"bytes ({gib(budget_bytes)}). Use a shorter length, a smaller dtype or a device with more memory")
    n = (budget_bytes - one.weights) // one.per_row
    return int(max(1, min(n, max_batch) if max_batch else n))


def gib(n: int) -> str:
    return f"{n / 2 ** 30:.2f} GiB"
