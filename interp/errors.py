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


class InterventionError(InterpError):
    """An intervention cannot be applied as asked (e.g. mean ablation without reference means)."""
