"""Progress of long library calls. `with interp.progress(total, "what") as advance:` and pass
`progress=advance` to an analysis (run_ablation, run_rope_zero, detect_retrieval_heads, run_patching, ...);
tqdm.auto: a widget in Jupyter, text in a terminal.

An analysis that knows its work only once it has planned it (the distinct random head sets drawn, the heads a
detection found) says so with `plan(progress, total, why)`: the bar's total becomes the work that will run, so
a finished bar ends at its total (with `why`, when the plan left work out). A plain function as `progress`
ignores the plan. `PlainLines` is the progress of a log or a pipe: a plain line every few seconds."""

from __future__ import annotations

import os
import time
from contextlib import contextmanager

EVERY_ENV = "INTERP_PROGRESS_EVERY"  # seconds between the plain progress lines of a non-terminal run
EVERY_DEFAULT = 15.0


def plan(progress, total: int, why: str | None = None) -> None:
    """Tell `progress` (an analysis's `progress=` argument) the total of the work now planned, and why work was
    left out (`why`), when it takes a plan (has a `plan(total, why)` method); plain callables are left alone."""
    f = getattr(progress, "plan", None)
    if callable(f):
        f(int(total), why)


class _Tqdm:
    """`advance(n)` of a tqdm bar that also takes a plan (see `plan`)."""

    def __init__(self, bar):
        self.bar = bar

    def __call__(self, n: int = 1) -> None:
        self.bar.update(n)

    def plan(self, total: int, why: str | None = None) -> None:
        self.bar.total = total
        if why:
            self.bar.set_postfix_str(why, refresh=False)
        self.bar.refresh()


@contextmanager
def progress(total: int | None = None, description: str = ""):
    """Yield `advance(n)` for an analysis's `progress=` argument; the bar closes on exit, also on error."""
    from tqdm.auto import tqdm

    bar = tqdm(total=total, desc=description)
    try:
        yield _Tqdm(bar)
    finally:
        bar.close()


def progress_every() -> float:
    """Seconds between plain progress lines: $INTERP_PROGRESS_EVERY (0: a line at every step), default 15."""
    from interp.errors import InvalidInputError

    text = os.environ.get(EVERY_ENV, "").strip()
    if not text:
        return EVERY_DEFAULT
    try:
        every = float(text)
    except ValueError:
        every = -1.0
    if not every >= 0:  # also NaN
        raise InvalidInputError(f"{EVERY_ENV}={text!r}: give the seconds between progress lines (a number >= 0, "
                                f"e.g. 30; 0 prints every step), or unset it for {EVERY_DEFAULT:g}")
    return every


class PlainLines:
    """Progress as plain lines for a log or a pipe ("ablation conditions 40/100 (12 s)"): one at most every
    `every` seconds (default `progress_every()`) and one at the end. `write(line)` prints a line."""

    def __init__(self, total: int | None, description: str, write, every: float | None = None):
        self.total, self.description, self.write = total, description, write
        self.every = progress_every() if every is None else every
        self.completed, self.why, self.shown = 0, None, None
        self.start = self.last = time.monotonic()

    def line(self) -> str:
        of = f"/{self.total}" if self.total is not None else ""
        why = f"; {self.why}" if self.why else ""
        return f"{self.description} {self.completed}{of} ({time.monotonic() - self.start:.0f} s{why})"

    def advance(self, n: int) -> None:
        self.completed += n
        now = time.monotonic()
        if now - self.last >= self.every:
            self.last = now
            self._show()

    def plan(self, total: int, why: str | None = None) -> None:
        self.total, self.why = total, why

    def close(self) -> None:
        """The line at the end (unless the last line shown already says it)."""
        if self.shown != (self.completed, self.total, self.why):
            self._show()

    def _show(self) -> None:
        self.shown = (self.completed, self.total, self.why)
        self.write(self.line())
