#!/usr/bin/env python
"""Put an atlas into the docs: `python bench/atlas_readme.py runs/atlas` copies its atlas.json to docs/atlas.json
and writes the table (interp.figures.atlas.atlas_markdown of that JSON, nothing typed by hand) between the README's
`<!-- atlas-table -->` and `<!-- /atlas-table -->` markers; tests/cli/test_atlas.py checks the two agree."""

from __future__ import annotations

import argparse
import json
import re
import shutil
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("atlas_dir", help="the --out folder of `interp atlas`")
    args = ap.parse_args()
    from interp.analyses.atlas import Atlas
    from interp.figures.atlas import atlas_markdown

    src = Path(args.atlas_dir) / "atlas.json"
    atlas = Atlas.from_dict(json.loads(src.read_text(encoding="utf-8")))  # checked before anything is replaced
    table = atlas_markdown(atlas.to_dict())
    readme = ROOT / "README.md"
    text = readme.read_text(encoding="utf-8")
    block = re.compile(r"<!-- atlas-table -->.*?<!-- /atlas-table -->", re.S)
    if not block.search(text):
        raise SystemExit("README.md lacks the <!-- atlas-table --> ... <!-- /atlas-table --> block")
    shutil.copyfile(src, ROOT / "docs" / "atlas.json")
    readme.write_text(block.sub(lambda _: f"<!-- atlas-table -->\n{table}\n<!-- /atlas-table -->", text),
                      encoding="utf-8")
    print(f"docs/atlas.json and README.md's atlas table from {src}")


if __name__ == "__main__":
    main()
