"""The adapter contract: the only code that knows an architecture's module paths and geometry.

Generic code asks the adapter for layers, attention/MLP modules, the output projection and
the `ModelSpec`; it never branches on architecture names.
"""

from __future__ import annotations

from typing import Any

import torch
from torch import nn

from interp.errors import UnsupportedModelError
from interp.models.spec import ModelSpec, RopeSpec

# rope types whose inv_freq the model's rotary module holds (after scaling) and that we checked.
KNOWN_ROPE_TYPES = ("default", "linear", "dynamic", "yarn", "llama3", "longrope")
LAYER_TYPES = ("sliding_attention", "full_attention")  # per-layer attention kinds the hooks honour
VOCAB = 96  # the tiny random configs' vocabulary

# Config keys every adapter accepts at any value: names, ids, dtype and runtime flags, dropouts (models run in
# eval mode), and the geometry and norm constants the adapters read or that transformers' modules apply
# without changing what a site means. A key outside this set and the adapter's own `config_keys` may only
# hold its config class's default (the allow-list of `check_config`).
COMMON_CONFIG_KEYS = frozenset({
    "_name_or_path", "_model_name_or_path", "architectures", "model_type", "transformers_version", "dtype",
    "torch_dtype", "bos_token_id", "eos_token_id", "pad_token_id", "unk_token_id", "sep_token_id",
    "decoder_start_token_id", "use_cache", "return_dict", "output_attentions", "output_hidden_states",
    "tie_word_embeddings", "id2label", "label2id", "problem_type", "initializer_range", "attention_dropout",
    "vocab_size", "hidden_size", "intermediate_size", "num_hidden_layers", "num_attention_heads",
    "num_key_value_heads", "head_dim", "max_position_embeddings", "rms_norm_eps", "layer_norm_eps", "hidden_act",
    "attention_bias", "mlp_bias", "rope_parameters", "sliding_window", "layer_types", "gradient_checkpointing",
})
_MISSING = object()

_REGISTRY: dict[str, type["Adapter"]] = {}  # model_type -> adapter class, filled as adapter modules are imported


def registered() -> dict[str, type["Adapter"]]:
    """{model_type: adapter class} of every adapter defined so far (a subclass registers itself)."""
    return dict(_REGISTRY)


def non_default_keys(config: Any) -> list[str]:
    """The config's keys whose values differ from its config class's defaults (keys the class lacks count)."""
    try:
        base = type(config)().to_dict()
    except Exception:  # a config class that cannot be built without arguments: every key counts
        base = {}
    return sorted(k for k, v in config.to_dict().items() if base.get(k, _MISSING) != v)


class Adapter:
    """Base class. Subclasses set `model_types` and the attribute paths, and may override hooks."""

    model_types: tuple[str, ...] = ()
    family: str = ""
    causal: bool = True
    positional: str = "rope"  # "rope" | "learned" | "none"
    rope_layout: str = "rotate_half"
    # dotted attribute paths from the HF model object (first that exists wins)
    body_paths: tuple[str, ...] = ("model",)
    layers_attr: str = "layers"
    attn_attr: str = "self_attn"
    mlp_attr: str = "mlp"
    o_proj_attr: str = "o_proj"
    v_proj_attr: str = "v_proj"  # separate value projection (fused layouts override v_weight)
    embed_attr: str = "embed_tokens"
    final_norm_attr: str = "norm"
    rotary_attr: str | None = "rotary_emb"
    unembed_attr: str = "lm_head"
    # a norm on each sublayer's output before the residual add (Gemma-2/3, OLMo-2): attn_out / mlp_out are
    # these modules' outputs, the sublayers' real contributions to the residual stream
    attn_out_norm_attr: str | None = None
    mlp_out_norm_attr: str | None = None
    # config keys this family honours at non-default values, beyond COMMON_CONFIG_KEYS (the allow-list)
    config_keys: frozenset[str] = frozenset()
    # the tiny random config: whether the family has a GQA variant (see `tiny_config`)
    tiny_gqa: bool = True

    def __init_subclass__(cls, **kw):
        super().__init_subclass__(**kw)
        for t in cls.__dict__.get("model_types", ()):  # only classes that name their own model types
            _REGISTRY[t] = cls

    def __init__(self, hf: nn.Module):
        self.hf = hf
        self.config = hf.config
        self.check_config(self.config)

    # ---- config validation -------------------------------------------------------------
    @classmethod
    def check_config(cls, config: Any) -> None:
        """Raise UnsupportedModelError naming any config option this adapter cannot honour: a key set away from
        its default that neither COMMON_CONFIG_KEYS nor the adapter's `config_keys` allows, a layer type or a
        rope type the hooks do not know."""
        allowed = COMMON_CONFIG_KEYS | cls.config_keys
        unknown = [k for k in non_default_keys(config) if k not in allowed and not k.startswith("interp_")
                   and not k.endswith(("dropout", "pdrop", "dropout_prob"))]  # dropouts: models run in eval mode
        if unknown:
            raise UnsupportedModelError(
                f"{config.model_type}: config option(s) {', '.join(f'{k}={getattr(config, k, None)!r}' for k in unknown)} "
                f"differ from transformers' defaults and interp's {cls.family or config.model_type} adapter does not "
                f"know that they leave its hooks exact; load the model with those options at their defaults, or, "
                f"if they do not change attention or the residual stream, add them to the adapter's config_keys "
                f"(docs/adding-an-architecture.md)")
        types = getattr(config, "layer_types", None) or ()
        bad = sorted(set(types) - set(LAYER_TYPES))
        if bad:
            raise UnsupportedModelError(f"{config.model_type}: layer_types {bad} are not supported; supported: "
                                        f"{', '.join(LAYER_TYPES)}")
        rp = getattr(config, "rope_parameters", None) or {}
        if cls.positional == "rope":
            rope_type = rp.get("rope_type", "default")
            if rope_type not in KNOWN_ROPE_TYPES:
                raise UnsupportedModelError(
                    f"{config.model_type}: rope_parameters.rope_type={rope_type!r} is not supported; "
                    f"supported: {', '.join(KNOWN_ROPE_TYPES)}"
                )

    # ---- module resolution -------------------------------------------------------------
    def body(self) -> nn.Module:
        for path in self.body_paths:
            obj = self.hf
            try:
                for part in path.split("."):
                    obj = getattr(obj, part) if part else obj
                if hasattr(obj, self.layers_attr) or path == "":
                    return obj
            except AttributeError:
                continue
        raise UnsupportedModelError(
            f"{type(self.hf).__name__}: cannot find the transformer body at any of {self.body_paths}"
        )

    def layers(self) -> list[nn.Module]:
        return list(getattr(self.body(), self.layers_attr))

    def attention(self, layer: int) -> nn.Module:
        """The module whose forward calls the attention interface (receives q, k, v)."""
        return _getpath(self.layers()[layer], self.attn_attr)

    def attn_out_module(self, layer: int) -> nn.Module:
        """Module whose output is the attention sublayer's contribution to the residual (the attention
        module itself, or the norm after it where the architecture has one: Gemma-2/3, OLMo-2)."""
        if self.attn_out_norm_attr is not None:
            return _getpath(self.layers()[layer], self.attn_out_norm_attr)
        return self.attention(layer)

    def mlp_out_module(self, layer: int) -> nn.Module:
        """Module whose output is the MLP sublayer's contribution to the residual (the MLP, or the norm
        after it where the architecture has one)."""
        if self.mlp_out_norm_attr is not None:
            return _getpath(self.layers()[layer], self.mlp_out_norm_attr)
        return self.mlp(layer)

    def mlp(self, layer: int) -> nn.Module:
        return _getpath(self.layers()[layer], self.mlp_attr)

    def o_proj(self, layer: int) -> nn.Module:
        return _getpath(self.attention(layer), self.o_proj_attr)

    def embed(self) -> nn.Module:
        return getattr(self.body(), self.embed_attr)

    def final_norm(self) -> nn.Module | None:
        return getattr(self.body(), self.final_norm_attr, None)

    def unembed(self) -> nn.Module | None:
        return getattr(self.hf, self.unembed_attr, None)

    # ---- geometry ----------------------------------------------------------------------
    def n_heads(self) -> int:
        return int(self.config.num_attention_heads)

    def n_kv_heads(self) -> int:
        return int(getattr(self.config, "num_key_value_heads", None) or self.n_heads())

    def head_dim(self) -> int:
        hd = getattr(self.config, "head_dim", None)
        return int(hd) if hd else int(self.config.hidden_size // self.n_heads())

    def rotary_dims(self) -> int:
        rp = getattr(self.config, "rope_parameters", None) or {}
        return int(self.head_dim() * rp.get("partial_rotary_factor", 1.0))

    def sliding(self) -> tuple[int | None, tuple[int, ...]]:
        window = getattr(self.config, "sliding_window", None)
        types = getattr(self.config, "layer_types", None)
        if window is None:
            return None, ()
        if types is None:
            return int(window), tuple(range(self.config.num_hidden_layers))
        return int(window), tuple(i for i, t in enumerate(types) if t == "sliding_attention")

    def softcap(self) -> float | None:
        return None

    def qk_norm(self) -> bool:
        return False

    @classmethod
    def tiny_config(cls, gqa: bool = False):
        """A tiny random-weight config of this family (3 layers, 4 query heads, d_model 64; 2 KV heads with
        `gqa`), for the parity tests and the `tiny-random-<family>` aliases. None: the family has none."""
        return None

    @staticmethod
    def tiny_common(gqa: bool) -> dict:
        """The geometry every tiny config shares."""
        return dict(vocab_size=VOCAB, hidden_size=64, intermediate_size=128, num_hidden_layers=3,
                    num_attention_heads=4, num_key_value_heads=2 if gqa else 4, max_position_embeddings=256,
                    tie_word_embeddings=False)

    @classmethod
    def default_attn_implementation_for(cls, config: Any) -> str:
        """sdpa unless the architecture needs something sdpa cannot do."""
        return "sdpa"

    def rope(self) -> RopeSpec | None:
        """The RoPE of layer 0's heads, read from the model's rotary module (None without RoPE)."""
        if self.positional != "rope":
            return None
        rotary = getattr(self.body(), self.rotary_attr)
        rp = getattr(self.config, "rope_parameters", None) or {}
        return self._rope_spec(rotary.inv_freq, rp, getattr(rotary, "attention_scaling", 1.0))

    def layer_ropes(self) -> dict[str, RopeSpec]:
        """{layer type: RopeSpec} when layer types rotate with different frequencies; {} when all share one."""
        return {}

    def _rope_spec(self, inv_freq: torch.Tensor, rp: dict, attention_scaling) -> RopeSpec:
        """A RopeSpec from a rotary module's frequencies and the rope parameters they were built from."""
        inv_freq = inv_freq.detach().float().cpu()
        rot = self.rotary_dims()
        if inv_freq.numel() != rot // 2:
            raise UnsupportedModelError(
                f"{self.config.model_type}: rotary module has {inv_freq.numel()} frequencies but the config "
                f"implies {rot // 2} rotary pairs; this rotary variant is not supported"
            )
        rope_type = rp.get("rope_type", "default")
        return RopeSpec(
            theta=float(rp.get("rope_theta", 10000.0)),
            rotary_dims=rot,
            head_dim=self.head_dim(),
            layout=self.rope_layout,
            inv_freq=tuple(float(x) for x in inv_freq),
            scaling=rope_type,
            attention_scaling=float(attention_scaling),
            dynamic=rope_type in ("dynamic", "longrope"),
        )

    def max_positions(self) -> int | None:
        return getattr(self.config, "max_position_embeddings", None)

    def spec(self) -> ModelSpec:
        window, sliding_layers = self.sliding()
        return ModelSpec(
            architecture=type(self.hf).__name__,
            model_type=self.config.model_type,
            n_layers=len(self.layers()),
            n_heads=self.n_heads(),
            n_kv_heads=self.n_kv_heads(),
            head_dim=self.head_dim(),
            d_model=int(self.config.hidden_size),
            d_vocab=int(self.config.vocab_size),
            max_positions=self.max_positions(),
            causal=self.causal,
            positional=self.positional,
            rope=self.rope(),
            sliding_window=window,
            sliding_layers=sliding_layers,
            attn_logit_softcap=self.softcap(),
            qk_norm=self.qk_norm(),
            layer_types=tuple(getattr(self.config, "layer_types", None) or ()),
            layer_ropes=self.layer_ropes(),
        )

    # ---- weights (per head) -------------------------------------------------------------
    def o_weight(self, layer: int) -> torch.Tensor:
        """W_O as [d_model, n_heads * head_dim] (nn.Linear convention)."""
        return self.o_proj(layer).weight

    def v_weight(self, layer: int) -> torch.Tensor:
        """W_V as [n_kv_heads * head_dim, d_model] (nn.Linear convention): rows of kv head g are
        g*head_dim .. (g+1)*head_dim - 1; v = W_V @ x + v_bias on the attention module's input."""
        return getattr(self.attention(layer), self.v_proj_attr).weight

    def v_bias(self, layer: int) -> torch.Tensor | None:
        """The value projection's bias as [n_kv_heads * head_dim], or None."""
        return getattr(self.attention(layer), self.v_proj_attr).bias


def _getpath(obj: Any, path: str) -> Any:
    for part in path.split("."):
        obj = getattr(obj, part)
    return obj
