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

from interp.store.cache import SITE_GROUPS, CacheConfig, cache_activations, model_identity, resolve_sites
from interp.store.data import CorpusData, TextData, TextFile, TextList, as_data
from interp.store.format import StoreCorruptError, StoreError, StoreLockedError, StoreMismatchError
from interp.store.labels import CATEGORIES
from interp.store.reader import ActivationStore, open_store
from interp.store.writer import StoreWriter

__all__ = ["ActivationStore", "CATEGORIES", "CacheConfig", "CorpusData", "SITE_GROUPS", "StoreCorruptError",
           "StoreError", "StoreLockedError", "StoreMismatchError", "StoreWriter", "TextData", "TextFile", "TextList",
           "as_data", "cache_activations", "model_identity", "open_store", "resolve_sites"]
