"""Provenance recorded in every result: model, weights fingerprint, packages, time."""

from __future__ import annotations

import hashlib
import platform
import time
from importlib import metadata
from pathlib import Path

PACKAGES = ("interp", "torch", "transformers", "numpy", "scipy", "scikit-learn", "tokenizers")


def package_versions() -> dict[str, str]:
    out = {}
    for p in PACKAGES:
        try:
            out[p] = metadata.version(p)
        except metadata.PackageNotFoundError:
            out[p] = "not installed"
    return out


def weights_fingerprint(source: str | None, full_hash_limit: int = 64 << 20) -> dict:
    """sha256 of each weights file (files over `full_hash_limit` bytes: of their size and first/last MiB)."""
    if not source or not Path(source).is_dir():
        return {"kind": "not a local directory", "source": source}
    files = sorted(p for p in Path(source).iterdir() if p.suffix in (".safetensors", ".bin"))
    out = {}
    for p in files:
        size = p.stat().st_size
        h = hashlib.sha256()
        with open(p, "rb") as f:
            if size <= full_hash_limit:
                for chunk in iter(lambda: f.read(1 << 20), b""):
                    h.update(chunk)
                out[p.name] = {"sha256": h.hexdigest(), "bytes": size}
            else:
                h.update(str(size).encode())
                h.update(f.read(1 << 20))
                f.seek(size - (1 << 20))
                h.update(f.read())
                out[p.name] = {"sha256_head_tail": h.hexdigest(), "bytes": size}
    return out


def provenance(model) -> dict:
    tok = model.tokenizer
    return {
        "model": model.name,
        "source": model.source,
        "architecture": model.spec.architecture,
        "weights": weights_fingerprint(model.source),
        "tokenizer": getattr(tok, "name_or_path", None) if tok is not None else None,
        "dtype": str(next(model.hf.parameters()).dtype).replace("torch.", ""),
        "device": str(model.device),
        "attn_implementation": model.hf.config._attn_implementation,
        "packages": package_versions(),
        "python": platform.python_version(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }
