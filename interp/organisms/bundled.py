"""The bundled model organisms: their names and where their checkpoints are."""

from __future__ import annotations

ORGANISM_NAMES = ("tiny-qwen2", "tiny-llama", "tiny-gpt2")


def organism_dir(name: str):
    """Path of a bundled organism's checkpoint directory."""
    from pathlib import Path

    return Path(__file__).resolve().parents[2] / "data" / "organisms" / name
