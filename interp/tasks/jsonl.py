"""User files (text and JSONL), read with errors that name the file, the line and what is wrong."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from interp.errors import InvalidInputError


def read_user_text(path: str | Path, what: str) -> str:
    """The whole text of a user's file. Missing files, folders, unreadable files and bytes that are not
    UTF-8 are InvalidInputError naming `what` ("haystack file", "--heads file", ...) and the fix."""
    p = Path(path)
    if p.is_dir():
        raise InvalidInputError(f"{what} {path} is a directory, not a file")
    if not p.is_file():
        raise InvalidInputError(f"{what} {path}: no such file")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InvalidInputError(f"{what} {path} cannot be read: {e.strerror or e}") from None
    try:
        return data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data[:e.start].count(b"\n") + 1
        raise InvalidInputError(f"{what} {path} is not UTF-8 text (byte {e.start}, line {line}: "
                                f"{data[e.start:e.start + 4]!r}); convert it, e.g. iconv -f latin1 -t utf-8") from None


def jsonl_records(path: str | Path, what: str) -> Iterator[tuple[str, object]]:
    """("path:line", parsed object) for every non-blank line; `what` names the file in errors
    ("prompts file", "pairs file", ...). Missing files, non-UTF-8 text and bad JSON are InvalidInputError."""
    lines = read_user_text(path, what).splitlines()
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{i}", json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{path}:{i}: not valid JSON ({e.msg})") from None
        except RecursionError:
            raise InvalidInputError(f"{path}:{i}: JSON nested too deeply to be a {what} record") from None
