"""`interp cache` (activations to a memory-mapped store) and `interp probe` (positional vs semantic)."""

from __future__ import annotations

from dataclasses import asdict
from pathlib import Path
from typing import Optional

import typer

from interp.errors import InvalidInputError
from interp.cli.options import DEVICE_MAP, MAX_MEMORY, REVISION
from interp.cli.options import batch_option
from interp.cli.options import parse_ints
from interp.cli.output import progress_bar
from interp.cli.runs import out_dir, write_result
from interp.cli.store_print import _print_probes
from interp.runtime.jsonio import dumps, write_json

MODEL = typer.Option(None, "--model", "-m", help="Alias, checkpoint dir or Hub id with a tokenizer (default: the "
                     "bundled default organism, else minilm-l6).")
DATA = typer.Option(None, "--data", help="A .jsonl file (one object per line, text under --text-key), a text file "
                    "(one text per non-empty line), or 'corpus' (default: interp's corpus generator, held-out seeds).")
N_SEQ = typer.Option(None, "--n-sequences", "-n", min=1, help="Texts to use (corpus default 512; files: all).")
MAX_LEN = typer.Option(128, "--max-length", min=2, help="Tokens per sequence (longer texts are truncated).")
BATCH = batch_option(16, "Sequences")
DEVICE = typer.Option(None, "--device", help="cpu, cuda, cuda:1, ... (default: cuda if available).")
MODEL_DTYPE = typer.Option(None, "--model-dtype", help="auto, float32, bfloat16, float16 (default: float32 on CPU, "
                           "bf16 on CUDA; auto: bf16 where the CPU multiplies it natively). The store keeps float32.")
JSON = typer.Option(False, "--json", help="Print the result JSON on stdout.")


def _load(name: Optional[str], device, dtype, revision=None, device_map=None, max_memory=None):
    from interp.cli.options import load_options
    from interp.cli.runs import record_dtype

    m = load_options(name, device, dtype, revision, device_map, max_memory).load()  # max_memory: --batch-size's budget
    record_dtype(m)
    return m


def _cache_batch(m, batch_size, cfg) -> int:
    """--batch-size of a cache run, planned (`auto`) or checked against --max-memory: `max_length` tokens per
    sequence, the sites' activations in the model's and the store's dtype."""
    from interp.models.memory import SITE_KINDS
    from interp.models.batching import resolve_batch_size as resolve

    kinds = tuple(dict.fromkeys(next((p for p in s.split(".") if p in SITE_KINDS), "resid") for s in cfg.sites))
    return resolve(m, batch_size, "cache", [cfg.max_length], cfg.shard_sequences, sites=kinds, store_dtype=cfg.dtype)


def _data(data: Optional[str], n: Optional[int], text_key: str, seed: int = 0):
    from interp.store import CorpusData, TextFile

    if data in (None, "corpus"):
        return CorpusData(n_sequences=n or 512, seed=seed)
    return TextFile(data, key=text_key, limit=n)


def _cache(model, data, out: Path, cfg, overwrite: bool):
    from interp.store import cache_activations

    total = data.fingerprint()["n_sequences"]
    prog, advance = progress_bar(total, f"caching {model.name}")
    with prog:
        return cache_activations(model, data, out, cfg, overwrite=overwrite, progress=advance)


def cache(model: Optional[str] = MODEL,
          sites: str = typer.Option("resid", "--sites", help="Comma-separated: resid (residual stream at every "
                                    "depth), resid_pre, resid_post, attn_out, mlp_out, head_out, q, k, v, or sites "
                                    "like L3.resid_pre, L2.head_out.H1."),
          data: Optional[str] = DATA,
          out: str = typer.Option(..., "--out", "-o", help="Store directory (created; an interrupted store there "
                                  "is resumed)."),
          layers: Optional[str] = typer.Option(None, "--layers", help="Restrict site groups to these layers."),
          n_sequences: Optional[int] = N_SEQ, max_length: int = MAX_LEN, batch_size: int = BATCH,
          shard_size: int = typer.Option(256, "--shard-size", min=1, help="Sequences per shard (the unit of resume)."),
          dtype: str = typer.Option("float32", "--store-dtype", help="On-disk dtype: float32 or float16."),
          text_key: str = typer.Option("text", "--text-key", help="Field holding the text in a .jsonl file."),
          seed: int = typer.Option(0, "--seed", min=0, max=899, help="Corpus generator seed (0..899)."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace a store written with other settings."),
          device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY, model_dtype: Optional[str] = MODEL_DTYPE, as_json: bool = JSON):
    """Run a model over a dataset and stream activations of many sites to a memory-mapped store on disk."""
    from interp.store import CacheConfig

    cfg = CacheConfig(sites=tuple(s.strip() for s in sites.split(",") if s.strip()),
                      layers=parse_ints(layers, "--layers") if layers else None, max_length=max_length,
                      batch_size=1 if batch_size == "auto" else batch_size, shard_sequences=shard_size, dtype=dtype)
    from interp.runtime import distributed
    from interp.cli.output import echo

    from interp.cli.runs import check_out_location

    check_out_location(out)  # before the model loads: a folder must be possible there
    d = _data(data, n_sequences, text_key, seed)
    distributed.init()  # under torchrun: shards dealt out over the ranks, rank 0 writes the manifest
    m = _load(model, device, model_dtype, revision, device_map, max_memory)
    cfg.batch_size = _cache_batch(m, batch_size, cfg)
    store = _cache(m, d, Path(out), cfg, overwrite)
    summary = {"store": str(store.path), "model": m.name, "sites": store.sites, "n_tokens": store.n_tokens,
               "n_sequences": store.n_sequences, "shards": len(store.shards), "complete": store.complete,
               "world_size": distributed.world().size}
    if as_json:
        echo(dumps(summary))
    else:
        from interp.cli.output import console

        console().print(f"[bold]{m.name}[/]: {store.n_tokens} tokens of {store.n_sequences} sequences, "
                                   f"{len(store.sites)} sites, {len(store.shards)} shards -> {store.path}/")


def probe(model: Optional[str] = MODEL,
          store: Optional[str] = typer.Option(None, "--store", help="An existing store (default: cache the "
                                              "residual stream over --data into OUT/store first)."),
          data: Optional[str] = DATA, n_sequences: Optional[int] = N_SEQ, max_length: int = MAX_LEN,
          batch_size: int = BATCH,
          sites: Optional[str] = typer.Option(None, "--sites", help="Sites to probe (default: the residual stream "
                                              "at every depth)."),
          top_tokens: int = typer.Option(64, "--top-tokens", min=2, help="Classes of the token-identity probe."),
          pos_dims: int = typer.Option(2, "--pos-dims", min=1, help="Dimensions of the positional subspace (PCs of pos[t])."),
          skip_first: int = typer.Option(0, "--skip-first", min=0, help="Leave the first N positions of every "
                                         "sequence out of the probes (special tokens are always left out): for a "
                                         "model without BOS whose first token carries massive activations."),
          heads: bool = typer.Option(True, "--heads/--no-heads", help="Classify heads (needs the model)."),
          text_key: str = typer.Option("text", "--text-key", help="Field holding the text in a .jsonl file."),
          seed: int = typer.Option(0, "--seed", help="Seed of the splits, shuffles and prompts."),
          device: Optional[str] = DEVICE, revision: Optional[str] = REVISION, device_map: Optional[str] = DEVICE_MAP,
          max_memory: Optional[str] = MAX_MEMORY, model_dtype: Optional[str] = MODEL_DTYPE,
          out: Optional[str] = typer.Option(None, "--out", "-o", help="Output directory (default: "
                                            "runs/probe-<model>-<time>)."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run already in --out."),
          as_json: bool = JSON):
    """Positional vs semantic probes per layer, subspace angles, pos[t] decomposition and PCA, head classes."""
    from interp.probes import ProbeConfig, probe_steps, run_probes
    from interp.probes.report import markdown
    from interp.store import CacheConfig, open_store

    pcfg = ProbeConfig(sites=tuple(s.strip() for s in sites.split(",")) if sites else None, top_tokens=top_tokens,
                       pos_dims=pos_dims, seed=seed, heads=heads, skip_first=skip_first)
    ccfg = None
    if store is not None:
        if max_memory is not None and device_map is None:
            raise InvalidInputError("with --store nothing is cached: --max-memory (the batch-size budget) applies "
                                    "with --device-map only")
        if data is not None or n_sequences is not None:
            raise InvalidInputError("--data/--n-sequences describe what to cache; with --store the store's data is used")
        st = open_store(store)
        m = _load(model or st.model.get("name"), device, model_dtype, revision, device_map, max_memory) if (model or heads) else None
        if m is not None:
            st.check_model(m)
        o = out_dir(out, "probe", (m.name if m else st.model.get("name")) or "store", staged=False,
                    overwrite=overwrite)
    else:
        m = _load(model, device, model_dtype, revision, device_map, max_memory)
        d = _data(data, n_sequences, text_key, seed)
        ccfg = CacheConfig(sites=("resid",), max_length=max_length, batch_size=1 if batch_size == "auto" else batch_size)
        ccfg.batch_size = _cache_batch(m, batch_size, ccfg)
        if pcfg.sites:  # checked against what will be cached, before any caching
            from interp.store.cache import resolve_sites

            have = [str(s) for s in resolve_sites(m, ccfg.sites)]
            bad = [s for s in pcfg.sites if s not in have]
            if bad:
                raise InvalidInputError(f"--sites {', '.join(bad)}: probe caches the residual stream "
                                        f"({', '.join(have)}); for other sites `interp cache` them and pass --store")
        o = out_dir(out, "probe", m.name, staged=False, overwrite=overwrite)
        st = _cache(m, d, o / "store", ccfg, overwrite=overwrite)
    prog, advance = progress_bar(probe_steps(st, pcfg), "probes")
    with prog:
        res = run_probes(st, pcfg, model=m if heads else None, progress=advance)
    r = write_result(res, o, "probes", as_json)
    write_json({"probe": asdict(pcfg), "cache": asdict(ccfg) if ccfg else None, "store": str(st.path),
                "model": m.name if m else st.model.get("name")}, o / "config.json")
    (o / "report.md").write_text(markdown(r))
    if not as_json:
        _print_probes(r, o)
