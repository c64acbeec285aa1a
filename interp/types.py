"""Small value types: head ids and activation sites. Strings only at the edges (CLI, file names)."""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Iterable, Union

from .errors import InvalidInputError

SITE_KINDS = ("resid_pre", "attn_out", "mlp_out", "resid_post", "head_out", "q", "k", "v", "pattern_rows")
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


def as_heads(heads: Iterable[HeadLike] | str) -> tuple[HeadId, ...]:
    """Normalise heads; a string may hold a comma-separated list ('L3H1,L5H0')."""
    if isinstance(heads, str):
        heads = [p for p in heads.split(",") if p.strip()]
    out = tuple(sorted({as_head(h) for h in heads}))
    return out


@dataclass(frozen=True)
class Site:
    """Where an activation lives. `head` only for per-head kinds (head_out, q, k, v, pattern_rows)."""

    layer: int
    kind: str
    head: int | None = None

    def __post_init__(self):
        if self.kind not in SITE_KINDS:
            raise InvalidInputError(f"unknown site kind {self.kind!r}; valid kinds: {', '.join(SITE_KINDS)}")

    def __str__(self) -> str:
        return f"L{self.layer}.{self.kind}" + ("" if self.head is None else f".H{self.head}")

    @classmethod
    def parse(cls, text: str) -> "Site":
        m = re.match(r"^L(\d+)\.([a-z_]+)(?:\.H(\d+))?$", text.strip())
        if not m:
            raise InvalidInputError(f"bad site {text!r}: write e.g. L3.resid_pre or L3.head_out.H1")
        return cls(int(m.group(1)), m.group(2), None if m.group(3) is None else int(m.group(3)))
