"""Strict JSON for every file interp writes: no NaN/Infinity literals, written atomically; and `read_json`, the
checked reader of the JSON files interp reads back (result files, run.json) for `report` and `compare`."""

from __future__ import annotations

import json
from pathlib import Path


def strict(obj):
    """`obj` with every non-finite float replaced by null, so strict JSON parsers accept it. A dict that
    held any gets a "nonfinite" entry naming them ({"cohens_d": "-inf"}): the value is kept, as text."""
    import math

    if isinstance(obj, dict):
        out, bad = {}, {}
        for k, v in obj.items():
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                bad[str(k)] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
            else:
                out[k] = strict(v)
        if bad:
            out["nonfinite"] = {**out.get("nonfinite", {}), **bad} if isinstance(out.get("nonfinite"), dict) else bad
        return out
    if isinstance(obj, (list, tuple)):
        return [None if isinstance(v, float) and not math.isfinite(v) else strict(v) for v in obj]
    return obj


def dumps(obj, **kw) -> str:
    """Strict JSON (no NaN/Infinity literals; see `strict`)."""
    return json.dumps(strict(obj), allow_nan=False, **kw)


def write_json(obj: dict, path: str | Path) -> None:
    """Write atomically (a half-written file never looks valid), as strict JSON."""
    path = Path(path)
    tmp = path.with_suffix(path.suffix + ".partial")
    tmp.write_text(dumps(obj, indent=2))
    tmp.replace(path)


MAX_DEPTH = 64  # interp's result files nest at most 7 levels (measured over every command's); far deeper is not one


def json_type(v) -> str:
    """JSON's name for the type of `v` (what a user sees in the file): null, boolean, object, list, string, number."""
    if v is None:
        return "null"
    if isinstance(v, bool):
        return "boolean"
    return {dict: "object", list: "list", str: "string", int: "number", float: "number"}.get(type(v), type(v).__name__)


def depth(obj, limit: int = MAX_DEPTH) -> int:
    """How deeply `obj` nests (a scalar 0, [] 1, [[1]] 2), counted without recursion; stops past `limit`."""
    deepest, stack = 0, [(obj, 1)]
    while stack:
        x, d = stack.pop()
        if isinstance(x, (dict, list)):
            deepest = max(deepest, d)
            if deepest > limit:
                return deepest
            stack.extend((v, d + 1) for v in (x.values() if isinstance(x, dict) else x))
    return deepest


def _unclosed(text: str) -> bool:
    """Does `text` end inside a string or with brackets left open (a JSON file cut short, whatever its last
    characters)? Only on the error path: one pass over the text."""
    opened, in_str, escaped = 0, False, False
    for ch in text:
        if in_str:
            if escaped:
                escaped = False
            elif ch == "\\":
                escaped = True
            elif ch == '"':
                in_str = False
        elif ch == '"':
            in_str = True
        elif ch in "[{":
            opened += 1
        elif ch in "]}":
            opened -= 1
    return in_str or opened > 0


def read_json(path: str | Path, what: str, fix: str, want: type | None = dict):
    """The parsed JSON file at `path`, or InvalidInputError in one line naming it (`what`: "result file",
    "run.json", ...), what is wrong and `fix` (what to do): missing, a folder, not UTF-8, not JSON (cut short:
    the file ends inside a value), nested past MAX_DEPTH (JSON nested 100,000 deep ends in a RecursionError in
    the parser or in any recursive reader after it), or not of type `want` (a JSON list where an object is
    expected)."""
    from interp.errors import InvalidInputError

    p = Path(path)
    if not p.is_file():
        raise InvalidInputError(f"{what} {path}: {'a directory, not a file' if p.is_dir() else 'no such file'}")
    try:
        data = p.read_bytes()
    except OSError as e:
        raise InvalidInputError(f"{what} {path} cannot be read ({e.strerror or e}); {fix}") from None
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        raise InvalidInputError(f"{what} {path} is not UTF-8 text (byte {e.start}); {fix}") from None
    try:
        obj = json.loads(text)
    except RecursionError:
        raise InvalidInputError(f"{what} {path} is nested too deeply to be a file interp wrote (more than "
                                f"{MAX_DEPTH} levels); {fix}") from None
    except json.JSONDecodeError as e:
        cut = " (it ends inside a value: the file is cut short)" if _unclosed(text) else ""
        raise InvalidInputError(f"{what} {path} is not valid JSON at line {e.lineno}, column {e.colno} ({e.msg})"
                                f"{cut}; {fix}") from None
    if depth(obj) > MAX_DEPTH:
        raise InvalidInputError(f"{what} {path} is nested too deeply to be a file interp wrote (more than "
                                f"{MAX_DEPTH} levels); {fix}")
    if want is not None and not isinstance(obj, want):
        raise InvalidInputError(f"{what} {path} holds a JSON {json_type(obj)}, not a JSON {json_type(want())}; "
                                f"{fix}")
    return obj
