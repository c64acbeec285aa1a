"""User JSONL files: one object per non-blank line, read with errors that name the file and line."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Iterator

from ..errors import InvalidInputError


def jsonl_records(path: str | Path, what: str) -> Iterator[tuple[str, object]]:
    """("path:line", parsed object) for every non-blank line; `what` names the file in errors
    ("prompts file", "pairs file", ...). Missing files, non-UTF-8 text and bad JSON are InvalidInputError."""
    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"{what} {path}: no such file")
    try:
        lines = p.read_text(encoding="utf-8").splitlines()
    except UnicodeDecodeError:
        raise InvalidInputError(f"{what} {path} is not UTF-8 text") from None
    for i, line in enumerate(lines, 1):
        if not line.strip():
            continue
        try:
            yield f"{path}:{i}", json.loads(line)
        except json.JSONDecodeError as e:
            raise InvalidInputError(f"{path}:{i}: not valid JSON ({e.msg})") from None
