"""On-disk format of an activation store: manifest, shard files, checksums, the writer lock, errors.

Layout of a store directory::

    DIR/manifest.json        the source of truth (replaced atomically after every committed shard)
    DIR/.lock                held (flock) by the one writer, naming its pid; removed when the writer finishes
                             (the kernel releases the flock of a writer that dies)
    DIR/shards/00000/        one folder per committed shard, listed in the manifest
        tokens.npy           [n_tokens] int32: token ids (real tokens only, no padding)
        positions.npy        [n_tokens] int32: position ids the model saw (0 = first real token)
        seq.npy              [n_tokens] int32: global sequence index
        special.npy          [n_tokens] uint8: 1 for the tokenizer's special tokens (BOS, CLS, SEP)
        category.npy         [n_tokens] int8: word category (see labels.py)
        L3.resid_pre.npy     [n_tokens, *shape] one file per site
    DIR/shards/.tmp-00005/   a shard being written; never listed, removed when a writer resumes

Every `.npy` file opens with ``numpy.load(path, mmap_mode="r")``. A shard folder appears under its
final name only after all its files are complete and flushed, and the manifest lists it only after
that, so a killed writer leaves nothing that looks valid but is not.

Manifest (version 2): the header given to the writer (identity, sites, meta, model, dataset, ...),
"n_tokens", "n_sequences_written", "complete", and "shards", one entry per committed shard::

    {"name": "00001", "index": 1, "seq_start": 256, "n_sequences": 256, "tok_start": 20317,
     "n_tokens": 20112, "files": {"L3.resid_pre.npy": 30889088, ...},
     "checksum_algo": "crc32", "checksums": {"L3.resid_pre.npy": "9a3c01fe", ...}}

Checksums: the CRC-32 (zlib.crc32, the same value as the `crc32` tool and Python's
``zlib.crc32(open(f, "rb").read())``, as 8 hex digits) of every byte of each file, the .npy
header included, computed by the writer as it appends each batch (the file is never read back).
They catch damage that keeps a file's size: flipped bits, zeroed ranges, an edited .npy header,
two shard folders swapped (shards differ at least in seq.npy; byte-identical shards are
interchangeable). CRC-32 is an error-detecting code, not a defence against deliberate tampering.
`ActivationStore.verify()` and every writer that opens an existing store (a resume, or a rerun
over a complete store) recompute them: one full read of each committed file. Opening a store checks
only sizes (cheap); `ActivationStore(path, checksum_reads=True)` also checks a file's checksum the
first time it is mapped.

The shard list must be whole: entry i is named shard_name(i) with index i, each entry's seq_start
and tok_start continue the previous entry, and n_tokens / n_sequences_written are the sums over the
entries. A manifest that breaks this (a shard entry removed, say) cannot come from a killed writer
(the manifest is replaced atomically), so it is refused as corrupt by every reader and writer
rather than read as an incomplete store, which a resume would silently "repair".

Every field a reader indexes is checked when the manifest is read (`check_fields`): the manifest is an object,
"identity", "sites", "meta", "shards", "n_tokens", "n_sequences_written" and "complete" are present with their
JSON types, "model", "config", ... have theirs when present, each site has a shape and a dtype and each shard
entry integer positions. A manifest that fails is refused in one line naming the field, not read until a
KeyError.

Version 1 stores (before checksums) are refused with a message to rewrite them (`--overwrite`):
they cannot be verified, and a store is a cache that can be regenerated.
"""

from __future__ import annotations

import hashlib
import json
import os
import zlib
from pathlib import Path

import numpy as np

from interp.errors import InterpError
from interp.runtime.jsonio import json_type

FORMAT = "interp-activation-store"
VERSION = 2
MANIFEST = "manifest.json"
LOCK = ".lock"
SHARDS = "shards"
META_ARRAYS = {"tokens": "int32", "positions": "int32", "seq": "int32", "special": "uint8", "category": "int8"}
STORE_DTYPES = ("float32", "float16")
CHECKSUM_ALGO = "crc32"  # what writers record; readers verify whatever an entry's checksum_algo names
CHECKSUM_ALGOS = ("crc32", "adler32", "sha256", "blake2b")
REWRITE = "Rewrite the store: rerun `interp cache ... --overwrite` (or cache_activations(..., overwrite=True))"


class StoreError(InterpError):
    """A store directory is missing, unreadable or not what the caller expects."""


class StoreCorruptError(StoreError):
    """A committed shard is truncated, missing files or fails its checksum, or the manifest is
    inconsistent: rewrite the store (rerun `interp cache ... --overwrite`)."""


class StoreLockedError(StoreError):
    """Another writer holds the store's lock."""


class StoreMismatchError(StoreError):
    """The store was written with another model, dataset or settings than the caller's."""


def shard_name(index: int) -> str:
    return f"{index:05d}"


def npy_header(dtype: str, shape: tuple[int, ...]) -> bytes:
    """The bytes of a version-1.0 .npy header for a C-ordered array."""
    import io

    buf = io.BytesIO()
    np.lib.format.write_array_header_1_0(buf, {"descr": np.lib.format.dtype_to_descr(np.dtype(dtype)),
                                               "fortran_order": False, "shape": tuple(int(s) for s in shape)})
    return buf.getvalue()


def npy_bytes(dtype: str, shape: tuple[int, ...]) -> int:
    """Size of a complete .npy file (header + data)."""
    return len(npy_header(dtype, shape)) + int(np.prod(shape, dtype=np.int64)) * np.dtype(dtype).itemsize


def read_manifest(path: Path) -> dict:
    f = Path(path) / MANIFEST
    if not Path(path).is_dir():
        raise StoreError(f"{path}: no such store directory; write one with `interp cache --out {path}`")
    if not f.is_file():
        raise StoreError(f"{path} is not an activation store (no {MANIFEST}); write one with `interp cache`")
    try:
        m = json.loads(f.read_text())
    except (json.JSONDecodeError, UnicodeDecodeError, RecursionError) as e:
        why = "nested too deeply" if isinstance(e, RecursionError) else str(e)
        raise StoreCorruptError(f"{f} is not valid JSON ({why}); rerun `interp cache ... --overwrite`") from None
    if not isinstance(m, dict):
        raise StoreCorruptError(f"{f} is not a store manifest: it holds a JSON {json_type(m)}, not an object. "
                                f"{REWRITE}")
    if m.get("format") != FORMAT:
        raise StoreError(f"{f} is not an interp activation store manifest (format={m.get('format')!r})")
    if m.get("version") == 1:
        raise StoreError(f"{f}: store format version 1 (written before shard checksums) cannot be verified and "
                         f"is no longer read; this interp reads version {VERSION}. {REWRITE}")
    if m.get("version") != VERSION:
        raise StoreError(f"{f}: store format version {m.get('version')} is not supported (this interp reads "
                         f"version {VERSION}); rewrite the store with this version of interp")
    check_fields(f, m)
    check_manifest(path, m)
    return m


# the manifest's fields every reader relies on (type), and those a store may lack but must not hold in another shape
REQUIRED = {"identity": dict, "sites": dict, "meta": list, "shards": list, "n_tokens": int, "n_sequences_written": int,
            "complete": bool}
OPTIONAL = {"model": dict, "tokenizer": dict, "dataset": dict, "config": dict, "categories": list, "packages": dict}
SHARD_INTS = ("index", "seq_start", "n_sequences", "tok_start", "n_tokens")




def _is(v, t) -> bool:
    return isinstance(v, t) and not (t is int and isinstance(v, bool))


def check_fields(f: Path, m: dict) -> None:
    """Raise StoreCorruptError naming the first field of manifest `m` (read from `f`) that is missing or of the
    wrong JSON type: every reader indexes these fields, so a manifest edited by hand (or by another program) is
    refused here, in one line, instead of failing as a KeyError or AttributeError deep inside a reader."""
    def bad(what):
        raise StoreCorruptError(f"{f} is not a valid store manifest: {what}. {REWRITE}")

    def want(t):
        return "an integer" if t is int else ("true or false" if t is bool else f"a JSON {json_type(t())}")

    for k, t in REQUIRED.items():
        if k not in m:
            bad(f"it has no {k!r} field")
        if not _is(m[k], t):
            bad(f"{k!r} is a JSON {json_type(m[k])}, not {want(t)}")
    for k, t in OPTIONAL.items():
        if k in m and not _is(m[k], t):
            bad(f"{k!r} is a JSON {json_type(m[k])}, not {want(t)}")
    for k in ("n_tokens", "n_sequences_written"):
        if m[k] < 0:
            bad(f"{k!r} is negative ({m[k]})")
    for name, site in m["sites"].items():
        shape = site.get("shape") if isinstance(site, dict) else None
        if not (isinstance(shape, list) and all(_is(d, int) and d >= 0 for d in shape)):
            bad(f"site {name!r} has no shape (a list of sizes)")
        try:
            if not isinstance(site.get("dtype"), str):
                raise TypeError
            np.dtype(site["dtype"])
        except TypeError:
            bad(f"site {name!r} has dtype {site.get('dtype')!r}, not a numpy dtype")
    unknown = [x for x in m["meta"] if x not in META_ARRAYS]
    if unknown:
        bad(f"'meta' names {unknown[0]!r}, not one of {', '.join(META_ARRAYS)}")
    for i, s in enumerate(m["shards"]):
        if not isinstance(s, dict):
            bad(f"shard entry {i} is a JSON {json_type(s)}, not an object")
        for k in SHARD_INTS:
            if not _is(s.get(k), int) or s[k] < 0:
                bad(f"shard entry {i} has {k} {s.get(k)!r}, not a non-negative integer")


def check_manifest(root: Path, m: dict) -> None:
    """Raise StoreCorruptError unless the shard list is whole: entries 0..n-1 in order, contiguous
    sequence and token ranges, totals equal to the sums over the entries, each entry with checksums."""
    def bad(what):
        raise StoreCorruptError(f"store {root}: {MANIFEST} is inconsistent: {what}. A shard entry was removed "
                                f"or edited; the store cannot be trusted. {REWRITE}")

    shards = m.get("shards")
    if not isinstance(shards, list):
        bad("no shard list")
    seq = tok = 0
    for i, s in enumerate(shards):
        name = s.get("name") if isinstance(s, dict) else None
        if name != shard_name(i) or s.get("index") != i:
            bad(f"entry {i} is shard {name!r} (index {s.get('index') if isinstance(s, dict) else None!r}), "
                f"expected {shard_name(i)!r}: shard indices are not 0..{len(shards) - 1}")
        if s.get("seq_start") != seq or s.get("tok_start") != tok:
            bad(f"shard {name} starts at sequence {s.get('seq_start')} / token {s.get('tok_start')}, but the "
                f"shards before it end at sequence {seq} / token {tok}")
        files, sums = s.get("files"), s.get("checksums")
        if not isinstance(files, dict) or not isinstance(sums, dict) or set(sums) != set(files):
            bad(f"shard {name} does not record a checksum for each of its files")
        if s.get("checksum_algo") not in CHECKSUM_ALGOS:
            bad(f"shard {name} has checksum_algo {s.get('checksum_algo')!r} (known: {', '.join(CHECKSUM_ALGOS)})")
        seq += s.get("n_sequences", 0)
        tok += s.get("n_tokens", 0)
    if m.get("n_sequences_written") != seq or m.get("n_tokens") != tok:
        bad(f"it records {m.get('n_sequences_written')} sequences / {m.get('n_tokens')} tokens, its "
            f"{len(shards)} shard entries hold {seq} / {tok}")


class Checksum:
    """Running checksum of one file, fed its bytes in order; `hexdigest()` at the end."""

    def __init__(self, algo: str = CHECKSUM_ALGO):
        if algo not in CHECKSUM_ALGOS:
            raise StoreError(f"unknown checksum algorithm {algo!r}; known: {', '.join(CHECKSUM_ALGOS)}")
        self.algo = algo
        self._v = 1 if algo == "adler32" else 0
        self._fn = {"crc32": zlib.crc32, "adler32": zlib.adler32}.get(algo)
        self._h = None if self._fn else hashlib.new(algo)

    def update(self, data) -> None:
        if self._fn is not None:
            self._v = self._fn(data, self._v)
        else:
            self._h.update(data)

    def hexdigest(self) -> str:
        return f"{self._v:08x}" if self._fn is not None else self._h.hexdigest()


def file_checksum(path: Path, algo: str = CHECKSUM_ALGO, chunk: int = 8 * 1024 * 1024) -> str:
    """Checksum of a whole file, read once in chunks (memory: one chunk)."""
    c = Checksum(algo)
    buf = bytearray(chunk)
    view = memoryview(buf)
    with open(path, "rb", buffering=0) as f:
        while True:
            n = f.readinto(buf)
            if not n:
                break
            c.update(view[:n])
    return c.hexdigest()


def write_manifest(path: Path, manifest: dict) -> None:
    """Atomic and durable: write a temporary file, fsync, rename over, fsync the directory."""
    path = Path(path)
    tmp = path / (MANIFEST + ".partial")
    with open(tmp, "w") as f:
        json.dump(manifest, f, indent=1)
        f.flush()
        os.fsync(f.fileno())
    os.replace(tmp, path / MANIFEST)
    fsync_dir(path)


def fsync_dir(path: Path) -> None:
    try:
        fd = os.open(path, os.O_RDONLY)
    except OSError:
        return
    try:
        os.fsync(fd)
    except OSError:
        pass
    finally:
        os.close(fd)


def check_shard_files(root: Path, shard: dict) -> None:
    """Raise StoreCorruptError if a committed shard's files are missing or not their recorded size."""
    d = Path(root) / SHARDS / shard["name"]
    for fname, size in shard["files"].items():
        p = d / fname
        if not p.is_file():
            raise StoreCorruptError(f"store {root}: shard {shard['name']} lacks {fname}; the store is damaged. "
                                    f"Rewrite it (`interp cache ... --overwrite`)")
        actual = p.stat().st_size
        if actual != size:
            raise StoreCorruptError(f"store {root}: shard {shard['name']} file {fname} is truncated or damaged "
                                    f"({actual} bytes, manifest records {size}). Rewrite the store "
                                    f"(`interp cache ... --overwrite`)")


def check_file_checksum(root: Path, shard: dict, fname: str) -> None:
    """Raise StoreCorruptError unless file `fname` of a committed shard has its recorded checksum."""
    algo, want = shard["checksum_algo"], shard["checksums"][fname]
    got = file_checksum(Path(root) / SHARDS / shard["name"] / fname, algo)
    if got != want:
        raise StoreCorruptError(f"store {root}: shard {shard['name']} file {fname} fails its checksum ({algo} {got}, "
                                f"the manifest records {want}): its bytes changed after it was written (flipped or "
                                f"zeroed bytes, an edited .npy header, or shard folders swapped or copied). {REWRITE}")


def check_shard_checksums(root: Path, shard: dict) -> None:
    """Sizes first (cheap, clear message for truncation), then every file's checksum (one full read)."""
    check_shard_files(root, shard)
    for fname in shard["files"]:
        check_file_checksum(root, shard, fname)


class WriterLock:
    """An exclusive, non-blocking flock on DIR/.lock, which names the writer's pid. `release` removes the file
    (a finished writer leaves no lock naming it); the kernel releases the flock of a writer that dies."""

    def __init__(self, path: Path):
        self.path = Path(path) / LOCK
        self.fd: int | None = None

    def acquire(self) -> None:
        import fcntl

        while True:
            fd = os.open(self.path, os.O_RDWR | os.O_CREAT, 0o644)
            try:
                fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
            except OSError:
                os.close(fd)
                holder = ""
                try:
                    holder = f" (pid {self.path.read_text().strip()})"
                except OSError:
                    pass
                raise StoreLockedError(f"store {self.path.parent} is being written by another process{holder}; "
                                       f"wait for it to finish or stop it (a killed writer releases the lock)") from None
            if self._current(fd):
                break
            os.close(fd)  # the file was removed by a writer finishing meanwhile: lock the new one
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd

    def _current(self, fd: int) -> bool:
        """Whether `fd` is still the file at DIR/.lock (not one a finishing writer removed after we opened it)."""
        try:
            return os.stat(self.path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            return False

    def release(self) -> None:
        if self.fd is not None:
            import fcntl

            try:
                self.path.unlink()  # while still held: a writer that opened it retries on the new file
            except FileNotFoundError:
                pass
            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
