"""ModelSpec and RopeSpec: the geometry of a model, read from the model itself by its adapter."""

from __future__ import annotations

from dataclasses import asdict, dataclass, field


@dataclass(frozen=True)
class RopeSpec:
    """Rotary position embedding of the attention heads.

    `inv_freq[j]` is the angular frequency of rotary pair j as the model's own rotary module
    holds it (after llama3 / YaRN / linear scaling). `layout` says which dims form pair j:
    "rotate_half": (j, j + rotary_dims/2); "interleaved": (2j, 2j+1). Only the first
    `rotary_dims` dims of a head rotate (partial rotary when < head_dim).
    """

    theta: float
    rotary_dims: int
    head_dim: int
    layout: str
    inv_freq: tuple[float, ...]
    scaling: str = "default"
    attention_scaling: float = 1.0
    dynamic: bool = False

    @property
    def n_pairs(self) -> int:
        return self.rotary_dims // 2

    def pair_dims(self, j: int) -> tuple[int, int]:
        """The two head dims that rotary pair j rotates together (which ones depends on `layout`)."""
        if self.layout == "rotate_half":
            return (j, j + self.rotary_dims // 2)
        return (2 * j, 2 * j + 1)

    def pairs_by_frequency(self) -> tuple[int, ...]:
        """Rotary pair indices in ascending frequency (ties by index): "lowest" / "highest" bands read it."""
        return tuple(sorted(range(self.n_pairs), key=lambda j: (self.inv_freq[j], j)))

    def to_dict(self) -> dict:
        """The fields as a plain dict (`inv_freq` as a tuple of floats), for JSON."""
        return asdict(self)


@dataclass(frozen=True)
class ModelSpec:
    """The geometry of a model, read by its adapter. `architecture`: the HF model class name;
    `model_type`: the config's model_type. `n_heads` query heads and `n_kv_heads` key/value heads per
    layer (fewer under GQA); `d_model` the hidden size, `d_vocab` the vocabulary size. `max_positions`:
    the config's max_position_embeddings (None if it has none). `causal`: a decoder (False: an encoder).
    `positional`: "rope", "learned" or "none"; `rope` its RopeSpec (None without RoPE). `sliding_window`:
    the window of the layers listed in `sliding_layers` (None: no sliding window). `attn_logit_softcap`:
    the attention-logit softcap (Gemma-2), else None. `qk_norm`: queries and keys are normalised
    (QK-norm). `layer_types`: each layer's attention type from the config ("sliding_attention",
    "full_attention"; empty when the config names none). `layer_ropes`: when layer types rotate with
    different frequencies (Gemma-3: theta 1e4 on sliding layers, 1e6 on full-attention layers), the RopeSpec
    of each layer type, and `rope` is layer 0's; empty when every layer shares `rope`. `rope_of(layer)` is
    the RopeSpec a layer's heads use. `extras`: free-form details (empty unless an adapter fills it)."""

    architecture: str
    model_type: str
    n_layers: int
    n_heads: int
    n_kv_heads: int
    head_dim: int
    d_model: int
    d_vocab: int
    max_positions: int | None
    causal: bool
    positional: str  # "rope", "learned", or "none"
    rope: RopeSpec | None = None
    sliding_window: int | None = None
    sliding_layers: tuple[int, ...] = ()
    attn_logit_softcap: float | None = None
    qk_norm: bool = False
    layer_types: tuple[str, ...] = ()
    layer_ropes: dict = field(default_factory=dict)
    extras: dict = field(default_factory=dict)

    def rope_of(self, layer: int) -> RopeSpec | None:
        """The RopeSpec of `layer`'s attention heads (its layer type's, when layer types differ)."""
        if self.layer_ropes:
            return self.layer_ropes[self.layer_types[layer]]
        return self.rope

    def theta_of(self, layer: int) -> float | None:
        """The RoPE base (rope_theta) of `layer` (None without RoPE)."""
        rope = self.rope_of(layer)
        return rope.theta if rope is not None else None

    @property
    def group_size(self) -> int:
        return self.n_heads // self.n_kv_heads

    @property
    def n_total_heads(self) -> int:
        return self.n_layers * self.n_heads

    def kv_head_of(self, head: int) -> int:
        """Key/value head shared by query head `head` (HF's repeat_kv order: consecutive groups)."""
        return head // self.group_size

    def to_dict(self) -> dict:
        """The fields as a plain dict (`rope` nested as a dict) plus `group_size`, for JSON."""
        d = asdict(self)
        d["group_size"] = self.group_size
        return d
