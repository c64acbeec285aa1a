"""The README's Python blocks run as written, each alone in a fresh interpreter from an empty folder."""

from __future__ import annotations

import re
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parents[1] / "README.md"
BLOCKS = re.findall(r"```python\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.S)


def test_the_readme_has_python_blocks():
    assert len(BLOCKS) >= 3


@pytest.mark.parametrize("i", range(len(BLOCKS)), ids=[f"block{i + 1}" for i in range(len(BLOCKS))])
def test_readme_python_block_runs_alone(i, tmp_path):
    script = tmp_path / "block.py"  # nnsight reads a trace body back from its source file: a file, not stdin
    script.write_text(BLOCKS[i], encoding="utf-8")
    r = subprocess.run([sys.executable, str(script)], cwd=tmp_path, capture_output=True, text=True, timeout=600,
                       env={**__import__("os").environ, "HF_HUB_OFFLINE": "1", "TOKENIZERS_PARALLELISM": "false"})
    assert r.returncode == 0, f"README Python block {i + 1} failed:\n{r.stderr[-3000:]}"
