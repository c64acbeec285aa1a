"""The adapters' registry: every module of the adapters package is imported here, and each `Adapter` subclass
registered its `model_types` as it was defined; `adapter_for(hf_model)` picks by config.model_type."""

from __future__ import annotations

import importlib
import pkgutil
from pathlib import Path

from interp.errors import UnsupportedModelError
from interp.models.adapters import base
from interp.models.adapters.base import Adapter, registered

_PACKAGE = base.__name__.rpartition(".")[0]
for _m in sorted(m.name for m in pkgutil.iter_modules([str(Path(base.__file__).parent)])):
    if _m not in ("base", "registry"):
        importlib.import_module(f"{_PACKAGE}.{_m}")

ADAPTERS: tuple[type[Adapter], ...] = tuple(dict.fromkeys(registered().values()))
_BY_TYPE = registered()


def supported_model_types() -> list[str]:
    return sorted(_BY_TYPE)


def adapter_class(model_type: str) -> type[Adapter]:
    try:
        return _BY_TYPE[model_type]
    except KeyError:
        raise UnsupportedModelError(
            f"architecture model_type={model_type!r} is not supported; supported: {', '.join(supported_model_types())}"
        ) from None


def adapter_for(hf) -> Adapter:
    return adapter_class(hf.config.model_type)(hf)


def tiny_families() -> dict[str, type[Adapter]]:
    """{family: adapter class} of every adapter with a tiny random config, in file order."""
    return {a.family: a for a in ADAPTERS if a.tiny_config.__func__ is not Adapter.tiny_config.__func__}

