"""RoPE dimension resolution from the model's own frequencies.

Pairs are indexed as in the model's rotary module: pair j rotates with angular frequency
`spec.rope.inv_freq[j]` (after llama3 / YaRN / linear scaling, read from the module, never
recomputed from rope_theta). Bands are chosen by sorting the actual frequencies, so they are right
whatever the scaling did. Whole pairs only: zeroing both members of a pair commutes with the
rotation, zeroing one member does not.
"""

from __future__ import annotations

import random
from dataclasses import asdict, dataclass
from typing import Sequence

from interp.errors import InvalidInputError
from interp.models.spec import RopeSpec

BANDS = ("lowest", "highest", "random")


@dataclass(frozen=True)
class RopeDims:
    band: str
    pairs: tuple[int, ...]  # pair indices
    dims: tuple[int, ...]  # head-dim indices (both members of every pair), sorted
    freqs: tuple[float, ...]  # inv_freq of each pair, same order as `pairs`
    seed: int | None = None

    def to_dict(self) -> dict:
        return asdict(self)


def require_rope(spec) -> RopeSpec:
    if spec.rope is None:
        raise InvalidInputError(
            f"{spec.architecture} has no rotary position embedding ({spec.positional} positions): RoPE analyses "
            "need a RoPE model (Llama, Qwen2, Mistral, Gemma-2, OLMo-2, GPT-NeoX)")
    return spec.rope


def heads_by_theta(spec, heads) -> dict[float, list[str]]:
    """{rope_theta: [head ids]} for query heads `heads` (HeadIds, "L3H1" strings or (layer, head) pairs): which
    RoPE base each head rotates with. One key for models whose layers share a RoPE; Gemma-3 splits sliding (1e4)
    from full-attention (1e6)."""
    from interp.sites import as_heads

    out: dict[float, list[str]] = {}
    for h in as_heads(heads):
        out.setdefault(spec.theta_of(h.layer), []).append(str(h))
    return dict(sorted(out.items()))


def one_pair_order(spec) -> RopeSpec:
    """The model's RopeSpec for band selection, after checking that every layer type orders its rotary pairs by
    frequency the same way (then "lowest" / "highest" name the same pairs on every layer, whatever each layer's
    theta). UnsupportedModelError otherwise (bands would differ per layer)."""
    rope = require_rope(spec)
    order = rope.pairs_by_frequency()
    for t, r in spec.layer_ropes.items():
        if (r.n_pairs, r.layout) != (rope.n_pairs, rope.layout) or r.pairs_by_frequency() != order:
            from interp.errors import UnsupportedModelError

            raise UnsupportedModelError(f"{spec.model_type}: {t} layers order their rotary pairs by frequency "
                                        f"differently from layer 0, so a frequency band names different dims per "
                                        f"layer; RoPE band analyses support one order")
    return rope


def n_pairs_of(count: int, unit: str, rope: RopeSpec) -> int:
    if unit not in ("dims", "pairs"):
        raise InvalidInputError(f"unit must be 'dims' or 'pairs', got {unit!r}")
    if count < 0:
        raise InvalidInputError("the number of dims to zero must be >= 0")
    if unit == "dims":
        if count % 2:
            raise InvalidInputError(f"{count} dims is not a whole number of rotary pairs: zero an even number of dims "
                                    "(both members of each pair)")
        count //= 2
    if count > rope.n_pairs:
        raise InvalidInputError(f"{count} pairs asked but the heads have only {rope.n_pairs} rotary pairs "
                                f"({rope.rotary_dims} rotary dims of {rope.head_dim})")
    return count


def resolve_dims(rope: RopeSpec, band: str | Sequence[int], count: int = 0, unit: str = "dims",
                 seed: int | None = 0, exclude: Sequence[int] = ()) -> RopeDims:
    """Pairs and head dims of a frequency band.

    band: "lowest" (lowest frequencies), "highest", "random" (seeded), or explicit pair indices
    (then `count` is ignored). `exclude`: pairs a "random" band never draws (e.g. a target band, so that a
    random-dims control does not zero part of it); an error when fewer than `count` pairs remain.
    """
    if isinstance(band, str):
        if band not in BANDS:
            raise InvalidInputError(f"unknown band {band!r}; valid: {', '.join(BANDS)} or explicit pair indices")
        k = n_pairs_of(count, unit, rope)
        order = list(rope.pairs_by_frequency())  # ascending frequency
        if band == "lowest":
            pairs = order[:k]
        elif band == "highest":
            pairs = order[::-1][:k]
        else:
            skip = {int(p) for p in exclude}
            pool = [j for j in range(rope.n_pairs) if j not in skip]
            if len(pool) < k:
                raise InvalidInputError(f"cannot draw {k} random pairs outside the {len(skip)} excluded ones: only "
                                        f"{len(pool)} of {rope.n_pairs} pairs remain")
            pairs = random.Random(seed).sample(pool if skip else range(rope.n_pairs), k)
        name = band
    else:
        pairs = [int(p) for p in band]
        bad = [p for p in pairs if not 0 <= p < rope.n_pairs]
        if bad:
            raise InvalidInputError(f"pair indices {bad} outside 0..{rope.n_pairs - 1}")
        name = "explicit"
    pairs = sorted(set(pairs), key=lambda j: rope.inv_freq[j])
    dims = tuple(sorted(d for j in pairs for d in rope.pair_dims(j)))
    return RopeDims(band=name, pairs=tuple(pairs), dims=dims, freqs=tuple(rope.inv_freq[j] for j in pairs),
                    seed=seed if name == "random" else None)
