"""Presentation: plotly figures, tidy tables and report pages. Everything here reads result dicts
(a result's `to_dict()` or its JSON file) and never imports the analyses that made them."""

from interp import submodule_getattr

__getattr__ = submodule_getattr(__name__, __path__)
