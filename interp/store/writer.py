"""Crash-safe, resumable, single-writer shard writer (model-agnostic: it writes given arrays).

A shard is written into `shards/.tmp-NNNNN/` file by file (an .npy header with the final shape,
then the rows appended batch by batch, so memory stays at one batch), flushed and fsynced, renamed
to `shards/NNNNN/`, and only then added to the manifest, which is replaced atomically. Each file's
checksum is updated with every batch as it is appended (never read back) and recorded in the
shard's manifest entry. Opening a writer on an existing store resumes it when its `identity`
matches and refuses otherwise; before resuming it checks the manifest's shard list and every
committed file's size and checksum (one read of the store), and refuses a damaged store.
"""

from __future__ import annotations

import json
import os
import shutil
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

import numpy as np

from interp.store.format import (CHECKSUM_ALGO, FORMAT, MANIFEST, META_ARRAYS, SHARDS, VERSION, Checksum, StoreCorruptError,
                     StoreError, StoreMismatchError, WriterLock, check_shard_checksums, fsync_dir, npy_bytes,
                     npy_header, read_manifest, shard_name, write_manifest)

def _normalise(obj):
    return json.loads(json.dumps(obj))


def _diff(a: dict, b: dict) -> list[str]:
    keys = sorted(set(a) | set(b))
    return [f"{k}: store has {a.get(k)!r}, this run has {b.get(k)!r}" for k in keys if a.get(k) != b.get(k)]


class StoreWriter:
    """Context manager writing shards of a store at `path`.

    header: "identity" (what must be equal to resume: model id, dataset hash, sites, dtype, ...),
    "sites" ({name: {"shape": per-token shape, "dtype": "float32"|"float16"}}), "meta" (names of
    per-token metadata arrays, from META_ARRAYS) and any descriptive fields (model, dataset, config).
    overwrite=True discards an existing store at `path` (only a store: other non-empty folders are
    always refused).
    The checksum knobs are for measuring what the checksum costs (bench/store.py): `checksum` is the algorithm
    new shards are checksummed with (format.CHECKSUM_ALGO, CRC-32, by default; another one `Checksum` knows, or
    None for no checksums, a store every reader refuses); `checksum_thread=False` computes the checksums in the
    writing thread after each write instead of in a second thread that overlaps the writes.
    """

    def __init__(self, path, header: dict, overwrite: bool = False, follower: bool = False,
                 checksum: str | None = CHECKSUM_ALGO, checksum_thread: bool = True):
        self.path = Path(path)
        self.header = _normalise(header)
        self.overwrite = overwrite
        self.checksum = checksum
        self.checksum_thread = checksum_thread
        # follower: another rank of a sharded cache. It writes shard files (`ShardWriter.finalize`) but holds
        # no lock and never writes the manifest: rank 0's writer opened the store and commits every entry.
        self.follower = follower
        self.lock = WriterLock(self.path)
        self.manifest: dict | None = None
        self._hasher: ThreadPoolExecutor | None = None  # one thread: checksums overlap the writes
        for m in self.header["meta"]:
            if m not in META_ARRAYS:
                raise StoreError(f"unknown metadata array {m!r}; known: {', '.join(META_ARRAYS)}")

    # ---- opening -------------------------------------------------------------------------
    def __enter__(self) -> "StoreWriter":
        p = self.path
        if p.exists() and not p.is_dir():
            raise StoreError(f"{p} exists and is not a directory")
        if p.is_dir() and not (p / MANIFEST).is_file():
            stray = [x.name for x in p.iterdir() if x.name not in (".lock", SHARDS, MANIFEST + ".partial")]
            if stray:
                raise StoreError(f"{p} is not empty and holds no activation store ({', '.join(sorted(stray)[:5])}"
                                 f"{' ...' if len(stray) > 5 else ''}); choose an empty or new directory")
        if self.follower:
            self.manifest = read_manifest(p)
            diff = _diff(self.manifest.get("identity", {}), self.header["identity"])
            if diff:
                raise StoreMismatchError(f"{p}: the store rank 0 opened has other settings: " + "; ".join(diff))
            if self.checksum_thread:
                self._hasher = ThreadPoolExecutor(1, thread_name_prefix="interp-store-checksum")
            return self
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise StoreError(f"cannot create the store folder {p} ({e.strerror or e}); choose a writable "
                             "location") from None
        self.lock.acquire()
        try:
            self._open_existing()
        except BaseException:
            self.lock.release()
            raise
        if self.checksum_thread:
            self._hasher = ThreadPoolExecutor(1, thread_name_prefix="interp-store-checksum")
        return self

    def _open_existing(self):
        p = self.path
        if (p / MANIFEST).is_file() and self.overwrite:
            shutil.rmtree(p / SHARDS, ignore_errors=True)
            (p / MANIFEST).unlink()
        elif (p / MANIFEST).is_file():
            old = read_manifest(p)
            diff = _diff(old.get("identity", {}), self.header["identity"])
            if diff:
                raise StoreMismatchError(f"{p} holds a store written with other settings; pass --overwrite to "
                                         f"replace it or choose another directory. Differences: " + "; ".join(diff))
            for s in old["shards"]:  # damage must not be extended: sizes, then checksums (one read)
                check_shard_checksums(p, s)
            self.manifest = old
        (p / SHARDS).mkdir(exist_ok=True)
        listed = {s["name"] for s in (self.manifest or {}).get("shards", [])}
        for d in (p / SHARDS).iterdir():  # half-written or renamed-but-uncommitted shards of a killed writer
            if d.name not in listed:
                shutil.rmtree(d) if d.is_dir() else d.unlink()
        if self.manifest is None:
            self.manifest = {"format": FORMAT, "version": VERSION, **self.header, "shards": [], "n_tokens": 0,
                             "n_sequences_written": 0, "complete": False,
                             "created_utc": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())}
            write_manifest(p, self.manifest)

    def __exit__(self, *exc):
        if self._hasher is not None:
            self._hasher.shutdown(wait=True)
            self._hasher = None
        if not self.follower:
            self.lock.release()

    # ---- state -----------------------------------------------------------------------------
    @property
    def next_sequence(self) -> int:
        return self.manifest["n_sequences_written"]

    @property
    def next_token(self) -> int:
        return self.manifest["n_tokens"]

    @property
    def complete(self) -> bool:
        return bool(self.manifest["complete"])

    def shard(self, n_tokens: int, n_sequences: int, ahead: int = 0) -> "ShardWriter":
        """The writer of the next shard, or (`ahead` > 0, sharded caches) of the one `ahead` places after it."""
        if self.lock.fd is None and not self.follower:
            raise StoreError("use StoreWriter as a context manager (with StoreWriter(...) as w:)")
        if self.complete:
            raise StoreError(f"store {self.path} is complete; nothing more can be added")
        return ShardWriter(self, len(self.manifest["shards"]) + ahead, n_tokens, n_sequences)

    def finish(self, **extra) -> dict:
        self.manifest.update(extra)
        self.manifest["complete"] = True
        self.manifest["finished_utc"] = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())
        if not self.follower:
            write_manifest(self.path, self.manifest)
        return self.manifest

    def record(self, entry: dict) -> dict:
        """Add a finalized shard (`ShardWriter.finalize`, on this or another rank) to the manifest, in order:
        its sequence and token offsets are the store's so far."""
        if entry["index"] != len(self.manifest["shards"]):
            raise StoreError(f"shard {entry['name']} recorded out of order (the store has "
                             f"{len(self.manifest['shards'])} shards)")
        entry = {**entry, "seq_start": self.next_sequence, "tok_start": self.next_token}
        self._commit(entry)
        return entry

    def _commit(self, entry: dict) -> None:
        m = self.manifest
        m["shards"].append(entry)
        m["n_tokens"] += entry["n_tokens"]
        m["n_sequences_written"] += entry["n_sequences"]
        if not self.follower:
            write_manifest(self.path, m)


class ShardWriter:
    """Files of one shard in a temporary folder; `append` rows, then `commit` (or `abort`)."""

    def __init__(self, writer: StoreWriter, index: int, n_tokens: int, n_sequences: int):
        self.writer = writer
        self.index = index
        self.n_tokens = int(n_tokens)
        self.n_sequences = int(n_sequences)
        self.name = shard_name(index)
        root = writer.path / SHARDS
        self.tmp = root / f".tmp-{self.name}"
        if self.tmp.exists():
            shutil.rmtree(self.tmp)
        self.tmp.mkdir()
        self.layout = {m: ((), META_ARRAYS[m]) for m in writer.header["meta"]}
        self.layout.update({s: (tuple(v["shape"]), v["dtype"]) for s, v in writer.header["sites"].items()})
        self.algo = writer.checksum
        self.files = {}
        self.sums: dict[str, Checksum] = {}
        for name, (shape, dtype) in self.layout.items():
            f = open(self.tmp / f"{name}.npy", "wb")
            head = npy_header(dtype, (self.n_tokens, *shape))
            f.write(head)
            self.files[name] = f
            if self.algo:
                self.sums[name] = Checksum(self.algo)
                self.sums[name].update(head)
        self.filled = 0

    def append(self, arrays: dict) -> None:
        missing = set(self.layout) - set(arrays)
        if missing:
            raise StoreError(f"shard rows lack {', '.join(sorted(missing))}")
        n = None
        for name, (shape, dtype) in self.layout.items():
            a = arrays[name]
            if n is None:
                n = len(a)
            if tuple(a.shape) != (n, *shape):
                raise StoreError(f"{name}: rows of shape {tuple(a.shape)}, expected ({n}, {', '.join(map(str, shape))})")
        if self.filled + n > self.n_tokens:
            raise StoreError(f"shard {self.name}: {self.filled + n} rows appended, {self.n_tokens} declared")
        bufs = [(name, np.ascontiguousarray(arrays[name], dtype=dtype).data)
                for name, (_, dtype) in self.layout.items()]
        # the checksums of these bytes, in a second thread while this one writes them (zlib.crc32
        # and file writes release the GIL); done before returning, so the caller may reuse its arrays
        pool = self.writer._hasher
        job = pool.submit(self._checksum, bufs) if self.algo and pool is not None else None
        try:
            for name, buf in bufs:
                self.files[name].write(buf)
        finally:
            if job is not None:
                job.result()
        if self.algo and pool is None:
            self._checksum(bufs)
        self.filled += n

    def _checksum(self, bufs) -> None:
        for name, buf in bufs:
            self.sums[name].update(buf)

    def commit(self, **info) -> dict:
        """Finalize the shard's files and add it to the manifest (the next shard of the store)."""
        return self.writer.record(self.finalize(**info))

    def finalize(self, **info) -> dict:
        """Flush, fsync and rename the shard's files into place and return its manifest entry (offsets left
        to `StoreWriter.record`). Until recorded, a shard is not part of the store (a resume removes it)."""
        if self.filled != self.n_tokens:
            self.abort()
            raise StoreError(f"shard {self.name}: {self.filled} rows written, {self.n_tokens} declared")
        sizes = {}
        for name, f in self.files.items():
            f.flush()
            os.fsync(f.fileno())
            f.close()
            shape, dtype = self.layout[name]
            sizes[f"{name}.npy"] = os.path.getsize(self.tmp / f"{name}.npy")
            if sizes[f"{name}.npy"] != npy_bytes(dtype, (self.n_tokens, *shape)):
                raise StoreCorruptError(f"shard {self.name}: {name}.npy has {sizes[f'{name}.npy']} bytes after writing")
        final = self.tmp.parent / self.name
        os.rename(self.tmp, final)
        fsync_dir(self.tmp.parent)
        entry = {"name": self.name, "index": self.index, "seq_start": None, "n_sequences": self.n_sequences,
                 "tok_start": None, "n_tokens": self.n_tokens, "files": sizes, **info}
        if self.algo:
            entry["checksum_algo"] = self.algo
            entry["checksums"] = {f"{name}.npy": c.hexdigest() for name, c in self.sums.items()}
        return entry

    def abort(self) -> None:
        for f in self.files.values():
            if not f.closed:
                f.close()
        shutil.rmtree(self.tmp, ignore_errors=True)
