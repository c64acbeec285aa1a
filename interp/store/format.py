"""On-disk format of an activation store: manifest, shard files, the writer lock, errors.

Layout of a store directory::

    DIR/manifest.json        the source of truth (replaced atomically after every committed shard)
    DIR/.lock                held (flock) by the one writer; the kernel releases it if the writer dies
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
"""

from __future__ import annotations

import json
import os
from pathlib import Path

import numpy as np

from ..errors import InterpError

FORMAT = "interp-activation-store"
VERSION = 1
MANIFEST = "manifest.json"
LOCK = ".lock"
SHARDS = "shards"
META_ARRAYS = {"tokens": "int32", "positions": "int32", "seq": "int32", "special": "uint8", "category": "int8"}
STORE_DTYPES = ("float32", "float16")


class StoreError(InterpError):
    """A store directory is missing, unreadable or not what the caller expects."""


class StoreCorruptError(StoreError):
    """A committed shard is truncated or missing files: rewrite it (rerun `interp cache`, --overwrite)."""


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
    except (json.JSONDecodeError, UnicodeDecodeError) as e:
        raise StoreCorruptError(f"{f} is not valid JSON ({e}); rerun `interp cache ... --overwrite`") from None
    if m.get("format") != FORMAT:
        raise StoreError(f"{f} is not an interp activation store manifest (format={m.get('format')!r})")
    if m.get("version") != VERSION:
        raise StoreError(f"{f}: store format version {m.get('version')} is not supported (this interp reads "
                         f"version {VERSION}); rewrite the store with this version of interp")
    return m


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


class WriterLock:
    """An exclusive, non-blocking flock on DIR/.lock. Released by the kernel if the process dies."""

    def __init__(self, path: Path):
        self.path = Path(path) / LOCK
        self.fd: int | None = None

    def acquire(self) -> None:
        import fcntl

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
        os.ftruncate(fd, 0)
        os.write(fd, str(os.getpid()).encode())
        self.fd = fd

    def release(self) -> None:
        if self.fd is not None:
            import fcntl

            fcntl.flock(self.fd, fcntl.LOCK_UN)
            os.close(self.fd)
            self.fd = None
