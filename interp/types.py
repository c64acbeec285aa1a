"""Small value types: head ids and activation sites. Strings only at the edges (CLI, file names)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Union

from .errors import InvalidInputError


class SiteKind(str, Enum):
    """Every kind of activation site, defined once: where it lives, whether it is per head, its shape.

    A str enum: `SiteKind.Q == "q"`, and `Site.kind` stays a plain string. Per kind:
      per_head    the tensor has a head axis (query heads, or key/value heads for k and v)
      location    "attention": read/edited inside the attention wrapper (interception.py);
                  "module": a hook on a module the adapter names
      hook        for module kinds, "pre" (forward pre-hook: the module's input) or "post" (its output)
      heads       which head count the head axis has: "n_heads", "n_kv_heads" or None
      shape       the captured tensor's shape
      capturable  Capture/Patch/cache can read it (pattern_rows is recomputed by AttentionRows instead)
      patchable   Patch can replace it (not k/v: the KV cache would keep the old values)
      residual    a state of the residual stream (resid_pre, resid_post), not a block's output
    """

    # (value, per_head, location, hook, heads, shape, capturable, patchable, residual)
    RESID_PRE = ("resid_pre", False, "module", "pre", None, "[batch, seq, d_model]", True, True, True)
    ATTN_OUT = ("attn_out", False, "module", "post", None, "[batch, seq, d_model]", True, True, False)
    MLP_OUT = ("mlp_out", False, "module", "post", None, "[batch, seq, d_model]", True, True, False)
    RESID_POST = ("resid_post", False, "module", "post", None, "[batch, seq, d_model]", True, True, True)
    HEAD_OUT = ("head_out", True, "attention", None, "n_heads", "[batch, seq, n_heads, head_dim]", True, True, False)
    Q = ("q", True, "attention", None, "n_heads", "[batch, seq, n_heads, head_dim]", True, True, False)
    K = ("k", True, "attention", None, "n_kv_heads", "[batch, seq, n_kv_heads, head_dim]", True, False, False)
    V = ("v", True, "attention", None, "n_kv_heads", "[batch, seq, n_kv_heads, head_dim]", True, False, False)
    PATTERN_ROWS = ("pattern_rows", True, "attention", None, "n_heads",
                    "[batch, n_heads, n_query, key_len]", False, False, False)

    def __new__(cls, value, per_head, location, hook, heads, shape, capturable, patchable, residual):
        obj = str.__new__(cls, value)
        obj._value_ = value
        obj.per_head = per_head
        obj.location = location
        obj.hook = hook
        obj.heads = heads
        obj.shape = shape
        obj.capturable = capturable
        obj.patchable = patchable
        obj.residual = residual
        return obj

    def __str__(self) -> str:
        return self.value

    def __format__(self, spec) -> str:
        return format(self.value, spec)

    @property
    def in_attention(self) -> bool:
        return self.location == "attention"

    @property
    def on_module(self) -> bool:
        return self.location == "module"

    def n_heads(self, spec) -> int | None:
        """The head-axis length for a ModelSpec (None for d_model kinds)."""
        return None if self.heads is None else getattr(spec, self.heads)

    def token_shape(self, spec, head: int | None = None) -> tuple[int, ...]:
        """Per-token shape under a ModelSpec: (d_model,), (heads, head_dim), or (head_dim,) for one head."""
        if not self.per_head:
            return (spec.d_model,)
        if head is not None:
            return (spec.head_dim,)
        return (self.n_heads(spec), spec.head_dim)


SITE_KINDS = tuple(k.value for k in SiteKind)
HEAD_KINDS = tuple(k.value for k in SiteKind if k.per_head and k.capturable)  # head_out, q, k, v
MODULE_KINDS = tuple(k.value for k in SiteKind if k.on_module)  # resid_pre, attn_out, mlp_out, resid_post
RESID_KINDS = tuple(k.value for k in SiteKind if k.residual)  # resid_pre, resid_post
CAPTURE_KINDS = tuple(k.value for k in SiteKind if k.capturable)
PATCH_KINDS = tuple(k.value for k in SiteKind if k.patchable)
KV_KINDS = tuple(k.value for k in SiteKind if k.heads == "n_kv_heads")  # k, v

_HEAD_RE = re.compile(r"^L(\d+)H(\d+)$", re.IGNORECASE)


@dataclass(frozen=True, order=True)
class HeadId:
    """A QUERY head: (layer, query-head index). Key/value heads are `KVHeadId`."""

    layer: int
    head: int

    def __str__(self) -> str:
        return f"L{self.layer}H{self.head}"

    @classmethod
    def parse(cls, text: str) -> "HeadId":
        """HeadId from 'L<layer>H<head>' (case-insensitive, e.g. 'L3H1'); raises InvalidInputError otherwise."""
        m = _HEAD_RE.match(text.strip())
        if not m:
            raise InvalidInputError(f"bad head id {text!r}: write heads as L<layer>H<head>, e.g. L3H1")
        return cls(int(m.group(1)), int(m.group(2)))


@dataclass(frozen=True, order=True)
class KVHeadId:
    """A key/value head. Under GQA several query heads share one; the adapter maps between them."""

    layer: int
    kv_head: int

    def __str__(self) -> str:
        return f"L{self.layer}KV{self.kv_head}"


HeadLike = Union[HeadId, tuple, str]


def as_head(h: HeadLike) -> HeadId:
    if isinstance(h, HeadId):
        return h
    if isinstance(h, str):
        return HeadId.parse(h)
    if isinstance(h, (tuple, list)) and len(h) == 2 and all(isinstance(x, int) for x in h):
        return HeadId(int(h[0]), int(h[1]))
    raise InvalidInputError(f"bad head {h!r}: pass interp.HeadId(layer, head), a (layer, head) tuple or 'L3H1'")


_LAYER_RE = re.compile(r"^L(\d+)H\*$", re.IGNORECASE)


def as_heads(heads: Iterable[HeadLike] | str, n_heads: int | None = None) -> tuple[HeadId, ...]:
    """Normalise heads (sorted, each once; a head listed twice is an error); a string may hold a
    comma-separated list ('L3H1,L5H0'). 'L2H*' is every head of layer 2, given the model's `n_heads`
    (query heads per layer)."""
    if isinstance(heads, str):
        heads = [p for p in heads.split(",") if p.strip()]
    parsed = []
    for h in heads:
        m = _LAYER_RE.match(h.strip()) if isinstance(h, str) else None
        if m is None:
            parsed.append(as_head(h))
        elif n_heads is None:
            raise InvalidInputError(f"{h.strip()!r} (every head of a layer) needs the model's head count here: "
                                    "list the heads (L2H0,L2H1,...) or pass n_heads")
        else:
            parsed += [HeadId(int(m.group(1)), i) for i in range(n_heads)]
    seen, dup = set(), []
    for h in parsed:
        if h in seen and h not in dup:
            dup.append(h)
        seen.add(h)
    if dup:  # merging them silently would hide a typo (and change the control's head count)
        raise InvalidInputError(f"head(s) {', '.join(map(str, dup))} listed more than once")
    return tuple(sorted(seen))


@dataclass(frozen=True)
class Site:
    """Where an activation lives. `head` only for per-head kinds (head_out, q, k, v, pattern_rows)."""

    layer: int
    kind: str
    head: int | None = None

    def __post_init__(self):
        if self.kind not in SITE_KINDS:
            raise InvalidInputError(f"unknown site kind {self.kind!r}; valid kinds: {', '.join(SITE_KINDS)}")
        object.__setattr__(self, "kind", str(SiteKind(self.kind).value))  # a plain str, also from a SiteKind
        if self.head is not None and not self.site_kind.per_head:
            raise InvalidInputError(f"site kind {self.kind!r} has no heads; write e.g. L{self.layer}.{self.kind}")

    @property
    def site_kind(self) -> SiteKind:
        return SiteKind(self.kind)

    def __str__(self) -> str:
        return f"L{self.layer}.{self.kind}" + ("" if self.head is None else f".H{self.head}")

    @classmethod
    def parse(cls, text: str) -> "Site":
        """'L3.resid_pre', 'L3.head_out.H1', or a TransformerLens hook name ('blocks.3.hook_resid_pre',
        'blocks.3.attn.hook_z'), read with interp.interop.transformer_lens.from_transformer_lens
        (its architecture-independent map; pass model= there for GPT-2/BERT q/k, Gemma-2/OLMo-2 sublayers)."""
        if not isinstance(text, str):
            raise InvalidInputError(f"bad site {text!r}: write e.g. L3.resid_pre or L3.head_out.H1")
        from .interop.transformer_lens import from_transformer_lens, looks_like_transformer_lens

        if looks_like_transformer_lens(text):
            return from_transformer_lens(text)
        m = re.match(r"^L(\d+)\.([a-z_]+)(?:\.H(\d+))?$", text.strip())
        if not m:
            raise InvalidInputError(f"bad site {text!r}: write e.g. L3.resid_pre or L3.head_out.H1 (or a "
                                    "TransformerLens hook name such as blocks.3.hook_resid_pre)")
        return cls(int(m.group(1)), m.group(2), None if m.group(3) is None else int(m.group(3)))
