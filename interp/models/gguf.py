"""GGUF files (llama.cpp's format) as a model source: checked, dequantised once, cached as safetensors.

`converted(path)` returns a folder that `from_pretrained` reads like any checkpoint (config.json,
model.safetensors, tokenizer files) plus `interp-source.json`: the GGUF's name, size and sha256, its
quantisation type(s) (tensor counts per GGML type) and the transformers / gguf / torch versions that
dequantised it. The folder lives in interp's model cache under `models/gguf-<sha256[:16]>`, so a second
load of the same file (wherever it lies) reads safetensors and never dequantises again.

The conversion goes through transformers' own GGUF loader (`from_pretrained(dir, gguf_file=name)`) into a
staging folder beside the final one; it is renamed into place only when every file is written, so an
interrupted conversion leaves no entry that looks complete (staging folders are `.partial-*`, ignored and
swept by the next conversion).

Before anything is dequantised the file is checked: complete (a truncated or damaged file cannot be
parsed), of an architecture transformers' loader reads and interp has an adapter for, and carrying
tokenizer metadata (interp's analyses need the tokenizer). Each refusal is one error saying what to do.
After the load, and before anything is written, every weight must have come from the file
(`check_complete`): a tensor the file lacks would be filled by transformers' random initialisation, a
tensor whose shape contradicts the header would be too, and a tensor the model has no place for means the
header describes another model; each is refused, naming the tensors, and the cache is left as it was.
"""

from __future__ import annotations

import contextlib
import functools
import hashlib
import json
import os
import shutil
import sys
import time
from dataclasses import asdict, dataclass
from pathlib import Path

from interp.errors import InvalidInputError, ModelNotFoundError, UnsupportedModelError
from interp.runtime.provenance import SOURCE_FILE  # the record gguf writes and provenance reads



NOTE_BYTES = 16 << 20  # a conversion says what it is doing (it takes seconds to minutes) from this size on


def cache_root() -> Path:
    """interp's cache: $INTERP_CACHE, else $XDG_CACHE_HOME/interp, else ~/.cache/interp."""
    env = os.environ.get("INTERP_CACHE")
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg).expanduser() if xdg else Path.home() / ".cache") / "interp"


def writable_cache(sub: str) -> Path:
    """The cache subfolder `sub`, created; InvalidInputError when it cannot be written."""
    root = cache_root()
    d = root / sub
    try:
        d.mkdir(parents=True, exist_ok=True)
        probe = d / f".write-test-{os.getpid()}"
        probe.write_bytes(b"")
        probe.unlink()
    except OSError as e:
        raise InvalidInputError(f"interp's model cache {d} cannot be written ({e.strerror or e}): set INTERP_CACHE "
                                f"to a writable folder") from None
    return d


def sha256_of(path: Path, chunk: int = 8 << 20) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        for block in iter(lambda: f.read(chunk), b""):
            h.update(block)
    return h.hexdigest()


def entry_dir(sha256: str) -> Path:
    """Where the converted copy of the GGUF with this sha256 lives (complete or not)."""
    return cache_root() / "models" / f"gguf-{sha256[:16]}"


def cached_entry(sha256: str) -> Path | None:
    """The complete converted copy of the GGUF with this sha256, or None."""
    d = entry_dir(sha256)
    f = d / SOURCE_FILE
    if not f.is_file():
        return None
    try:
        if json.loads(f.read_text(encoding="utf-8")).get("sha256") != sha256:
            return None  # a 16-digit prefix shared by another file: treat as absent (conversion will say so)
    except (OSError, ValueError):
        return None
    return d


@dataclass(frozen=True)
class GGUFInfo:
    """What a GGUF file's header says: `architecture` (llama.cpp's name), the transformers `model_type` it
    loads as, `quant_types` ({GGML type: tensor count}), `file_type` (llama.cpp's overall quantisation code,
    or None), `n_tensors`, `tokenizer` (tokenizer.ggml.model, or None) and `name` (general.name)."""

    path: str
    architecture: str
    model_type: str
    quant_types: dict
    file_type: int | None
    n_tensors: int
    tokenizer: str | None
    name: str | None

    def to_dict(self) -> dict:
        return asdict(self)


def _field(reader, key):
    f = reader.fields.get(key)
    if f is None:
        return None
    try:
        return f.contents()
    except Exception:  # a field of a type this gguf version cannot decode: treat as absent
        return None


def inspect_gguf(path: str | os.PathLike) -> GGUFInfo:
    """Check a GGUF file and read its header (no dequantisation). Raises ModelNotFoundError for a file that
    is missing, truncated or not GGUF, UnsupportedModelError for an architecture transformers or interp
    cannot run, and InvalidInputError for a GGUF without tokenizer metadata."""
    p = Path(path)
    if not p.is_file():
        raise ModelNotFoundError(f"no such GGUF file: {p}")
    try:
        from gguf import GGUFReader
    except ImportError:
        raise ModelNotFoundError("reading .gguf files needs the package gguf: pip install gguf") from None
    try:
        reader = GGUFReader(str(p))
    except Exception as e:  # truncated data cannot be mapped; a wrong magic is a ValueError
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelNotFoundError(f"{p} is not a complete GGUF file ({why}): it is truncated or damaged; download "
                                 f"it again (interp models fetch NAME for the fetchable models)") from None
    arch = _field(reader, "general.architecture")
    if not arch:
        raise ModelNotFoundError(f"{p} has no general.architecture in its header: not a model GGUF")
    quant: dict[str, int] = {}
    blocks: set[int] = set()
    for t in reader.tensors:
        quant[t.tensor_type.name] = quant.get(t.tensor_type.name, 0) + 1
        parts = str(t.name).split(".")
        if len(parts) > 2 and parts[0] == "blk" and parts[1].isdigit():
            blocks.add(int(parts[1]))
    n_blocks = _field(reader, f"{arch}.block_count")
    if isinstance(n_blocks, int) and blocks and max(blocks) >= n_blocks:
        beyond = sorted(b for b in blocks if b >= n_blocks)
        raise ModelNotFoundError(f"{p} is damaged: its header says {n_blocks} layer(s) ({arch}.block_count) but it "
                                 f"holds tensors of layer(s) {', '.join(map(str, beyond[:5]))}"
                                 f"{' ...' if len(beyond) > 5 else ''}; download it again")
    tokenizer = _field(reader, "tokenizer.ggml.model")
    name = _field(reader, "general.name")
    file_type = _field(reader, "general.file_type")
    del reader
    model_type = _model_type_of(p, arch)
    from interp.models.adapters import adapter_class, supported_model_types

    try:
        adapter_class(model_type)
    except UnsupportedModelError:
        raise UnsupportedModelError(f"{p.name}: GGUF architecture {arch!r} loads as transformers model_type "
                                    f"{model_type!r}, which interp has no adapter for; supported: "
                                    f"{', '.join(supported_model_types())}") from None
    if not tokenizer:
        raise InvalidInputError(f"{p.name} carries no tokenizer metadata (tokenizer.ggml.*): interp needs the model's "
                                f"tokenizer; use a GGUF converted with its tokenizer (llama.cpp's convert script "
                                f"writes it)")
    return GGUFInfo(path=str(p), architecture=str(arch), model_type=model_type, quant_types=quant,
                    file_type=int(file_type) if file_type is not None else None, n_tensors=sum(quant.values()),
                    tokenizer=str(tokenizer), name=str(name) if name else None)


def _model_type_of(p: Path, arch: str) -> str:
    """The transformers model_type transformers' GGUF loader builds for architecture `arch`."""
    from transformers.modeling_gguf_pytorch_utils import GGUF_SUPPORTED_ARCHITECTURES, load_gguf_checkpoint

    if arch not in GGUF_SUPPORTED_ARCHITECTURES:
        import transformers

        raise UnsupportedModelError(f"{p.name}: GGUF architecture {arch!r} is not read by transformers "
                                    f"{transformers.__version__}'s GGUF loader; it reads: "
                                    f"{', '.join(sorted(set(GGUF_SUPPORTED_ARCHITECTURES) - {'general', 'tokenizer'}))}")
    try:
        cfg = load_gguf_checkpoint(str(p), return_tensors=False)["config"]
    except Exception as e:
        raise UnsupportedModelError(f"{p.name}: transformers cannot read the GGUF's config ({str(e).splitlines()[0]})"
                                    ) from None
    return cfg.get("model_type", arch)


def find_gguf(folder: str | os.PathLike) -> Path | None:
    """The one .gguf file in `folder` (None when there is none); InvalidInputError when there are several."""
    files = sorted(Path(folder).glob("*.gguf"))
    if len(files) > 1:
        raise InvalidInputError(f"{folder} holds {len(files)} .gguf files ({', '.join(f.name for f in files)}): pass "
                                f"one file with --model FILE.gguf")
    return files[0] if files else None


def converted(path: str | os.PathLike, sha256: str | None = None, quiet: bool = False) -> Path:
    """The cached safetensors copy of the GGUF at `path` (converted now when absent). `sha256`: the file's
    hash when the caller already knows it (it is computed otherwise)."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ModelNotFoundError(f"no such GGUF file: {p}")
    digest = sha256 or sha256_of(p)
    hit = cached_entry(digest)
    if hit is not None:
        return hit
    return convert(p, digest, quiet=quiet)


def convert(p: Path, digest: str, quiet: bool = False) -> Path:
    """Dequantise the GGUF at `p` (sha256 `digest`) with transformers' loader into the cache, atomically."""
    from interp.runtime.provenance import package_versions

    models = writable_cache("models")
    info = inspect_gguf(p)
    final = entry_dir(digest)
    if final.exists():  # a folder without a valid interp-source.json: not ours to trust
        if cached_entry(digest) is not None:
            return final
        raise InvalidInputError(f"{final} exists but is not a complete interp conversion of {p.name}: remove it and "
                                f"load again")
    _sweep_partials(models)
    stage = models / f".partial-{digest[:16]}-{os.getpid()}"
    if stage.exists():
        shutil.rmtree(stage)
    t0 = time.perf_counter()
    says = not quiet and p.stat().st_size >= NOTE_BYTES
    if says:
        print(f"dequantising {p.name} ({p.stat().st_size / 1e6:.0f} MB, {_quant_label(info.quant_types)}) into "
             f"{final} (once: later loads read the safetensors copy)", file=sys.stderr, flush=True)
    try:
        with _conversion_bar(says):
            _write(p, info, digest, stage)
        (stage / SOURCE_FILE).write_text(json.dumps({
            "format": "interp-gguf-conversion", "gguf_file": p.name, "gguf_path": str(p.resolve()),
            "sha256": digest, "bytes": p.stat().st_size, **{k: v for k, v in info.to_dict().items() if k != "path"},
            "quantisation": _quant_label(info.quant_types), "converted_by": package_versions(("transformers", "gguf", "torch")),
            "convert_seconds": round(time.perf_counter() - t0, 1),
            "time_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}, indent=2), encoding="utf-8")
        try:
            os.replace(stage, final)
        except OSError:  # another process finished the same conversion first: keep its copy
            if cached_entry(digest) is None:
                raise
            shutil.rmtree(stage, ignore_errors=True)
    except BaseException:
        shutil.rmtree(stage, ignore_errors=True)
        raise
    return final


def _quant_label(quant: dict) -> str:
    """'Q4_K x27, Q5_0 x81, ... (F32 x109)': the quantised types by count, then the float ones."""
    floats = {"F32", "F16", "BF16", "F64"}
    q = sorted(((n, t) for t, n in quant.items() if t not in floats), reverse=True)
    f = sorted(((n, t) for t, n in quant.items() if t in floats), reverse=True)
    out = ", ".join(f"{t} x{n}" for n, t in q) or "unquantised"
    return out + (f" ({', '.join(f'{t} x{n}' for n, t in f)})" if f else "")


@contextlib.contextmanager
def _conversion_bar(shown: bool):
    """transformers' per-tensor bars ("Converting and de-quantizing", plain tqdm; "Loading weights", its logging
    switch) only when the conversion is announced: a small file converts in under a second, and a refused one
    prints its error alone."""
    import transformers.modeling_gguf_pytorch_utils as gg
    from transformers.utils import logging as hf_logging

    if shown:
        yield
        return
    bar, was = getattr(gg, "tqdm", None), hf_logging.is_progress_bar_enabled()
    if bar is not None:
        gg.tqdm = functools.partial(bar, disable=True)
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if bar is not None:
            gg.tqdm = bar
        if was:
            hf_logging.enable_progress_bar()


def _write(p: Path, info: GGUFInfo, digest: str, stage: Path) -> None:
    """Load the GGUF with transformers (float32 weights) and save model + tokenizer as safetensors in `stage`."""
    import torch
    import transformers as tf

    from interp.models.adapters import adapter_class

    auto = tf.AutoModelForCausalLM if adapter_class(info.model_type).causal else tf.AutoModel
    from transformers.utils import logging as hf_logging

    level = hf_logging.get_verbosity()
    hf_logging.set_verbosity_error()  # transformers' load report: interp says what is wrong itself, below
    try:
        # mismatched sizes are collected (not raised mid-load) so that the refusal can name them all
        hf, report = auto.from_pretrained(str(p.parent), gguf_file=p.name, dtype=torch.float32,
                                          output_loading_info=True, ignore_mismatched_sizes=True)
        check_complete(p.name, info, report)
        tok = tf.AutoTokenizer.from_pretrained(str(p.parent), gguf_file=p.name)
    except (ValueError, KeyError, OSError) as e:
        if isinstance(e, InvalidInputError):
            raise
        raise UnsupportedModelError(f"transformers could not load {p.name}: {_one_line(e)}") from None
    except RuntimeError as e:  # transformers' state-dict errors: tensors that do not fit the model the header builds
        raise InvalidInputError(f"{p.name} is damaged: transformers could not put its tensors into the model its "
                                f"header describes ({_one_line(e)}); download it again") from None
    finally:
        hf_logging.set_verbosity(level)
    packed = sorted({type(m).__name__ for m in hf.modules() if type(m).__name__.lower().startswith("gguf")})
    if packed:  # weights left in GGUF blocks (a kernel path): the copy must be plain float tensors
        raise UnsupportedModelError(f"transformers kept {p.name}'s weights packed ({', '.join(packed)}) instead of "
                                    f"dequantising them; interp needs plain float weights")
    # the weights are plain float32 tensors now: the copy is an ordinary checkpoint, not a GGUF load
    hf.hf_quantizer = None
    cfg = hf.config
    if hasattr(cfg, "quantization_config"):
        del cfg.quantization_config
    cfg.interp_gguf_sha256 = digest
    stage.mkdir(parents=True)
    hf.save_pretrained(stage, safe_serialization=True)
    tok.save_pretrained(stage)


def _one_line(e: BaseException, limit: int = 300) -> str:
    """An exception's message on one line (transformers' state-dict errors span several), at most `limit` chars."""
    text = " ".join(line.strip() for line in str(e).splitlines() if line.strip()) or type(e).__name__
    return text if len(text) <= limit else text[:limit - 3] + "..."


def _names(keys, shown: int = 6) -> str:
    keys = sorted(keys)
    return ", ".join(keys[:shown]) + (f" and {len(keys) - shown} more" if len(keys) > shown else "")


def check_complete(name: str, info: GGUFInfo, report: dict) -> None:
    """Refuse a GGUF load in which the model did not get every weight from the file. `report`: transformers'
    loading info (`output_loading_info=True`). A parameter or persistent buffer the file does not hold
    (missing) or holds in another shape than the header implies (mismatched) is one transformers fills with its
    random initialisation: the result would look like the model and compute something else. Tensors the model
    has no place for (unexpected) are refused too (a header with fewer layers than the file holds, say)."""
    mismatched = sorted(report.get("mismatched_keys") or (), key=lambda t: t[0])
    missing = set(report.get("missing_keys") or ())
    unexpected = set(report.get("unexpected_keys") or ())
    errors = [m for m in report.get("error_msgs") or () if m]
    what = f"the {info.architecture} model its header describes"
    if mismatched:
        shapes = "; ".join(f"{k}: {list(a)} in the file, {list(b)} from the header" for k, a, b in mismatched[:4])
        more = f"; and {len(mismatched) - 4} more" if len(mismatched) > 4 else ""
        also = f" (and it lacks {len(missing)} weight(s))" if missing else ""
        raise InvalidInputError(f"{name} is damaged: tensor shapes contradict its header ({shapes}{more}){also}; "
                                f"download it again")
    if missing:
        raise InvalidInputError(f"{name} is incomplete: it lacks {len(missing)} weight(s) of {what} "
                                f"({_names(missing)}), which transformers would fill with random values; download "
                                f"it again (nothing was written to the cache)")
    if unexpected:
        raise InvalidInputError(f"{name} is damaged: it holds {len(unexpected)} tensor(s) {what} has no place for "
                                f"({_names(unexpected)}); download it again")
    if errors:
        raise InvalidInputError(f"{name} is damaged: {_one_line(errors[0])}")


def _sweep_partials(models: Path, older_than_s: float = 6 * 3600) -> None:
    """Remove staging folders of conversions that died (older than `older_than_s`)."""
    now = time.time()
    for d in models.glob(".partial-*"):
        try:
            if now - d.stat().st_mtime > older_than_s:
                shutil.rmtree(d, ignore_errors=True)
        except OSError:
            pass
