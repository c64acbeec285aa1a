"""The exception hierarchy. Every error a user can cause says what was wrong and how to fix it.

The CLI turns any `InterpError` into a one-line message and exit code 2.
"""

from __future__ import annotations


class InterpError(Exception):
    """Base class of every error `interp` raises on purpose."""


class InvalidInputError(InterpError, ValueError):
    """An argument is malformed or out of range (bad head id, position past the context, ...)."""


class ModelNotFoundError(InterpError):
    """Weights or config for a model name could not be found locally nor fetched."""


class UnsupportedModelError(InterpError):
    """The architecture, or one of its config options, is not understood by any adapter."""


class InterpWarning(UserWarning):
    """Something a result depends on that the user should know (the CLI prints it and records it in run.json)."""


class InterventionError(InterpError):
    """An intervention cannot be applied as asked (e.g. mean ablation without reference means)."""


def check_fields(cfg, at_least: dict[str, int] | None = None, finite: tuple[str, ...] = ()) -> None:
    """Refuse a config whose counts are below their minimum ({"batch_size": 1, "draws": 0}) or whose
    floats are nan/inf, naming the field: one check for every analysis config's __post_init__."""
    import math

    name = type(cfg).__name__
    for f, lo in (at_least or {}).items():
        v = getattr(cfg, f)
        if f == "batch_size" and v == "auto":  # resolved by the analysis from the model (models.batching)
            continue
        if v is not None and (isinstance(v, bool) or not isinstance(v, int) or v < lo):
            raise InvalidInputError(f"{name}.{f} must be an integer >= {lo}, got {v!r}")
    for f in finite:
        v = getattr(cfg, f)
        if v is not None and not (isinstance(v, (int, float)) and math.isfinite(v)):
            raise InvalidInputError(f"{name}.{f} must be a finite number, got {v!r}")
