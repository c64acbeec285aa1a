"""Head ids and activation sites, in both spellings: interp's (L3.resid_pre, L3.head_out.H1) and
TransformerLens's hook names (blocks.3.hook_resid_pre, blocks.3.attn.hook_z). Strings only at the edges
(CLI, file names)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from enum import Enum
from typing import Iterable, Union

from interp.errors import InvalidInputError


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
        'blocks.3.attn.hook_z'), read with `site_from_tl`
        (the architecture-independent map; pass model= there for GPT-2/BERT q/k, Gemma-2/OLMo-2 sublayers)."""
        if not isinstance(text, str):
            raise InvalidInputError(f"bad site {text!r}: write e.g. L3.resid_pre or L3.head_out.H1")
        if looks_like_tl(text):
            return site_from_tl(text)
        m = re.match(r"^L(\d+)\.([a-z_]+)(?:\.H(\d+))?$", text.strip())
        if not m:
            raise InvalidInputError(f"bad site {text!r}: write e.g. L3.resid_pre or L3.head_out.H1 (or a "
                                    "TransformerLens hook name such as blocks.3.hook_resid_pre)")
        return cls(int(m.group(1)), m.group(2), None if m.group(3) is None else int(m.group(3)))

# ---- the TransformerLens spelling of a site ---------------------------------------------------
# Per interp kind, the TransformerLens hook that records the same tensor (checked against the
# TransformerLens bridge on every tiny adapter in the interop tests); the architecture-dependent
# differences are described by a TLArch (interp.interop.transformer_lens derives it from a model).

# interp kind -> TL hook name under blocks.{layer}. (architecture-independent defaults)
TO_TL = {
    "resid_pre": "hook_resid_pre",
    "attn_out": "hook_attn_out",
    "mlp_out": "hook_mlp_out",
    "resid_post": "hook_resid_post",
    "head_out": "attn.hook_z",
    "q": "attn.hook_rot_q",
    "k": "attn.hook_rot_k",
    "v": "attn.hook_v",
    "pattern_rows": "attn.hook_pattern",
}

# TL hook name under blocks.{layer}. -> interp kind: canonical names and the bridge's own aliases
FROM_TL = {
    "hook_resid_pre": "resid_pre",
    "hook_in": "resid_pre",
    "hook_attn_out": "attn_out",
    "attn.hook_out": "attn_out",
    "hook_mlp_out": "mlp_out",
    "mlp.hook_out": "mlp_out",
    "hook_resid_post": "resid_post",
    "hook_out": "resid_post",
    "attn.hook_z": "head_out",
    "attn.o.hook_in": "head_out",
    "attn.hook_rot_q": "q",
    "attn.hook_rot_k": "k",
    "attn.hook_v": "v",
    "attn.v.hook_out": "v",
    "attn.hook_pattern": "pattern_rows",
}

# the projections before RoPE: interp's q/k only where the model has no rotation
PRE_ROPE = {"attn.hook_q": "q", "attn.q.hook_out": "q", "attn.hook_k": "k", "attn.k.hook_out": "k"}
PRE_ROPE_NAME = {"q": "attn.hook_q", "k": "attn.hook_k"}

# bridges that never fire hook_rot_q / hook_rot_k (TransformerLens 4.3: RoPE inside joint QKV)
NO_ROT_HOOK_TYPES = ("gpt_neox",)
MODULE_OUT = {"attn_out": "attn.hook_out", "mlp_out": "mlp.hook_out"}

_NO_EQUIVALENT = {
    "hook_resid_mid": "the residual between attention and MLP; interp has no resid_mid site: it is "
                      "L{l}.resid_pre + L{l}.attn_out on pre-norm models (capture both and add them)",
    "attn.hook_attn_scores": "pre-softmax attention scores; interp records the post-softmax rows "
                             "(L{l}.pattern_rows, via interp.attention_rows)",
    "attn.hook_result": "per-head outputs after W_O; capture L{l}.head_out (before W_O) and multiply by the "
                        "head's slice of W_O (model.adapter.o_weight)",
    "attn.hook_q": "the query projection before RoPE; interp's q is after RoPE (and QK-norm): use "
                   "blocks.{l}.attn.hook_rot_q, or pass model= for a model without RoPE (GPT-2, BERT)",
    "attn.hook_k": "the key projection before RoPE; interp's k is after RoPE (and QK-norm): use "
                   "blocks.{l}.attn.hook_rot_k, or pass model= for a model without RoPE (GPT-2, BERT)",
}
_NO_EQUIVALENT["attn.q.hook_out"] = _NO_EQUIVALENT["attn.hook_q"]
_NO_EQUIVALENT["attn.k.hook_out"] = _NO_EQUIVALENT["attn.hook_k"]

_BLOCK_RE = re.compile(r"^blocks\.(\d+)\.(.+)$")



@dataclass(frozen=True)
class TLArch:
    """What the TransformerLens spelling of a site depends on: the model_type, whether it has RoPE and
    whether it norms each sublayer's output before the residual add (Gemma-2/3, OLMo-2)."""

    model_type: str
    rope: bool = True
    post_norm: bool = False


def tl_hook_name(site: Site, arch: TLArch | None = None) -> str:
    """The TransformerLens hook name recording `site` (see interp.interop.transformer_lens.to_transformer_lens)."""
    hook = TO_TL[site.kind]
    if arch is not None:
        if site.kind in ("q", "k") and not arch.rope:
            hook = PRE_ROPE_NAME[site.kind]
        elif site.kind in ("q", "k") and arch.model_type in NO_ROT_HOOK_TYPES:
            raise InvalidInputError(
                f"{site} on {arch.model_type}: TransformerLens's bridge for {arch.model_type} never fires "
                f"attn.hook_rot_{site.kind} (RoPE is applied inside its joint-QKV attention) and its "
                f"attn.hook_{site.kind} is before RoPE, so no TL hook records interp's post-RoPE {site.kind}; "
                f"capture it with interp.Capture(['{site}'])")
    return f"blocks.{site.layer}.{hook}"


def site_from_tl(name: str, head: int | None = None, arch: TLArch | None = None) -> Site:
    """The interp Site recorded by TransformerLens hook `name` (see
    interp.interop.transformer_lens.from_transformer_lens); `arch` None: the architecture-independent map."""
    if not isinstance(name, str):
        raise InvalidInputError(f"bad TransformerLens hook name {name!r}: pass a string like 'blocks.3.hook_resid_pre'")
    text = name.strip()
    m = _BLOCK_RE.match(text)
    if not m:
        raise InvalidInputError(
            f"TransformerLens hook {text!r} has no interp site: interp's sites live in the transformer blocks "
            "(blocks.{l}.*); embeddings, the final norm and the unembedding are not sites (L0.resid_pre is the "
            "first block's input, the last layer's resid_post the final norm's input)")
    layer, rest = int(m.group(1)), m.group(2)
    model_type, rope = (arch.model_type, arch.rope) if arch is not None else (None, True)
    if rest in PRE_ROPE and not rope:
        kind = PRE_ROPE[rest]
    elif rest in PRE_ROPE and model_type in NO_ROT_HOOK_TYPES:
        raise InvalidInputError(f"{text}: the {PRE_ROPE[rest]} projection before RoPE; interp's {PRE_ROPE[rest]} is "
                                f"after RoPE, and TransformerLens's {model_type} bridge fires no post-RoPE hook; "
                                f"capture interp's L{layer}.{PRE_ROPE[rest]}")
    elif rest in FROM_TL:
        kind = FROM_TL[rest]
        if kind in ("q", "k") and arch is not None and not rope:
            raise InvalidInputError(f"{text}: {model_type} has no RoPE, so TransformerLens has no {rest}; "
                                    f"use blocks.{layer}.{PRE_ROPE_NAME[kind]}")
        if kind in ("q", "k") and model_type in NO_ROT_HOOK_TYPES:
            raise InvalidInputError(f"{text}: TransformerLens's {model_type} bridge never fires {rest} (RoPE is "
                                    f"applied inside its joint-QKV attention); capture interp's L{layer}.{kind}")
        if arch is not None and rest in MODULE_OUT.values() and arch.post_norm:
            sub = rest.split(".")[0]
            raise InvalidInputError(
                f"{text}: on {model_type} this is the {sub} module's output before the norm on the sublayer's "
                f"output; interp's {kind} is the contribution to the residual after that norm: use "
                f"blocks.{layer}.hook_{sub}_out for L{layer}.{kind}")
    elif rest in _NO_EQUIVALENT:
        raise InvalidInputError(f"TransformerLens hook {text!r} has no interp site: it is "
                                + _NO_EQUIVALENT[rest].format(l=layer))
    else:
        raise InvalidInputError(
            f"TransformerLens hook {text!r} has no interp site (norm, MLP-internal, split-input and RoPE-table "
            f"hooks have none); mapped hooks under blocks.{layer}: {', '.join(sorted(FROM_TL))}")
    if head is not None and not isinstance(head, int):
        raise InvalidInputError(f"head must be an int, got {head!r}")
    return Site(layer, kind, head)


def looks_like_tl(text: str) -> bool:
    """Whether a site string is spelled the TransformerLens way (interp names never contain 'hook_')."""
    t = text.strip()
    return t.startswith("blocks.") or "hook_" in t
