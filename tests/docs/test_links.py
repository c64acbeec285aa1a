"""Every relative link of the README and of docs/*.md reaches a file of the repository and, where it names an
#anchor, a heading of that page (GitHub's anchors: the heading's text in lowercase, punctuation dropped, spaces
turned to '-', a repeated heading suffixed -1, -2, ...)."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
FENCE = re.compile(r"^(```|~~~).*?^\1[^\n]*$", flags=re.S | re.M)
LINK = re.compile(r"!?\[(?:[^\[\]]|\[[^\]]*\])*\]\(\s*<?([^)\s>]+)>?(?:\s+\"[^\"]*\")?\s*\)")


def prose(text: str) -> str:
    """The page without its fenced code blocks (a `# comment` in a shell block is no heading, a `](x)` no link)."""
    return FENCE.sub("", text)


def slug(heading: str) -> str:
    """GitHub's anchor of a heading's text: inline markup reduced to its text, lowercase, every character that
    is not a letter, digit, '_', '-' or space dropped, spaces to '-'."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)  # [text](url) -> text
    text = text.replace("`", "").strip().lower()
    text = re.sub(r"[^\w\- ]", "", text)
    return text.replace(" ", "-")


def anchors(page: Path) -> set[str]:
    """Every anchor a page's headings give (repeated headings numbered as GitHub numbers them)."""
    seen: dict[str, int] = {}
    out = set()
    for m in re.finditer(r"^#{1,6}\s+(.+?)\s*#*\s*$", prose(page.read_text(encoding="utf-8")), flags=re.M):
        base = slug(m.group(1))
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


def links(page: Path) -> list[str]:
    """The relative link targets of a page's prose (web and mail addresses left out)."""
    return [t for t in LINK.findall(prose(page.read_text(encoding="utf-8")))
            if not re.match(r"^[a-z][a-z0-9+.-]*:", t, flags=re.I)]


ALL = [(page, target) for page in PAGES for target in links(page)]


def test_slug_follows_github():
    assert slug("Qwen2.5-Coder-0.5B and 1.5B") == "qwen25-coder-05b-and-15b"
    assert slug("Retrieval heads vs rope_theta: a controlled experiment") == \
        "retrieval-heads-vs-rope_theta-a-controlled-experiment"
    assert slug("IOI: `ioi`, `ioi_kind`") == "ioi-ioi-ioi_kind"
    assert slug("Copy suppression (McDougall et al. 2023)") == "copy-suppression-mcdougall-et-al-2023"


def test_the_check_sees_links_and_refuses_a_bad_one(tmp_path):
    page = tmp_path / "p.md"
    page.write_text("# Top\n\n## Top\n\nSee [a](other.md#x) and [b](#top-1).\n\n```bash\n# not a heading\n[c](gone.md)\n```\n")
    assert links(page) == ["other.md#x", "#top-1"]
    assert anchors(page) == {"top", "top-1"}
    assert broken(page, "other.md#x") == "other.md#x: no such file"


def test_the_pages_have_relative_links():
    assert len(ALL) >= 50 and any(t.startswith("docs/README.md") for p, t in ALL if p == ROOT / "README.md")


def broken(page: Path, target: str) -> str | None:
    """Why a link of a page does not resolve, or None when it does."""
    path, _, anchor = target.partition("#")
    dest = (page.parent / path).resolve() if path else page
    if not dest.exists():
        return f"{target}: no such file"
    if anchor and dest.suffix == ".md" and anchor not in anchors(dest):
        return f"{target}: {dest.relative_to(ROOT).as_posix()} has no heading with anchor #{anchor}"
    return None


@pytest.mark.parametrize("page", PAGES, ids=[p.relative_to(ROOT).as_posix() for p in PAGES])
def test_every_relative_link_resolves(page):
    bad = [b for t in links(page) if (b := broken(page, t))]
    assert not bad, f"{page.relative_to(ROOT).as_posix()}: broken links:\n" + "\n".join(bad)


def test_the_docs_index_sorts_every_page_by_kind():
    """docs/README.md links every page of docs/ under one of its four kinds, and the README points at it."""
    index = ROOT / "docs" / "README.md"
    text = prose(index.read_text(encoding="utf-8"))
    assert [h for h in re.findall(r"^## (.+)$", text, flags=re.M)] == ["Concepts", "How-to guides", "Reference",
                                                                         "Results"]
    linked = {(index.parent / t.partition("#")[0]).resolve() for t in links(index)}
    pages = [p for p in (ROOT / "docs").iterdir() if p.suffix in (".md", ".json") and p != index]
    missing = sorted(p.name for p in pages if p.resolve() not in linked)
    assert not missing, f"docs/README.md does not list {missing}"
    assert "docs/README.md" in links(ROOT / "README.md")
