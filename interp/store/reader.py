"""Reading a store lazily: numpy memmaps or torch tensors per site, by shard or by token range."""

from __future__ import annotations

from pathlib import Path
from typing import Iterator

import numpy as np

from interp.errors import InvalidInputError
from interp.store.format import (META_ARRAYS, REWRITE, SHARDS, StoreCorruptError, StoreMismatchError, check_file_checksum,
                     check_shard_checksums, check_shard_files, read_manifest)


class ActivationStore:
    """A store written by `interp cache` / `cache_activations`; nothing is read until asked.

    Rows are tokens (real tokens only, sequences in order, each sequence's tokens in order).
    `store.get("L3.resid_pre", start, stop)` (or `store["L3.resid_pre", start:stop]`; `store["L3.resid_pre"]`:
    every token) -> torch tensor of that token range;
    `store.iter_shards(site)` -> (shard entry, tensor) per shard, the tensor a copy-on-write view of
    the file (no RAM until touched); `store.numpy(site, shard)` -> read-only np.memmap;
    `store.meta("positions")` -> per-token metadata over all shards (small integer arrays).
    A store still being written (or interrupted) opens with `complete == False` and its committed
    shards only.

    Checks (StoreCorruptError): opening checks the manifest's shard list (always) and, with
    verify=True, that every file exists with its recorded size (no file is read). `verify()` also
    recomputes every file's checksum (one full read). checksum_reads=True checks each file's
    checksum the first time it is mapped (a full read of that file, once per store object; off by
    default so that reading a few rows stays lazy).
    """

    def __init__(self, path, verify: bool = True, checksum_reads: bool = False):
        self.path = Path(path)
        self.manifest = read_manifest(self.path)
        if verify:
            for s in self.shards:
                check_shard_files(self.path, s)
        self.checksum_reads = checksum_reads
        self._checked: set[tuple[str, str]] = set()
        self._meta_cache: dict[str, np.ndarray] = {}

    def __repr__(self):
        return (f"ActivationStore({str(self.path)!r}, model={self.model.get('name')!r}, sites={len(self.sites)}, "
                f"tokens={self.n_tokens}, shards={len(self.shards)}{'' if self.complete else ', incomplete'})")

    # ---- description -------------------------------------------------------------------------
    @property
    def shards(self) -> list[dict]:
        return self.manifest["shards"]

    @property
    def sites(self) -> list[str]:
        return list(self.manifest["sites"])

    @property
    def meta_names(self) -> list[str]:
        return list(self.manifest["meta"])

    @property
    def n_tokens(self) -> int:
        return self.manifest["n_tokens"]

    @property
    def n_sequences(self) -> int:
        return self.manifest["n_sequences_written"]

    @property
    def complete(self) -> bool:
        return bool(self.manifest["complete"])

    @property
    def model(self) -> dict:
        return self.manifest.get("model", {})

    @property
    def dataset(self) -> dict:
        return self.manifest.get("dataset", {})

    def site_shape(self, site: str) -> tuple[int, ...]:
        return tuple(self.manifest["sites"][self.check_site(site)]["shape"])

    def check_site(self, site) -> str:
        """The site's name if the store holds it (or a metadata array of that name), else InvalidInputError."""
        name = str(site)
        if name not in self.manifest["sites"] and name not in self.manifest["meta"]:
            raise InvalidInputError(f"site {name!r} is not in store {self.path}; it holds: {', '.join(self.sites)}"
                                    + (f" (and metadata {', '.join(self.meta_names)})" if self.meta_names else ""))
        return name

    def check_model(self, model) -> None:
        """Raise StoreMismatchError unless `model` (an interp.Model) is the model that wrote the store."""
        from interp.runtime.provenance import model_identity

        mine = model_identity(model)
        theirs = self.model
        if mine["id"] != theirs.get("id"):
            raise StoreMismatchError(
                f"store {self.path} holds activations of {theirs.get('name')!r} (weights id {theirs.get('id')}), "
                f"not of {model.name!r} (weights id {mine['id']}); pass the matching --model or re-cache")

    # ---- arrays -----------------------------------------------------------------------------
    def _shard(self, i: int) -> dict:
        if not -len(self.shards) <= i < len(self.shards):
            raise InvalidInputError(f"shard {i} out of range: store {self.path} has {len(self.shards)} shards")
        return self.shards[i]

    def numpy(self, name: str, shard: int, mode: str = "r") -> np.ndarray:
        """The array of site or metadata `name` in shard `shard`, memory-mapped (mode "r" or "c")."""
        name = self.check_site(name)
        s = self._shard(shard)
        p = self.path / SHARDS / s["name"] / f"{name}.npy"
        want = (s["n_tokens"], *(self.manifest["sites"][name]["shape"] if name in self.manifest["sites"] else ()))
        if s["n_tokens"] == 0:
            dtype = self.manifest["sites"][name]["dtype"] if name in self.manifest["sites"] else META_ARRAYS[name]
            return np.empty(want, dtype=dtype)
        if self.checksum_reads and (s["name"], name) not in self._checked:
            check_file_checksum(self.path, s, f"{name}.npy")
            self._checked.add((s["name"], name))
        try:
            a = np.load(p, mmap_mode=mode)
        except (ValueError, OSError, EOFError) as e:
            raise StoreCorruptError(f"store {self.path}: cannot map shard {s['name']} {name}.npy ({e}); the file "
                                    f"is truncated or damaged: rewrite the store (`interp cache ... --overwrite`)") from None
        if tuple(a.shape) != want:
            raise StoreCorruptError(f"store {self.path}: shard {s['name']} {name}.npy has shape {tuple(a.shape)}, "
                                    f"the manifest says {want}. {REWRITE}")
        if a.dtype.str[1:] != np.dtype(self._dtype(name)).str[1:]:  # kind and size; either byte order reads right
            raise StoreCorruptError(f"store {self.path}: shard {s['name']} {name}.npy holds {a.dtype}, the manifest "
                                    f"says {self._dtype(name)}: its .npy header was changed. {REWRITE}")
        return a

    def tensor(self, site: str, shard: int):
        """Torch tensor of one shard: a copy-on-write view of the file (pages load on access)."""
        import torch

        return torch.from_numpy(self.numpy(site, shard, mode="c"))

    def iter_shards(self, site: str) -> Iterator[tuple[dict, "object"]]:
        for i, s in enumerate(self.shards):
            yield s, self.tensor(site, i)

    def get(self, site: str, start: int = 0, stop: int | None = None):
        """Torch tensor of tokens [start, stop) of a site (a view if the range lies in one shard)."""
        import torch

        stop = self.n_tokens if stop is None else stop
        if not 0 <= start <= stop <= self.n_tokens:
            raise InvalidInputError(f"token range [{start}, {stop}) outside 0..{self.n_tokens}")
        parts = []
        for i, s in enumerate(self.shards):
            a, b = s["tok_start"], s["tok_start"] + s["n_tokens"]
            if b <= start or a >= stop or s["n_tokens"] == 0:
                continue
            parts.append(self.tensor(site, i)[max(start, a) - a:min(stop, b) - a])
        if len(parts) == 1:
            return parts[0]
        if not parts:
            shape = self.site_shape(site) if site in self.manifest["sites"] else ()
            return torch.from_numpy(np.empty((0, *shape), dtype=self._dtype(site)))
        return torch.cat(parts)

    def __getitem__(self, key):
        """`store["L3.resid_pre"]` (or an interp Site): every token of the site, `get(site)`;
        `store["L3.resid_pre", a:b]`: tokens [a, b) (`get(site, a, b)`; a slice without a step, negative ends
        counted from the end as in Python)."""
        site, rows = key if isinstance(key, tuple) and len(key) == 2 else (key, slice(None))
        if isinstance(key, tuple) and len(key) != 2:
            raise InvalidInputError(f"store[...] takes a site or (site, token slice), got {len(key)} items")
        if not isinstance(rows, slice) or rows.step not in (None, 1):
            raise InvalidInputError(f"store[site, rows]: rows must be a slice of tokens without a step (a:b), "
                                    f"got {rows!r}")
        name = self.check_site(site)
        if name not in self.manifest["sites"]:
            raise InvalidInputError(f"{name!r} is metadata of store {self.path}: read it with store.meta({name!r})")
        start, stop, _ = rows.indices(self.n_tokens)
        return self.get(name, start, max(start, stop))

    def _dtype(self, name):
        return self.manifest["sites"][name]["dtype"] if name in self.manifest["sites"] else META_ARRAYS[name]

    def meta(self, name: str) -> np.ndarray:
        """A per-token metadata array (tokens, positions, seq, special, category) over all shards."""
        if name not in self._meta_cache:
            if name not in self.manifest["meta"]:
                raise InvalidInputError(f"store {self.path} has no metadata {name!r}; it has "
                                        f"{', '.join(self.meta_names)}")
            parts = [np.asarray(self.numpy(name, i)) for i in range(len(self.shards))]
            self._meta_cache[name] = np.concatenate(parts) if parts else np.empty(0, dtype=META_ARRAYS[name])
        return self._meta_cache[name]

    def verify(self) -> None:
        """Full check, one read of every committed file: the manifest's shard list (checked when the
        store was opened), each file's size, its checksum, then that it maps with the recorded dtype
        and shape. Raises StoreCorruptError naming the shard, the file and what is wrong."""
        for i, s in enumerate(self.shards):
            check_shard_checksums(self.path, s)
            for name in list(self.manifest["sites"]) + self.meta_names:
                self.numpy(name, i)


def open_store(path, verify: bool = True, checksum_reads: bool = False) -> ActivationStore:
    """Open the activation store at `path` (nothing is read until asked; see ActivationStore for `verify` and
    `checksum_reads`). Raises StoreError when `path` is not a readable store, StoreCorruptError when its
    manifest or (with verify) a shard file is damaged or missing."""
    return ActivationStore(path, verify=verify, checksum_reads=checksum_reads)
