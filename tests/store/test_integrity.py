"""Store integrity: same-size damage to real shards (flipped bits, zeroed bytes, swapped shard
folders, an edited .npy dtype header, a shard entry removed from the manifest) is caught by
`verify()` and refused by a resume, which writes nothing; `--overwrite` repairs it."""

import json
import os
import zlib
from pathlib import Path

import numpy as np
import pytest

from interp.store import (CacheConfig, StoreCorruptError, StoreError, StoreWriter, TextList, cache_activations,
                          open_store)
from interp.store.format import check_shard_files

from tests.helpers import TEXTS

# 3 shards of the same 4 texts: every site file is byte-identical across shards and only seq.npy
# differs, so swapped shard folders keep every size and every shape
CFG = CacheConfig(sites=("resid",), shard_sequences=4, batch_size=2, max_length=16)
SITE = "L1.resid_pre.npy"


def _snapshot(path: Path) -> dict:
    out = {p.relative_to(path).as_posix(): p.read_bytes() for p in sorted((path / "shards").rglob("*.npy"))}
    out["manifest.json"] = (path / "manifest.json").read_bytes()
    return out


def _data_offset(p: Path) -> int:
    with open(p, "rb") as f:
        np.lib.format.read_magic(f)
        np.lib.format.read_array_header_1_0(f)
        return f.tell()


def _patch(p: Path, offset: int, new: bytes) -> None:
    old = p.read_bytes()[offset:offset + len(new)]
    assert old != new, "the damage must change the bytes"
    with open(p, "r+b") as f:
        f.seek(offset)
        f.write(new)


def _edit_manifest(out: Path, fn) -> None:
    m = json.loads((out / "manifest.json").read_text())
    fn(m)
    (out / "manifest.json").write_text(json.dumps(m, indent=1))


# ---- the damage kinds: each keeps every file's size ------------------------------------------
def flip_bit(out: Path):
    p = out / "shards" / "00001" / SITE
    off = _data_offset(p) + (p.stat().st_size - _data_offset(p)) // 2
    _patch(p, off, bytes([p.read_bytes()[off] ^ 0x10]))


def zero_bytes(out: Path):
    p = out / "shards" / "00001" / SITE
    _patch(p, _data_offset(p) + 64, bytes(96))


def swap_folders(out: Path):
    a, b, tmp = out / "shards" / "00000", out / "shards" / "00001", out / "shards" / "swap"
    a.rename(tmp)
    b.rename(a)
    tmp.rename(b)


def change_dtype(out: Path):
    p = out / "shards" / "00001" / SITE
    head = p.read_bytes()[:_data_offset(p)]
    i = head.index(b"'<f4'")
    _patch(p, i, b"'<i4'")  # same header length: the file maps, as int32, with the recorded shape


def drop_first_entry(out: Path):
    _edit_manifest(out, lambda m: m["shards"].pop(0))


def drop_last_entry(out: Path):
    _edit_manifest(out, lambda m: m["shards"].pop())


# (damage, what verify's and the resume's error must say): shard and file for file damage
DAMAGE = [
    pytest.param(flip_bit, r"shard 00001 file L1\.resid_pre\.npy fails its checksum", id="bit-flip"),
    pytest.param(zero_bytes, r"shard 00001 file L1\.resid_pre\.npy fails its checksum", id="zeroed-bytes"),
    pytest.param(swap_folders, r"shard 00000 file seq\.npy fails its checksum", id="swapped-folders"),
    pytest.param(change_dtype, r"shard 00001 file L1\.resid_pre\.npy fails its checksum", id="dtype-header"),
    pytest.param(drop_first_entry, r"manifest\.json is inconsistent: entry 0 is shard '00001'", id="entry-removed"),
    pytest.param(drop_last_entry, r"manifest\.json is inconsistent: .* sequences", id="last-entry-removed"),
]


def _interrupt(out: Path):
    """What a writer killed after committing shards 00000 and 00001 leaves (shard 00002 unlisted)."""
    def keep_two(m):
        m["shards"] = m["shards"][:2]
        m["n_tokens"] = sum(s["n_tokens"] for s in m["shards"])
        m["n_sequences_written"] = sum(s["n_sequences"] for s in m["shards"])
        m["complete"] = False
    _edit_manifest(out, keep_two)


@pytest.fixture(scope="module")
def reference(model, tmp_path_factory):
    out = tmp_path_factory.mktemp("ref") / "s"
    cache_activations(model, TextList(TEXTS), out, CFG)
    return _snapshot(out)


@pytest.mark.parametrize("interrupted", [False, True], ids=["complete", "interrupted"])
@pytest.mark.parametrize("damage, says", DAMAGE)
def test_same_size_damage_is_caught_and_refused(model, tmp_path, reference, damage, says, interrupted):
    out = tmp_path / "s"
    cache_activations(model, TextList(TEXTS), out, CFG)
    if interrupted:
        _interrupt(out)
    open_store(out).verify()  # undamaged: passes
    m0 = json.loads((out / "manifest.json").read_text())
    damage(out)
    # the damage keeps every size (so only the checksum / the shard-list check can catch it)
    for s in m0["shards"]:
        check_shard_files(out, s)
    before = _snapshot(out)
    with pytest.raises(StoreCorruptError, match=says) as e:
        open_store(out).verify()
    assert "--overwrite" in str(e.value)
    # a resume (or a rerun over the complete store) refuses too, and touches nothing
    with pytest.raises(StoreCorruptError, match=says):
        cache_activations(model, TextList(TEXTS), out, CFG)
    with pytest.raises(StoreCorruptError, match=says):
        with StoreWriter(out, {k: m0[k] for k in ("identity", "sites", "meta")}):
            pass
    assert _snapshot(out) == before
    # the fix the message names
    store = cache_activations(model, TextList(TEXTS), out, CFG, overwrite=True)
    store.verify()
    got, want = _snapshot(out), dict(reference)
    assert got.pop("manifest.json") and want.pop("manifest.json") and got == want


def test_checksums_cover_every_byte_of_every_file(model, tmp_path):
    out = tmp_path / "s"
    store = cache_activations(model, TextList(TEXTS), out, CFG)
    store.verify()
    assert len(store.shards) == 3
    for i, s in enumerate(store.shards):
        assert s["index"] == i and s["checksum_algo"] == "crc32"
        assert set(s["checksums"]) == set(s["files"]) and len(s["files"]) == 5 + 3
        for f, want in s["checksums"].items():
            assert want == f"{zlib.crc32((out / 'shards' / s['name'] / f).read_bytes()):08x}", f
    # the site files of the shards are byte-identical (same texts): seq.npy is what tells them apart
    a, b = store.shards[:2]
    assert a["checksums"][SITE] == b["checksums"][SITE] and a["checksums"]["seq.npy"] != b["checksums"]["seq.npy"]


def test_checksum_reads_checks_a_file_on_first_map(model, tmp_path):
    out = tmp_path / "s"
    cache_activations(model, TextList(TEXTS), out, CFG)
    flip_bit(out)
    open_store(out).get("L1.resid_pre")  # default: reads stay lazy, no checksum
    store = open_store(out, checksum_reads=True)
    store.get("L1.resid_pre", 0, store.shards[1]["tok_start"])  # shard 00000 only: fine
    with pytest.raises(StoreCorruptError, match="shard 00001 file L1.resid_pre.npy fails its checksum"):
        store.get("L1.resid_pre")


def test_a_changed_dtype_header_is_refused_on_read_even_without_verify(model, tmp_path):
    out = tmp_path / "s"
    cache_activations(model, TextList(TEXTS), out, CFG)
    change_dtype(out)
    with pytest.raises(StoreCorruptError, match="holds int32, the manifest says float32"):
        open_store(out).get("L1.resid_pre")


def test_a_version_1_store_asks_for_a_rewrite(model, tmp_path):
    out = tmp_path / "s"
    cache_activations(model, TextList(TEXTS), out, CFG)

    def v1(m):
        m["version"] = 1
        for s in m["shards"]:
            del s["checksums"], s["checksum_algo"], s["index"]
    _edit_manifest(out, v1)
    for attempt in (lambda: open_store(out), lambda: cache_activations(model, TextList(TEXTS), out, CFG)):
        with pytest.raises(StoreError, match="version 1 .*checksums.*--overwrite"):
            attempt()
    cache_activations(model, TextList(TEXTS), out, CFG, overwrite=True).verify()


@pytest.mark.parametrize("algo, thread", [("crc32", True), ("crc32", False), ("adler32", True), ("sha256", True),
                                          ("blake2b", False)])
def test_each_checksum_algorithm_round_trips_and_catches_a_flip(tmp_path, algo, thread):
    header = {"identity": {"t": 1}, "sites": {"L1.resid_pre": {"shape": [8], "dtype": "float32"}}, "meta": ["seq"]}
    rng = np.random.default_rng(0)
    # checksums in a second thread (the default) or after each write
    with StoreWriter(tmp_path / "s", header, checksum=algo, checksum_thread=thread) as w:
        for k in range(2):
            sw = w.shard(30, 3)
            for j in range(3):
                sw.append({"L1.resid_pre": rng.standard_normal((10, 8)), "seq": np.full(10, 3 * k + j)})
            sw.commit()
        w.finish()
    store = open_store(tmp_path / "s")
    store.verify()
    assert {s["checksum_algo"] for s in store.shards} == {algo}
    flip_bit(tmp_path / "s")
    with pytest.raises(StoreCorruptError, match=f"L1.resid_pre.npy fails its checksum \\({algo} "):
        store.verify()


def test_a_store_written_without_checksums_is_refused(tmp_path):
    header = {"identity": {"t": 1}, "sites": {"L1.resid_pre": {"shape": [4], "dtype": "float32"}}, "meta": []}
    with StoreWriter(tmp_path / "s", header, checksum=None) as w:  # the bench's switch
        sw = w.shard(2, 1)
        sw.append({"L1.resid_pre": np.ones((2, 4))})
        sw.commit()
    assert os.path.getsize(tmp_path / "s" / "shards" / "00000" / "L1.resid_pre.npy") > 0
    with pytest.raises(StoreCorruptError, match="does not record a checksum"):
        open_store(tmp_path / "s")
