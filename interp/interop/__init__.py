"""Interop with TransformerLens and nnsight: optional extras, imported lazily (the core needs neither).

transformer_lens.py  the two-way map between interp's Site names and TransformerLens hook names
                     (pure strings; `Site.parse` accepts either spelling), `head_hook`, and the plain
                     HF module tree behind a TransformerBridge (`interp.Model.from_transformer_lens`)
nnsight.py           head ablation / patching / capture written as nnsight code on a LanguageModel
                     (or TransformersModel), usable inside `lm.trace(...)`, locally or with remote=True

`interp.Model(lm)` accepts an nnsight wrapper directly; a TransformerBridge goes through
`interp.Model.from_transformer_lens(bridge)`.
"""

from __future__ import annotations

from .transformer_lens import from_transformer_lens, head_hook, site_hook, to_transformer_lens

__all__ = ["from_transformer_lens", "head_hook", "site_hook", "to_transformer_lens"]
