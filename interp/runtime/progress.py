"""A progress bar for long library calls: `with interp.progress(total, "what") as advance:` and pass
`progress=advance` to an analysis (run_ablation, run_rope_zero, detect_retrieval_heads, run_patching, ...).
tqdm.auto: a widget in Jupyter, text in a terminal."""

from __future__ import annotations

from contextlib import contextmanager


@contextmanager
def progress(total: int | None = None, description: str = ""):
    """Yield `advance(n)` for an analysis's `progress=` argument; the bar closes on exit, also on error."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=description)
    try:
        yield bar.update
    finally:
        bar.close()
