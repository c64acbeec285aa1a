"""`interp atlas RUN_DIRS... --out DIR`: the seed findings of every model side by side, from run folders."""

from __future__ import annotations

import typer


def atlas(runs: list[str] = typer.Argument(..., help="Run folders, or folders of run folders (e.g. "
                                           "runs/results-real): every folder with a run.json at or below them."),
          out: str = typer.Option(None, "--out", help="Folder for atlas.json, atlas.csv, atlas.md, the figures and "
                                  "index.html (default: runs/atlas-<time>)."),
          overwrite: bool = typer.Option(False, "--overwrite", help="Replace the run already in --out."),
          as_json: bool = typer.Option(False, "--json", help="Print atlas.json on stdout.")):
    """One table and figures of every model's findings, read from its run folders (nothing recomputed): RoPE
    theta, geometry, NIAH recall by length, retrieval heads (both normalisations) and their layers, masking
    them vs random sets (i), the q.k norm statistics (iii), lowest-band RoPE zeroing by dose (iv), induction
    heads and their overlap with the retrieval heads, copy suppression; the published numbers beside them."""
    from interp.analyses.atlas import build_atlas
    from interp.cli.output import echo
    from interp.cli.runs import out_dir, write_result
    from interp.figures.atlas import atlas_markdown

    atlas_ = build_atlas(runs)
    o = out_dir(out, "atlas", "models", overwrite=overwrite)
    d = write_result(atlas_, o, "atlas", as_json=as_json)
    md = atlas_markdown(d)
    tmp = o / "atlas.md.partial"
    tmp.write_text(md + "\n", encoding="utf-8")
    tmp.replace(o / "atlas.md")
    if not as_json:
        echo(md)
        for n in d["notes"]:
            echo(f"note: {n}")
        echo(f"-> {out or o} (atlas.json, atlas.csv, atlas.md, index.html)")
