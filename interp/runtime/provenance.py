"""Provenance recorded in every result: model, weights fingerprint, packages, time."""

from __future__ import annotations

import hashlib
import json
import platform
import time
from importlib import metadata
from pathlib import Path

PACKAGES = ("interp", "torch", "transformers", "numpy", "scipy", "scikit-learn", "tokenizers")


def package_versions(packages=PACKAGES) -> dict[str, str]:
    """{package: installed version, or "not installed"} of `packages`."""
    out = {}
    for p in packages:
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


def gguf_source(source: str | None) -> dict | None:
    """For a model read from interp's cached copy of a GGUF file: the GGUF's name, sha256, size, quantisation
    types and the transformers / gguf / torch versions that dequantised it (None for other sources)."""
    rec = source_record(source)
    if rec is None:
        return None
    keep = ("gguf_file", "sha256", "bytes", "architecture", "quantisation", "quant_types", "file_type", "converted_by",
            "time_utc")
    return {k: rec.get(k) for k in keep}


def interp_git_commit() -> str | None:
    """The git commit of the interp checkout this code runs from (None when installed, not a checkout)."""
    import subprocess

    root = Path(__file__).resolve().parents[2]
    if not (root / ".git").exists():
        return None
    try:
        r = subprocess.run(["git", "-C", str(root), "rev-parse", "HEAD"], capture_output=True, text=True, timeout=5)
    except (OSError, subprocess.SubprocessError):
        return None
    sha = r.stdout.strip()
    if r.returncode != 0 or not sha:
        return None
    dirty = subprocess.run(["git", "-C", str(root), "status", "--porcelain", "--untracked-files=no"],
                           capture_output=True, text=True, timeout=5).stdout.strip()
    return sha + ("+dirty" if dirty else "")


def hub_snapshot(source: str | None) -> str | None:
    """The commit hash of a Hub repo's snapshot in the local HF cache (what from_pretrained read)."""
    if not source or Path(source).exists() or source.count("/") != 1:
        return None
    try:
        from huggingface_hub import try_to_load_from_cache

        p = try_to_load_from_cache(source, "config.json")
    except Exception:
        return None
    parts = Path(p).parts if isinstance(p, str) else ()
    return parts[parts.index("snapshots") + 1] if "snapshots" in parts else None


def device_info(device) -> dict:
    """torch and CUDA versions, and the GPU's name when the model is on one."""
    import torch

    out = {"torch": torch.__version__, "cuda": torch.version.cuda}
    if str(device).startswith("cuda") and torch.cuda.is_available():
        out["gpu"] = torch.cuda.get_device_name(torch.device(device))
    return out


def _world_size() -> int:
    from interp.runtime.distributed import world

    return world().size


def provenance(model) -> dict:
    tok = model.tokenizer
    return {
        "model": model.name,
        "source": model.source,
        "architecture": model.spec.architecture,
        "config_source": getattr(model.hf.config, "interp_config_source", None) or model.source,
        "hub_snapshot": hub_snapshot(model.source),
        "weights": weights_fingerprint(model.source),
        "gguf": gguf_source(model.source),
        "interp_git": interp_git_commit(),
        "device_info": device_info(model.device),
        "tokenizer": getattr(tok, "name_or_path", None) if tok is not None else None,
        "dtype": str(next(model.hf.parameters()).dtype).replace("torch.", ""),
        "device": str(model.device),
        "world_size": _world_size(),  # processes that shared the sweep (torchrun); 1 without a launcher
        "attn_implementation": model.hf.config._attn_implementation,
        "packages": package_versions(),
        "python": platform.python_version(),
        "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
    }


SOURCE_FILE = "interp-source.json"  # the record interp.models.gguf writes beside a converted GGUF


def source_record(folder) -> dict | None:
    """The conversion record (interp-source.json) of a cached GGUF conversion, or None for other folders."""

    if not folder:
        return None
    f = Path(folder) / SOURCE_FILE
    if not f.is_file():
        return None
    try:
        return json.loads(f.read_text(encoding="utf-8"))
    except (OSError, ValueError):
        return None


def _sample_hash(hf) -> str:
    """Hash of every parameter's name, shape, dtype and a strided sample of its values (fast on 7B)."""
    import torch

    h = hashlib.sha256()
    for name, p in hf.state_dict().items():
        h.update(f"{name}{tuple(p.shape)}{p.dtype}".encode())
        flat = p.detach().reshape(-1)
        step = max(1, flat.numel() // 65536)
        h.update(flat[::step].to("cpu", torch.float32).numpy().tobytes())
    return h.hexdigest()


def model_identity(model) -> dict:
    """Name, source, architecture and a weights id: the files' fingerprint for a local checkpoint,
    else a hash of sampled parameter values."""
    fp = weights_fingerprint(model.source)
    if fp.get("kind") == "not a local directory" or not fp:
        fp = {"parameter_sample_sha256": _sample_hash(model.hf)}
    wid = hashlib.sha256(json.dumps(fp, sort_keys=True).encode()).hexdigest()[:16]
    spec = model.spec
    out = {"name": model.name, "source": model.source, "architecture": spec.architecture, "id": wid, "weights": fp,
           "n_layers": spec.n_layers, "n_heads": spec.n_heads, "n_kv_heads": spec.n_kv_heads,
           "head_dim": spec.head_dim, "d_model": spec.d_model, "causal": spec.causal, "positional": spec.positional,
           "dtype": str(next(model.hf.parameters()).dtype).replace("torch.", "")}
    return out
