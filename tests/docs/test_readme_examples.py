"""The Python blocks of the README and of every page in docs/ run as written, each alone in a fresh interpreter
from an empty folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BLOCKS = [(page, n + 1, code) for page in PAGES
          for n, code in enumerate(re.findall(r"```python\n(.*?)```", page.read_text(encoding="utf-8"), flags=re.S))]
IDS = [f"{page.relative_to(ROOT).as_posix()}-block{n}" for page, n, _ in BLOCKS]


def test_the_docs_have_python_blocks():
    assert len(BLOCKS) >= 4
    assert len([b for b in BLOCKS if b[0].name == "guide.md"]) >= 3  # the Python API examples


@pytest.mark.slow
@pytest.mark.parametrize("i", range(len(BLOCKS)), ids=IDS)
def test_docs_python_block_runs_alone(i, tmp_path):
    page, n, code = BLOCKS[i]
    script = tmp_path / "block.py"  # nnsight reads a trace body back from its source file: a file, not stdin
    script.write_text(code, encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    assert r.returncode == 0, f"{page.name} Python block {n} failed:\n{r.stderr[-3000:]}"
