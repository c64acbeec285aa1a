"""Run a model over a text dataset in batches and stream the activations of many sites to a store."""

from __future__ import annotations

import hashlib
import itertools
import json
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Callable, Sequence

import numpy as np

from interp.errors import InvalidInputError
from interp.sites import CAPTURE_KINDS, Site, SiteKind
from interp.store.data import as_data
from interp.store.format import STORE_DTYPES
from interp.runtime.provenance import model_identity
from interp.store.reader import ActivationStore
from interp.store.writer import StoreWriter

SITE_GROUPS = ("resid",) + CAPTURE_KINDS  # "resid", then every kind that can be cached
META = ("tokens", "positions", "seq", "special", "category")


@dataclass
class CacheConfig:
    """What to cache. `sites`: group names (resid = the residual stream at every depth: each layer's
    resid_pre plus the last layer's resid_post; resid_pre, resid_post, attn_out, mlp_out, head_out, q,
    k, v = that kind at every layer) or explicit sites ('L3.resid_pre', 'L2.head_out.H1'). `layers`
    restricts the groups to those layers. `dtype` is the on-disk dtype."""

    sites: tuple[str, ...] = ("resid",)
    layers: tuple[int, ...] | None = None
    max_length: int = 128
    batch_size: int = 16
    shard_sequences: int = 256
    dtype: str = "float32"
    add_special_tokens: bool = True

    def __post_init__(self):
        if isinstance(self.sites, str):
            self.sites = tuple(s.strip() for s in self.sites.split(",") if s.strip())
        if not self.sites:
            raise InvalidInputError("no sites given; e.g. resid or resid,attn_out or L3.resid_pre")
        if self.dtype not in STORE_DTYPES:
            raise InvalidInputError(f"store dtype {self.dtype!r}; valid: {', '.join(STORE_DTYPES)}")
        for k in ("max_length", "batch_size", "shard_sequences"):
            if getattr(self, k) < 1:
                raise InvalidInputError(f"{k} must be >= 1")
        if self.batch_size > self.shard_sequences:
            self.batch_size = self.shard_sequences


def resolve_sites(model, sites: Sequence[str], layers: Sequence[int] | None = None) -> list[Site]:
    """Site names -> Sites, checked against the model (layer range, kinds the adapter supports)."""
    spec = model.spec
    L = spec.n_layers
    if layers is not None:
        bad = [l for l in layers if not 0 <= l < L]
        if bad:
            raise InvalidInputError(f"layer(s) {bad} out of range: {model.name} has layers 0..{L - 1}")
    use = list(range(L)) if layers is None else sorted(set(layers))
    out: list[Site] = []
    for name in sites:
        name = str(name).strip()
        if name == "resid":
            out += [Site(l, "resid_pre") for l in use]
            if layers is None or L - 1 in use:
                out.append(Site(L - 1, "resid_post"))
        elif name in SITE_GROUPS:
            out += [Site(l, name) for l in use]
        elif name.startswith("L"):
            s = Site.parse(name)
            if not 0 <= s.layer < L:
                raise InvalidInputError(f"site {name}: layer {s.layer} out of range: {model.name} has layers 0..{L - 1}")
            out.append(s)
        else:
            raise InvalidInputError(f"unknown site {name!r}; use a group ({', '.join(SITE_GROUPS)}) or a site such "
                                    f"as L3.resid_pre, L2.head_out.H1")
    for s in out:
        if s.kind not in CAPTURE_KINDS:
            raise InvalidInputError(f"site {s}: kind {s.kind!r} cannot be cached; valid kinds: "
                                    f"{', '.join(CAPTURE_KINDS)}")
        if s.head is not None:
            n = s.site_kind.n_heads(spec)
            if not 0 <= s.head < n:
                raise InvalidInputError(f"site {s}: head out of range 0..{n - 1}")
        if s.kind == "attn_out":
            model.adapter.attn_out_module(s.layer)  # raises for post-LN encoders (BERT)
        if s.kind == "mlp_out":
            model.adapter.mlp_out_module(s.layer)
    return list(dict.fromkeys(out))


def site_shape(spec, s: Site) -> tuple[int, ...]:
    """Per-token shape of a site: (d_model,), (heads, head_dim), or (head_dim,) for one head."""
    return SiteKind(s.kind).token_shape(spec, s.head)


def tokenizer_identity(tok) -> dict:
    vocab = json.dumps(sorted(tok.get_vocab().items()), ensure_ascii=False).encode()
    return {"name": getattr(tok, "name_or_path", None), "class": type(tok).__name__,
            "vocab_sha256": hashlib.sha256(vocab).hexdigest()[:16], "special_ids": sorted(tok.all_special_ids)}


def _tokenize(tok, texts: list[str], cfg: CacheConfig):
    from interp.store.labels import token_categories

    enc = tok(texts, truncation=True, max_length=cfg.max_length, add_special_tokens=cfg.add_special_tokens,
              return_offsets_mapping=True, return_special_tokens_mask=True)
    seqs = []
    for i, text in enumerate(texts):
        ids = np.asarray(enc["input_ids"][i], dtype=np.int64)
        special = np.asarray(enc["special_tokens_mask"][i], dtype=np.uint8)
        seqs.append((ids, special, token_categories(text, enc["offset_mapping"][i])))
    return seqs


def batch_rows(model, sites: list[Site], seqs, seq0: int, dtype: str) -> dict:
    """One forward pass over `seqs` ((tokens, special, category) per sequence, numbered from `seq0`): every array a
    shard holds for them, {site name or metadata name: rows}, padding left out; site rows in `dtype`."""
    import torch

    from interp.hooks.capture import Capture

    batch = model.pad([s[0] for s in seqs])
    rows = {"tokens": np.concatenate([s[0] for s in seqs]).astype(np.int32),
            "positions": np.concatenate([np.arange(len(s[0])) for s in seqs]).astype(np.int32),
            "seq": np.concatenate([np.full(len(s[0]), seq0 + i) for i, s in enumerate(seqs)]).astype(np.int32),
            "special": np.concatenate([s[1] for s in seqs]), "category": np.concatenate([s[2] for s in seqs])}
    if not len(rows["tokens"]):
        return {**rows, **{str(s): np.empty((0,), dtype=dtype) for s in sites}}
    cap = Capture(sites, to_cpu=True)
    with model.intervene(cap):
        model.forward(batch, logits=False)
    keep = batch.attention_mask.bool().cpu()
    tdt = {"float32": torch.float32, "float16": torch.float16}[dtype]
    for s in sites:
        t = cap[s]
        assert t.shape[:2] == tuple(batch.input_ids.shape), (s, t.shape)
        rows[str(s)] = t[keep].to(tdt).numpy()
    return rows


def _write_shard(sw, model, sites, seqs, seq0: int, cfg, progress):
    """Run the model over one shard's sequences, batch by batch, into the ShardWriter `sw` (aborted on error)."""
    try:
        for i in range(0, len(seqs), cfg.batch_size):
            part = seqs[i:i + cfg.batch_size]
            sw.append(batch_rows(model, sites, part, seq0 + i, cfg.dtype))
            if progress is not None:
                progress(len(part))
    except BaseException:
        sw.abort()
        raise
    return sw


def _cache_sharded(model, data, out: Path, header, sites, cfg, overwrite, progress, world, n_total):
    """cache_activations under torchrun: shards are dealt out in rounds of one per rank. Each rank writes its
    shard's files; rank 0, which holds the store's lock and alone writes the manifest, records the round's
    entries in order once gathered. The store is the one a single process writes (same shards, same bytes);
    a resume keeps the recorded shards and redoes the rest."""
    import torch
    import torch.distributed as dist

    if world.main:
        w = StoreWriter(out, header, overwrite=overwrite)
        try:
            w.__enter__()
        finally:
            dist.barrier()  # the others read the manifest rank 0 opened (or failed to open)
    else:
        dist.barrier()
        w = StoreWriter(out, header, follower=True)
        w.__enter__()
    try:
        start = w.next_sequence
        if progress is not None and start and world.main:
            progress(start)
        texts = itertools.islice(data.texts(), start, None)
        seq0 = start
        with torch.no_grad():
            while seq0 < n_total and not w.complete:
                chunks = [c for c in (list(itertools.islice(texts, cfg.shard_sequences)) for _ in range(world.size))
                          if c]
                if not chunks:
                    break
                entry = None
                if world.rank < len(chunks):
                    seqs = _tokenize(model.tokenizer, chunks[world.rank], cfg)
                    s0 = seq0 + sum(len(c) for c in chunks[:world.rank])
                    sw = w.shard(sum(len(x[0]) for x in seqs), len(seqs), ahead=world.rank)
                    entry = _write_shard(sw, model, sites, seqs, s0, cfg, progress).finalize()
                entries: list = [None] * world.size
                dist.all_gather_object(entries, entry)
                for r, e in enumerate(entries[:len(chunks)]):
                    w.record(e)
                    if progress is not None and world.main and r != world.rank:
                        progress(e["n_sequences"])
                seq0 += sum(len(c) for c in chunks)
        if not w.complete:
            w.finish(world_size=world.size)
        dist.barrier()  # every rank's view is complete before any returns the store
    finally:
        w.__exit__(None, None, None)
    return ActivationStore(out)


def cache_activations(model, data=None, out=None, config: CacheConfig | None = None, overwrite: bool = False,
                      progress: Callable[[int], None] | None = None) -> ActivationStore:
    """Write the activations of `config.sites` over `data` to the store at `out`; return it opened.

    data: a TextData (CorpusData, TextFile, TextList), None (the corpus generator), a file path, or a
    list of texts. Resumes an interrupted store with the same identity; refuses a store with other
    settings unless overwrite=True; refuses a store another process is writing.
    `progress(n)` is called with the number of sequences done (including those already on disk).
    """
    import torch

    from interp.runtime import distributed

    cfg = config or CacheConfig()
    if out is None:
        raise InvalidInputError("cache_activations needs an output directory (out=...)")
    if model.tokenizer is None:
        raise InvalidInputError(f"{model.name} has no tokenizer; the store caches text datasets (use a model "
                                f"with tokenizer files)")
    data = as_data(data)
    sites = resolve_sites(model, cfg.sites, cfg.layers)
    dataset = data.fingerprint()
    mid = model_identity(model)
    tid = tokenizer_identity(model.tokenizer)
    site_meta = {str(s): {"shape": list(site_shape(model.spec, s)), "dtype": cfg.dtype} for s in sites}
    identity = {"model_id": mid["id"], "model_dtype": mid["dtype"], "tokenizer": tid["vocab_sha256"],
                "dataset_sha256": dataset["sha256"], "n_sequences": dataset["n_sequences"], "sites": list(site_meta),
                "dtype": cfg.dtype, "max_length": cfg.max_length, "batch_size": cfg.batch_size,
                "shard_sequences": cfg.shard_sequences, "add_special_tokens": cfg.add_special_tokens}
    from interp.runtime.provenance import package_versions
    from interp.store.labels import CATEGORIES

    header = {"identity": identity, "model": mid, "tokenizer": tid, "dataset": dataset, "sites": site_meta,
              "meta": list(META), "categories": list(CATEGORIES), "config": asdict(cfg), "packages": package_versions()}
    n_total = dataset["n_sequences"]
    world = distributed.world()
    if world.size > 1:
        return _cache_sharded(model, data, Path(out), header, sites, cfg, overwrite, progress, world, n_total)
    with StoreWriter(out, header, overwrite=overwrite) as w, torch.no_grad():
        start = w.next_sequence
        if progress is not None and start:
            progress(start)
        texts = itertools.islice(data.texts(), start, None)
        seq0 = start
        while seq0 < n_total and not w.complete:
            chunk = list(itertools.islice(texts, cfg.shard_sequences))
            if not chunk:
                break
            seqs = _tokenize(model.tokenizer, chunk, cfg)
            _write_shard(w.shard(sum(len(s[0]) for s in seqs), len(seqs)), model, sites, seqs, seq0, cfg,
                         progress).commit()
            seq0 += len(chunk)
        if not w.complete:
            w.finish()
    return ActivationStore(Path(out))
