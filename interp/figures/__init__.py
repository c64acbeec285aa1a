"""Presentation: plotly figures, tidy tables and report pages. Everything here reads result dicts
(a result's `to_dict()` or its JSON file) and never imports the analyses that made them."""

from interp import package_face

_EXPORTS: dict = {}  # its modules are the face: interp.figures.<module>

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
