"""docs/errors.md stays true to the code: every error class of interp is named on it, every message it quotes
still occurs in interp's source (a message reworded or removed fails here until the page follows), and the exit
codes it gives are the CLI's."""

from __future__ import annotations

import ast
import re
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PAGE = ROOT / "docs" / "errors.md"
SOURCES = sorted((ROOT / "interp").rglob("*.py"))
HOLE = "\x00"  # what an f-string's {value} becomes: the page writes it "..."


def render(node: ast.AST) -> str | None:
    """A string expression of the source as text, each value it embeds as HOLE (None: not a string)."""
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        return "".join(v.value if isinstance(v, ast.Constant) else HOLE for v in node.values)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = render(node.left), render(node.right)
        return (left if left is not None else HOLE) + (right if right is not None else HOLE) \
            if left is not None or right is not None else None
    return None


def source_strings() -> list[str]:
    """Every string literal, f-string and string concatenation of interp/."""
    out = []
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            text = render(node)
            if text:
                out.append(text)
    return out


def error_classes() -> set[str]:
    """The classes of interp/ that derive, directly or not, from interp.errors' classes (or are them)."""
    bases: dict[str, list[str]] = {}
    for path in SOURCES:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if isinstance(node, ast.ClassDef):
                bases[node.name] = [b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases]
    roots = {n.name for n in ast.parse((ROOT / "interp" / "errors.py").read_text()).body if isinstance(n, ast.ClassDef)}
    found, grew = set(roots), True
    while grew:
        new = {name for name, bs in bases.items() if name not in found and any(b in found for b in bs)}
        found |= new
        grew = bool(new)
    return found


def quoted_messages(text: str) -> list[str]:
    """The code spans of the page's sections that read as messages: with a "..." or of 4 words or more (option
    names and short commands are not checked)."""
    body = text[text.index("\n## "):]
    spans = [m.group(2) for m in re.finditer(r"(`+)(.+?)\1", re.sub(r"\n\s*", " ", body))]
    return [s.strip() for s in spans if "..." in s or len(s.split()) >= 4]


def occurs(message: str, sources: list[str]) -> bool:
    """Whether one source string holds the message's pieces (split at "..."), in order."""
    pieces = [p.strip() for p in message.split("...") if p.strip()]
    pattern = re.compile(".*?".join(re.escape(p) for p in pieces), flags=re.S)
    return any(pattern.search(s) for s in sources)


def test_every_error_class_is_named():
    text = PAGE.read_text(encoding="utf-8")
    classes = error_classes()
    assert {"InvalidInputError", "StoreCorruptError", "InterpWarning"} <= classes
    missing = sorted(c for c in classes if f"`{c}`" not in text)
    assert not missing, f"docs/errors.md does not name {missing}"


def test_every_quoted_message_occurs_in_the_source():
    messages = quoted_messages(PAGE.read_text(encoding="utf-8"))
    assert len(messages) >= 150  # the page lists messages, not a summary of them
    sources = source_strings()
    stale = [m for m in messages if not occurs(m, sources)]
    assert not stale, "docs/errors.md quotes messages interp no longer raises:\n" + "\n".join(stale)


def test_the_check_refuses_a_message_that_is_not_in_the_source():
    sources = ["--out " + HOLE + " already holds a run (" + HOLE + "); pass --overwrite to replace it"]
    assert occurs("--out ... already holds a run (...); pass --overwrite", sources)
    assert not occurs("--out ... already holds a run; pass --force", sources)
    assert not occurs("pass --overwrite ... already holds a run", sources)  # pieces out of order


def test_the_exit_codes_are_the_clis():
    text = PAGE.read_text(encoding="utf-8")
    cli = (ROOT / "interp" / "cli" / "__init__.py").read_text(encoding="utf-8")
    interrupt = (ROOT / "interp" / "runtime" / "interrupt.py").read_text(encoding="utf-8")
    assert "except InterpError" in cli and "sys.exit(2)" in cli and "| 2 |" in text
    assert "128 + int(_signal)" in interrupt and "| 130 |" in text and "| 143 |" in text
