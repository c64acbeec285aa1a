"""Activation store: model activations of many sites, streamed to memory-mappable shards on disk.

    store = interp.store.cache_activations(model, "data.jsonl", "runs/store",
                                           interp.store.CacheConfig(sites=("resid", "attn_out")))
    store = interp.store.open_store("runs/store")
    x = store.get("L3.resid_pre", 0, 4096)          # torch tensor of tokens [0, 4096)
    x = store["L3.resid_pre", 0:4096]               # the same; store["L3.resid_pre"]: every token
    for shard, t in store.iter_shards("L3.resid_pre"): ...
    np.load("runs/store/shards/00000/L3.resid_pre.npy", mmap_mode="r")   # any reader, no interp

Format and guarantees: see format.py (layout), writer.py (crash safety, resume, single writer).
"""

from interp import package_face

_EXPORTS = {
    "SITE_GROUPS": "cache",
    "CacheConfig": "cache",
    "cache_activations": "cache",
    "model_identity": "cache",
    "resolve_sites": "cache",
    "CorpusData": "data",
    "TextData": "data",
    "TextFile": "data",
    "TextList": "data",
    "as_data": "data",
    "StoreCorruptError": "format",
    "StoreError": "format",
    "StoreLockedError": "format",
    "StoreMismatchError": "format",
    "CATEGORIES": "labels",
    "ActivationStore": "reader",
    "open_store": "reader",
    "StoreWriter": "writer",
}

__getattr__, __dir__, __all__ = package_face(__name__, __path__, _EXPORTS)
