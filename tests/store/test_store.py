"""Activation store: contents equal the model's activations, crash-safe resume (real SIGKILL),
single writer, clear errors on bad input with nothing overwritten."""

import json
import re
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest
import torch

import interp
from tests.helpers import TEXTS, make_checkpoint
from interp.errors import InterpError, InvalidInputError, UnsupportedModelError
from interp.store import (CacheConfig, CorpusData, StoreCorruptError, StoreError, StoreLockedError,
                          StoreMismatchError, TextList, cache_activations, open_store, resolve_sites)

ROOT = Path(__file__).resolve().parents[2]


def _files(path: Path) -> dict:
    return {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted((path / "shards").rglob("*.npy"))}


def test_store_holds_the_models_activations(model, tmp_path):
    cfg = CacheConfig(sites=("resid", "attn_out", "head_out", "k"), shard_sequences=5, batch_size=2, max_length=16)
    store = cache_activations(model, TextList(TEXTS), tmp_path / "s", cfg)
    assert store.complete and len(store.shards) == 3 and store.n_sequences == len(TEXTS)
    assert store.sites[:3] == ["L0.resid_pre", "L1.resid_pre", "L1.resid_post"]
    # each sequence alone, unpadded, through a plain Capture: the store must hold exactly these rows
    sites = ["L0.resid_pre", "L1.resid_post", "L0.attn_out", "L1.head_out", "L0.k"]
    ids = store.meta("tokens")
    seq = store.meta("seq")
    for i, text in enumerate(TEXTS):
        want = model.tokenizer(text, truncation=True, max_length=16)["input_ids"]
        rows = np.flatnonzero(seq == i)
        assert ids[rows].tolist() == want
        assert store.meta("positions")[rows].tolist() == list(range(len(want)))
        cap = interp.Capture(sites)
        with model.intervene(cap):
            model.forward(torch.tensor([want]), logits=False)
        for s in sites:
            got = store.get(s, int(rows[0]), int(rows[-1]) + 1)
            torch.testing.assert_close(got, cap[s][0], rtol=1e-4, atol=1e-5)
    # any reader: plain numpy memmaps with the recorded shapes
    sh = store.shards[1]
    a = np.load(tmp_path / "s" / "shards" / sh["name"] / "L1.head_out.npy", mmap_mode="r")
    assert isinstance(a, np.memmap) and a.shape == (sh["n_tokens"], 4, 8)
    assert np.load(tmp_path / "s" / "shards" / sh["name"] / "L0.k.npy", mmap_mode="r").shape[1:] == (2, 8)
    # a token range across shards equals the concatenation of the per-shard tensors
    full = torch.cat([t for _, t in store.iter_shards("L1.resid_pre")])
    lo, hi = sh["tok_start"] - 3, sh["tok_start"] + 5
    torch.testing.assert_close(store.get("L1.resid_pre", lo, hi), full[lo:hi], rtol=0, atol=0)
    assert store.meta("special")[seq == 0][0] == 1 and store.meta("special")[seq == 0][1:].sum() == 0
    m = json.loads((tmp_path / "s" / "manifest.json").read_text())
    assert m["model"]["id"] and m["dataset"]["sha256"] and m["version"] == 2


def test_float16_and_word_categories(model, tmp_path):
    from interp.store import CATEGORIES

    store = cache_activations(model, TextList([" Alice found 12 red lanterns in Riverton."]), tmp_path / "h",
                              CacheConfig(sites=("L1.resid_pre",), dtype="float16"))
    assert store.get("L1.resid_pre").dtype == torch.float16
    toks = model.tokenizer.convert_ids_to_tokens(store.meta("tokens").tolist())
    cats = [CATEGORIES[c] for c in store.meta("category")]
    lab = dict(zip(toks, cats))
    assert lab["ĠAlice"] == "name" and lab["Ġred"] == "adjective" and lab["."] == "punct"
    assert "number" in cats and "noun" in cats and "place" in cats and "verb" in cats


CHILD = r"""
import os, sys, time, torch
torch.set_num_threads(1)
import interp.store.writer as w
orig = w.ShardWriter.append
def slow_append(self, arrays):
    orig(self, arrays)
    if self.index == 2:
        for f in self.files.values():
            f.flush()
        open(sys.argv[1], "w").close()   # shard 2 is half-written on disk: kill me now
        time.sleep(60)
w.ShardWriter.append = slow_append
from interp.cli import main
main(sys.argv[2:])
"""


def _cache_args(ckpt, out):
    return ["cache", "--model", str(ckpt), "--sites", "resid,attn_out", "--out", str(out), "-n", "20",
            "--shard-size", "4", "--batch-size", "2", "--max-length", "24"]


def test_sigkill_mid_shard_then_resume_equals_uninterrupted(ckpt, model, tmp_path):
    killed, ref = tmp_path / "killed", tmp_path / "ref"
    marker = tmp_path / "marker"
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    proc = subprocess.Popen([sys.executable, "-c", CHILD, str(marker), *_cache_args(ckpt, killed)], env=env,
                            stdout=subprocess.DEVNULL, stderr=subprocess.PIPE)
    deadline = time.time() + 120
    while not marker.exists():
        assert proc.poll() is None, proc.stderr.read().decode()[-2000:]
        assert time.time() < deadline, "child never reached shard 2"
        time.sleep(0.05)
    os.kill(proc.pid, signal.SIGKILL)
    proc.wait()
    # what the killed writer left: two committed shards, a half-written one that is not listed
    assert (killed / "shards" / ".tmp-00002").is_dir()
    partial = open_store(killed)
    assert not partial.complete and [s["name"] for s in partial.shards] == ["00000", "00001"]
    partial.verify()
    # resume in this process (the lock died with the child), and an uninterrupted run elsewhere
    from interp.cli import main

    main(_cache_args(ckpt, killed))
    main(_cache_args(ckpt, ref))
    a, b = open_store(killed), open_store(ref)
    assert a.complete and b.complete and not (killed / "shards" / ".tmp-00002").exists()
    fa, fb = _files(killed), _files(ref)
    assert fa.keys() == fb.keys() and len(fa) == 5 * (3 + 2 + 5)
    for k in fa:
        assert fa[k] == fb[k], k
    strip = ("created_utc", "finished_utc")
    ma, mb = ({k: v for k, v in s.manifest.items() if k not in strip} for s in (a, b))
    assert ma == mb
    # rerunning a complete store is a no-op
    before = _files(killed)
    main(_cache_args(ckpt, killed))
    assert _files(killed) == before


def test_uncommitted_leftovers_are_discarded_on_resume(model, tmp_path):
    cfg = CacheConfig(sites=("resid",), shard_sequences=3, batch_size=3, max_length=16)
    ref = cache_activations(model, TextList(TEXTS), tmp_path / "ref", cfg)
    out = tmp_path / "s"
    cache_activations(model, TextList(TEXTS), out, cfg)
    m = json.loads((out / "manifest.json").read_text())
    # simulate a writer killed after renaming shard 2 but before listing it, plus a stale temp shard
    m["shards"] = m["shards"][:2]
    m["n_tokens"] = sum(s["n_tokens"] for s in m["shards"])
    m["n_sequences_written"] = 6
    m["complete"] = False
    (out / "manifest.json").write_text(json.dumps(m))
    (out / "shards" / ".tmp-00003").mkdir()
    (out / "shards" / ".tmp-00003" / "L0.resid_pre.npy").write_bytes(b"\x93NUMPY garbage")
    (out / "shards" / "00002" / "L1.resid_pre.npy").write_bytes(b"half")  # damaged and not listed
    assert open_store(out).n_sequences == 6
    cache_activations(model, TextList(TEXTS), out, cfg)
    assert _files(out) == _files(ref.path)


def test_second_writer_is_refused(model, tmp_path):
    import os

    from interp.store.format import WriterLock

    out = tmp_path / "s"
    out.mkdir()
    lock = WriterLock(out)
    lock.acquire()
    try:
        with pytest.raises(StoreLockedError, match="another process"):
            cache_activations(model, TextList(TEXTS), out, CacheConfig())
    finally:
        lock.release()
    cache_activations(model, TextList(TEXTS), out, CacheConfig())  # free again
    assert not (out / ".lock").exists()  # a finished writer leaves no lock naming its pid
    lock.acquire()  # and the store is free for the next writer
    assert (out / ".lock").read_text() == str(os.getpid())
    lock.release()


def test_bad_sites_and_layers(model, tmp_path):
    with pytest.raises(InvalidInputError, match="unknown site 'residual'.*resid"):
        resolve_sites(model, ["residual"])
    with pytest.raises(InvalidInputError, match="out of range"):
        resolve_sites(model, ["resid"], layers=[2])
    with pytest.raises(InvalidInputError, match="out of range"):
        resolve_sites(model, ["L5.resid_pre"])
    with pytest.raises(InvalidInputError, match="unknown site kind"):
        resolve_sites(model, ["L0.embed"])
    bert = interp.load_model("tiny-random-bert", device="cpu")
    with pytest.raises(UnsupportedModelError, match="post-LN"):
        resolve_sites(bert, ["attn_out"])
    with pytest.raises(InvalidInputError, match="no such file"):
        cache_activations(model, str(tmp_path / "missing.txt"), tmp_path / "x")
    assert not (tmp_path / "x").exists()


def test_cli_errors_exit_2_and_touch_nothing(ckpt, tmp_path, capsys):
    from interp.cli import main

    out = tmp_path / "cli"
    with pytest.raises(SystemExit) as e:
        main(["cache", "--model", str(ckpt), "--sites", "resid,bogus", "--out", str(out), "-n", "4"])
    assert e.value.code == 2 and "unknown site 'bogus'" in capsys.readouterr().err
    assert not out.exists()
    data = tmp_path / "d.txt"
    data.write_text("\n".join(TEXTS) + "\n")
    main(["cache", "--model", str(ckpt), "--sites", "resid", "--data", str(data), "--out", str(out)])
    assert open_store(out).n_sequences == len(TEXTS)
    before = _files(out)
    with pytest.raises(SystemExit) as e:  # other settings on an existing store: refused, unchanged
        main(["cache", "--model", str(ckpt), "--sites", "resid", "--data", str(data), "--out", str(out),
              "--max-length", "8"])
    assert e.value.code == 2 and "max_length" in capsys.readouterr().err
    assert _files(out) == before
    junk = tmp_path / "junk"
    junk.mkdir()
    (junk / "notes.txt").write_text("mine")
    with pytest.raises(SystemExit) as e:
        main(["cache", "--model", str(ckpt), "--out", str(junk), "-n", "2"])
    assert e.value.code == 2 and sorted(p.name for p in junk.iterdir()) == ["notes.txt"]


def test_truncated_shard_is_a_clear_error(model, tmp_path):
    out = tmp_path / "s"
    cache_activations(model, TextList(TEXTS), out, CacheConfig(shard_sequences=4))
    f = out / "shards" / "00001" / "L1.resid_pre.npy"
    with open(f, "r+b") as fh:
        fh.truncate(f.stat().st_size - 40)
    before = _files(out)
    with pytest.raises(StoreCorruptError, match="00001.*L1.resid_pre.npy.*truncated"):
        open_store(out)
    with pytest.raises(StoreCorruptError, match="truncated"):  # a resume refuses too, and writes nothing
        cache_activations(model, TextList(TEXTS), out, CacheConfig(shard_sequences=4))
    assert _files(out) == before
    assert isinstance(StoreCorruptError("x"), InterpError)
    # the manifest could lie too: the file-level check still catches a size mismatch with the header
    store = open_store(out, verify=False)
    with pytest.raises(StoreCorruptError):
        store.get("L1.resid_pre")


def test_probe_refuses_a_store_of_another_model(ckpt, model, tmp_path):
    from interp.probes import ProbeConfig, run_probes

    other = interp.load_model(str(make_checkpoint(tmp_path / "tiny-b", seed=1)), device="cpu")
    store = cache_activations(other, CorpusData(n_sequences=12), tmp_path / "s", CacheConfig(max_length=16))
    with pytest.raises(StoreMismatchError, match="not of"):
        run_probes(store, ProbeConfig(heads=False), model=model)
    with pytest.raises(StoreError, match="no such store"):
        open_store(tmp_path / "nope")


def test_store_indexing_by_site_and_token_slice(model, tmp_path):
    """store[site] is every token of the site, store[site, a:b] tokens [a, b) (across shards), equal to get();
    metadata names, steps and unknown sites are refused by name."""
    cfg = CacheConfig(sites=("resid",), shard_sequences=2, batch_size=2, max_length=16)
    store = cache_activations(model, TextList(TEXTS), tmp_path / "s", cfg)
    site = "L1.resid_pre"
    full = torch.cat([t for _, t in store.iter_shards(site)])
    assert len(store.shards) > 1 and full.shape[0] == store.n_tokens
    torch.testing.assert_close(store[site], full, rtol=0, atol=0)
    torch.testing.assert_close(store[interp.Site(1, "resid_pre")], full, rtol=0, atol=0)
    a, b = store.shards[1]["tok_start"] - 2, store.shards[1]["tok_start"] + 3  # across a shard boundary
    torch.testing.assert_close(store[site, a:b], full[a:b], rtol=0, atol=0)
    torch.testing.assert_close(store[site, -4:], full[-4:], rtol=0, atol=0)
    assert store[site, 5:2].shape[0] == 0
    for key, msg in (("L9.resid_pre", "is not in store"), ("tokens", "store.meta('tokens')"),
                     ((site, slice(0, 4, 2)), "without a step"), ((site, 3), "must be a slice")):
        with pytest.raises(interp.InvalidInputError, match=re.escape(msg)):
            store[key]
