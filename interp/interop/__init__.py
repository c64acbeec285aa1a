"""Interop with TransformerLens and nnsight: optional extras, imported lazily (the core needs neither).

transformer_lens.py  the model-aware spelling of sites as TransformerLens hook names (the map itself is
                     interp.sites; `Site.parse` accepts either spelling), `head_hook`, and the plain
                     HF module tree behind a TransformerBridge (`from_bridge`)
nnsight.py           head ablation / patching / capture written as nnsight code on a LanguageModel
                     (or TransformersModel), usable inside `lm.trace(...)`, locally or with remote=True

`interp.Model(lm)` accepts an nnsight wrapper directly; a TransformerBridge goes through
`interp.interop.from_bridge(bridge)` (also `interp.from_bridge`).
"""

from interp import package_face

_EXPORTS = {
    "from_bridge": "transformer_lens",
    "from_transformer_lens": "transformer_lens",
    "head_hook": "transformer_lens",
    "site_hook": "transformer_lens",
    "to_transformer_lens": "transformer_lens",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
