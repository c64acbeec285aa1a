"""The CLI's parsers: option strings -> typed values, with one-line errors (typer callbacks for finite and [0, 1]
floats, comma-separated lists, backslash escapes, --max-memory, --batch-size N|auto)."""

from __future__ import annotations

import typer

from interp.errors import InvalidInputError

AUTO = "auto"


def finite(value):
    """typer callback: a float option must be a finite number (nan and inf are refused, not passed on)."""
    import math

    import typer

    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def unit_interval(value):
    """typer callback: a float option in [0, 1]."""
    import typer

    finite(value)
    if value is not None and not 0 <= value <= 1:
        raise typer.BadParameter(f"{value} is not in [0, 1]")
    return value


def _parse_list(text: str, what: str, cast, kind: str) -> tuple:
    try:
        vals = tuple(cast(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidInputError(f"{what} must be comma-separated {kind}, got {text!r}") from None
    if not vals:
        raise InvalidInputError(f"{what} is empty")
    return vals


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    return _parse_list(text, what, int, "integers")


def parse_floats(text: str, what: str) -> tuple[float, ...]:
    return _parse_list(text, what, float, "numbers")


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0", "'": "'", '"': '"'}


def parse_escapes(text: str, what: str = "--separator") -> str:
    """Backslash escapes (\\n \\t \\r \\\\ \\xHH \\uXXXX) decoded; every other character is kept as it is,
    so non-ASCII text passes through unchanged (unicode_escape would garble it). A bad escape is an error."""
    import re

    def one(m):
        e = m.group(1)
        if not e:
            raise InvalidInputError(f"{what} {text!r} ends in a lone backslash; write \\\\ for a backslash")
        if e in _ESCAPES:
            return _ESCAPES[e]
        if len(e) > 1:
            return chr(int(e[1:], 16))
        raise InvalidInputError(f"{what} {text!r}: bad escape \\{e}; use \\n, \\t, \\r, \\\\, \\xHH or \\uXXXX")

    return re.sub(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.?)", one, text, flags=re.S)


def parse_max_memory(text: str | None) -> dict | None:
    """--max-memory "0=20GiB,1=20GiB,cpu=60GiB" -> {0: "20GiB", 1: "20GiB", "cpu": "60GiB"} (accelerate's form)."""
    import re

    if text is None:
        return None
    out = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = re.fullmatch(r"(cpu|disk|mps|cuda:\d+|\d+)=(\d+(?:\.\d+)?\s*(?:[KMGT]i?B))", part, re.I)
        if m is None:
            raise InvalidInputError(f"--max-memory {text!r}: write DEVICE=SIZE pairs, e.g. 0=20GiB,cpu=60GiB")
        key = m.group(1).lower()
        key = int(key.split(":")[-1]) if key.split(":")[-1].isdigit() else key
        out[key] = m.group(2).replace(" ", "")
    if not out:
        raise InvalidInputError("--max-memory is empty")
    return out


def parse_batch_size(value):
    """typer parser of --batch-size: a positive integer or `auto`."""
    if isinstance(value, int) and not isinstance(value, bool):
        n = value
    else:
        text = str(value).strip().lower()
        if text == AUTO:
            return AUTO
        try:
            n = int(text)
        except ValueError:
            raise typer.BadParameter(f"{value!r} is not a positive integer or 'auto'") from None
    if n < 1:
        raise typer.BadParameter(f"{n} is not a positive integer or 'auto'")
    return n
