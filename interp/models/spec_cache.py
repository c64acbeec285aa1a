"""What `interp info` prints, kept between calls: a model's spec dict and where its config was read.

Building a ModelSpec needs the architecture's transformers modules (importing torch, transformers and the
modeling code is most of a call's time), while the spec depends only on the checkpoint's files and the
code that reads them. So the spec of a model on disk (a bundled organism, a fetched real model, a local
checkpoint folder, a GGUF file) is kept in interp's cache (`specs/`) under a key made of

- the model's files: config.json's bytes, and the name, size and modification time of every other file (the
  weights; a GGUF file's own), so a changed or re-fetched checkpoint is read again;
- the code: interp's version and a digest of the source of `interp.models` (the adapters and ModelSpec),
  and the installed torch and transformers versions;
- the mode: the spec of the loaded model, or of the config alone (`--config-only`).

Hub ids and tiny random models are not kept (a Hub revision can move; a random model is built in memory).
A cache that cannot be read or written is passed over: the spec is then built as without it.
"""

from __future__ import annotations

import hashlib
import json
import os
from importlib import metadata
from pathlib import Path

KINDS = ("bundled", "fetched", "local", "encoder", "gguf")  # models whose files are on disk
_SOURCE_DIGEST: str | None = None


def _source_digest() -> str:
    """sha256 over the source files of interp.models (what turns a checkpoint into a spec)."""
    global _SOURCE_DIGEST
    if _SOURCE_DIGEST is None:
        import interp

        h = hashlib.sha256(interp.__version__.encode())
        root = Path(__file__).resolve().parent
        for f in sorted(root.rglob("*.py")):
            h.update(str(f.relative_to(root)).encode())
            h.update(f.read_bytes())
        _SOURCE_DIGEST = h.hexdigest()
    return _SOURCE_DIGEST


def _version(pkg: str) -> str:
    try:
        return metadata.version(pkg)
    except metadata.PackageNotFoundError:
        return "none"


def spec_key(name: str, config_only: bool) -> str | None:
    """The cache key of `name`'s spec (see the module docstring), or None for a model not kept. Raises what
    `resolve` raises for a name that is no model (unknown alias, missing directory)."""
    from interp.models.loading import resolve

    kind, source = resolve(name)
    if kind not in KINDS:
        return None
    src = Path(source)
    files = sorted(p for p in src.rglob("*") if p.is_file()) if src.is_dir() else [src]
    h = hashlib.sha256(json.dumps({"mode": "config" if config_only else "loaded", "kind": kind, "name": name,
                                   "source": str(src.resolve()),
                                   "code": _source_digest(), "torch": _version("torch"),
                                   "transformers": _version("transformers")}).encode())
    for f in files:
        st = f.stat()
        h.update(str(f.relative_to(src) if src.is_dir() else f.name).encode())
        h.update(f.read_bytes() if f.name == "config.json" else f"{st.st_size}:{st.st_mtime_ns}".encode())
    return h.hexdigest()


def _path(key: str) -> Path:
    from interp.models.gguf import cache_root

    return cache_root() / "specs" / f"{key}.json"


def read(key: str | None) -> dict | None:
    """The kept {"spec": ..., "config_source": ...} of `key`, or None."""
    if key is None:
        return None
    try:
        d = json.loads(_path(key).read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None
    return d if isinstance(d, dict) and isinstance(d.get("spec"), dict) else None


def write(key: str | None, entry: dict) -> None:
    """Keep `entry` under `key` (written to a temporary file, then renamed: a reader never sees half of it)."""
    if key is None:
        return
    p = _path(key)
    try:
        text = json.dumps(entry, allow_nan=False)  # a spec strict JSON cannot hold exactly is not kept
        p.parent.mkdir(parents=True, exist_ok=True)
        tmp = p.with_name(f".{p.name}.{os.getpid()}.tmp")
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, p)
    except (OSError, ValueError, TypeError):
        pass


def spec_info(name: str, config_only: bool = False, with_source: bool = False) -> dict:
    """{"spec": ModelSpec.to_dict(), "config_source": where the config was read (with_source; else absent when
    not kept)}: from the cache when this model's files and interp's code are unchanged, else built (the loaded
    model's spec, or the config's alone with `config_only`) and kept."""
    key = spec_key(name, config_only)
    hit = read(key)
    if hit is not None and (not with_source or hit.get("config_source") is not None):
        return hit
    from interp.models.loading import config_source, load_model, spec_from_config

    spec = spec_from_config(name) if config_only else load_model(name, device="cpu").spec
    entry = {"spec": spec.to_dict()}
    if with_source or key is not None:
        entry["config_source"] = config_source(name)
    write(key, entry)
    return entry
