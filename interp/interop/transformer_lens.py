"""interp Site names <-> TransformerLens hook names, and the HF model behind a TransformerBridge.

The map itself lives in interp.sites (pure strings, no transformer_lens import); this module adds
the model-aware spelling and the HF model behind a TransformerBridge (`from_bridge`). Per interp kind, the TransformerLens hook
that records the same tensor (checked against TransformerLens 4.3's TransformerBridge on every
tiny adapter in tests/interop/test_interop.py, <= 1e-5):

    L{l}.resid_pre     blocks.{l}.hook_resid_pre      (bridge alias: blocks.{l}.hook_in)
    L{l}.attn_out      blocks.{l}.hook_attn_out       (module output: blocks.{l}.attn.hook_out)
    L{l}.mlp_out       blocks.{l}.hook_mlp_out        (module output: blocks.{l}.mlp.hook_out)
    L{l}.resid_post    blocks.{l}.hook_resid_post     (bridge alias: blocks.{l}.hook_out)
    L{l}.head_out      blocks.{l}.attn.hook_z         (bridge alias: blocks.{l}.attn.o.hook_in)
    L{l}.q / .k        blocks.{l}.attn.hook_rot_q / hook_rot_k   (post-RoPE, post-QK-norm)
    L{l}.v             blocks.{l}.attn.hook_v
    L{l}.pattern_rows  blocks.{l}.attn.hook_pattern

Both sides use the same layout: [batch, pos, d_model]; per head [batch, pos, head, d_head] (k, v:
key/value heads under GQA); pattern [batch, head, query, key]. A `.H{h}` head of an interp site is
index h on the hook's head axis (`site_hook`, `head_hook`).

The architecture-independent map above is exact for pre-norm RoPE decoders (Llama, Qwen2,
Mistral). Pass `model=` (an interp.Model, ModelSpec, HF model/config or model_type) for the
others:
  * no RoPE (GPT-2, BERT): q/k are TL's hook_q / hook_k (there is no rotation, and no hook_rot_q).
  * Gemma-2, Gemma-3, OLMo-2 (a norm on each sublayer's output): interp's attn_out / mlp_out are the
    sublayers' contributions to the residual, after that norm, as TL's hook_attn_out / hook_mlp_out;
    the bridge's module outputs (blocks.{l}.attn.hook_out / mlp.hook_out) come before it and have no
    interp site there.
  * GPT-NeoX: TransformerLens 4.3's joint-QKV bridge applies RoPE inside its attention and never
    fires hook_rot_q / hook_rot_k (they exist, nothing reaches them); its hook_q / hook_k are
    pre-RoPE. So interp's q and k have no TL hook there: an error says so.
TL's hook_q / hook_k on a RoPE model are the projections before the rotation, which interp has no
site for. TL names with no interp equivalent (hook_resid_mid, hook_attn_scores, hook_result,
ln*/mlp internals, embed/unembed, ...) raise InvalidInputError saying why and what to use instead.
"""

from __future__ import annotations

from interp.errors import InvalidInputError, UnsupportedModelError
from interp.sites import (FROM_TL, TO_TL, HeadLike, Site, TLArch, as_head, looks_like_tl, site_from_tl,  # noqa: F401
                          tl_hook_name)

looks_like_transformer_lens = looks_like_tl


def _arch(model) -> TLArch | None:
    """The TLArch of an interp.Model, ModelSpec, HF model / config, TransformerBridge or model_type string
    (what its adapter says); None for None."""
    if model is None:
        return None
    spec = getattr(model, "spec", model)  # interp.Model -> ModelSpec
    rope = None
    if hasattr(spec, "positional") and hasattr(spec, "model_type"):
        model_type, rope = spec.model_type, spec.positional == "rope"
    elif isinstance(model, str):
        model_type = model
    else:
        inner = getattr(model, "original_model", model)  # a TransformerBridge -> the HF model it wraps
        cfg = getattr(inner, "config", inner)  # HF model -> its config
        model_type = getattr(cfg, "model_type", None)
        if not isinstance(model_type, str):
            raise InvalidInputError(f"model={model!r}: pass an interp.Model, a ModelSpec, an HF model or config, "
                                    "or a model_type string")
    from interp.models.adapters import adapter_class

    ad = adapter_class(model_type)
    return TLArch(model_type, ad.positional == "rope" if rope is None else rope, ad.attn_out_norm_attr is not None)


def _as_site(site) -> Site:
    if isinstance(site, Site):
        return site
    if isinstance(site, str):
        return Site.parse(site)
    raise InvalidInputError(f"bad site {site!r}: pass an interp.Site or a name like 'L3.resid_pre'")


def to_transformer_lens(site: Site | str, model=None) -> str:
    """The TransformerLens hook name that records interp's `site` ('L2.head_out' -> 'blocks.2.attn.hook_z').

    A head (`L2.head_out.H1`) is an index on the hook's head axis, not part of the name: use
    `site_hook` to get both. `model` (interp.Model, ModelSpec, HF model/config, TransformerBridge or
    model_type string) makes the name exact for architectures where the default map differs (see
    the module docstring); raises InvalidInputError where TransformerLens has no hook for the site.
    """
    return tl_hook_name(_as_site(site), _arch(model))


def site_hook(site: Site | str, model=None) -> tuple[str, int | None]:
    """(TransformerLens hook name, head index or None) for interp's `site`: 'L2.head_out.H1' ->
    ('blocks.2.attn.hook_z', 1); the index is on the hook's head axis ([batch, pos, head, d_head],
    or [batch, head, query, key] for hook_pattern). `model` as in `to_transformer_lens`."""
    s = _as_site(site)
    return to_transformer_lens(s, model), s.head


def head_hook(head: HeadLike) -> tuple[str, int]:
    """A query head as a TransformerLens hook point: HeadId(2, 1) (or 'L2H1', (2, 1)) ->
    ('blocks.2.attn.hook_z', 1): the head's output before W_O, the tensor interp's AblateHeads and
    head_out patches edit."""
    h = as_head(head)
    return f"blocks.{h.layer}.attn.hook_z", h.head


def from_transformer_lens(name: str, head: int | None = None, model=None) -> Site:
    """The interp Site recorded by TransformerLens hook `name` ('blocks.2.attn.hook_z' -> L2.head_out).

    `head` selects one head of a per-head hook (-> L2.head_out.H1). Accepts TL's canonical names and
    the bridge's aliases (blocks.{l}.hook_in / hook_out, attn.o.hook_in, attn.hook_out, mlp.hook_out).
    `model` as in `to_transformer_lens` (needed for hook_q / hook_k on models without RoPE, and to
    refuse hook_attn_out / hook_mlp_out where they differ from interp's). Raises InvalidInputError,
    saying why, for names with no interp equivalent.
    """
    if not isinstance(name, str):
        raise InvalidInputError(f"bad TransformerLens hook name {name!r}: pass a string like 'blocks.3.hook_resid_pre'")
    return site_from_tl(name, head, _arch(model))


def from_bridge(bridge, tokenizer=None, name: str | None = None):
    """interp on the HF model a TransformerLens `TransformerBridge` wraps (an interp.Model).

    The bridge rewires that HF model in place (its attention components recompute attention
    themselves, so interp's interception point would never run), so this builds a plain
    transformers module tree whose parameters and buffers are the bridge's own tensors (shared,
    no copy; the bridge keeps working) and runs interp on it with the model's default attention
    implementation: results equal interp's own load of the same weights. `tokenizer` defaults to a
    copy of the bridge's (interp left-pads; the bridge's own stays as it is).

    Raises UnsupportedModelError for a bridge whose weights were processed
    (enable_compatibility_mode / process_weights), offloaded (meta) weights, or a HookedTransformer.
    """
    import copy

    from interp.models.model import Model

    hf = hf_from_bridge(bridge)
    if tokenizer is None and getattr(bridge, "tokenizer", None) is not None:
        tokenizer = copy.deepcopy(bridge.tokenizer)
    return Model(hf, tokenizer=tokenizer, name=name, source="transformer_lens.TransformerBridge")


# ---- the HF model behind a TransformerBridge -----------------------------------------------

def _strip(name: str) -> str:
    return ".".join(p for p in name.split(".") if p != "_original_component")


def hf_from_bridge(bridge):
    """A plain transformers model (own module tree and config) whose parameters and buffers ARE the
    tensors of the HF model `bridge` wraps (shared, not copied: no extra memory; an in-place weight
    edit on either side shows on both).

    Why not the bridged model itself: TransformerBridge replaces the HF model's submodules in place
    with its own components, whose attention recomputes q, k, softmax and the output itself and never
    calls transformers' attention interface, so interp's interception point would never run. The copy
    runs the model's own attention implementation (sdpa; eager for Gemma-2), as interp's own load does.
    Raises UnsupportedModelError for what it cannot reproduce: processed weights
    (enable_compatibility_mode / process_weights fold and center them), offloaded (meta) weights, a
    HookedTransformer, or parameters it cannot find.
    """
    import copy

    import torch

    kind = type(bridge).__name__
    mod = type(bridge).__module__ or ""
    if not mod.startswith("transformer_lens"):
        raise InvalidInputError(f"expected a TransformerLens TransformerBridge, got {kind} from {mod or '?'}")
    hf = getattr(bridge, "original_model", None)
    if not isinstance(hf, torch.nn.Module) or not hasattr(hf, "config"):
        raise UnsupportedModelError(
            f"{kind} holds no transformers model (a HookedTransformer keeps its weights in TransformerLens's own "
            "layout); load the checkpoint with interp.load_model(name), or boot a TransformerBridge "
            "(TransformerBridge.boot_transformers) and pass that")
    if getattr(bridge, "_weights_processed", False):
        raise UnsupportedModelError(
            "this TransformerBridge's weights were processed (enable_compatibility_mode() or process_weights(): "
            "LayerNorm folding / weight centering rewrite them), so they are no longer the HF model's weights; "
            "boot a fresh bridge, or use enable_compatibility_mode(no_processing=True)")
    from interp.models.adapters import adapter_class

    config = copy.deepcopy(hf.config)
    impl = adapter_class(config.model_type).default_attn_implementation_for(config)
    src: dict[str, torch.Tensor] = {}
    for n, t in list(hf.named_parameters(remove_duplicate=False)) + list(hf.named_buffers(remove_duplicate=False)):
        src.setdefault(_strip(n), t)
    with torch.device("meta"):
        plain = type(hf)._from_config(config, attn_implementation=impl)
    slots = [("_parameters", n) for n, _ in plain.named_parameters(remove_duplicate=False)]
    slots += [("_buffers", n) for n, _ in plain.named_buffers(remove_duplicate=False)]
    missing = [n for _, n in slots if n not in src]
    if missing:
        raise UnsupportedModelError(
            f"cannot find {len(missing)} tensor(s) of {type(hf).__name__} inside the bridge (e.g. {missing[0]}); "
            "load the checkpoint with interp.load_model instead")
    for table, n in slots:
        owner, _, leaf = n.rpartition(".")
        t = src[n]
        if t.is_meta:
            raise UnsupportedModelError(
                f"{n} is on the meta device (an offloaded device_map?): interp needs the weights in memory; "
                "load the bridge without CPU/disk offloading")
        getattr(plain.get_submodule(owner) if owner else plain, table)[leaf] = t
    return plain.eval()
