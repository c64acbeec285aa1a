"""What the CLI prints: consoles (stderr for notes and tables, stdout for results), the heads
column of tables, lazy progress bars and the NIAH haystack note. Quiet on ranks other than 0 of a
torchrun launch (rank 0 speaks for all)."""

from __future__ import annotations



def other_rank() -> bool:
    """True in the processes of a torchrun launch other than rank 0: they compute their share of a sweep
    and print and write nothing (rank 0 speaks and writes for all)."""
    import os

    from interp.runtime.distributed import launched

    return launched() and os.environ.get("RANK", "0") != "0"


def console(every_rank: bool = False):
    """The CLI's stderr console. Not a terminal (a log, a pipe, a test): 200 columns, so tables keep whole
    head and site names instead of truncating them to the default 80. Quiet on ranks other than 0 of a
    torchrun launch, unless `every_rank` (errors)."""
    import sys

    from rich.console import Console

    return Console(stderr=True, width=None if sys.stderr.isatty() else 200, quiet=other_rank() and not every_rank)


def stdout_console():
    """A console on stdout, 200 columns when stdout is not a terminal (see `console`); quiet on other ranks."""
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200, quiet=other_rank())


def echo(text: str, nl: bool = True) -> None:
    """typer.echo on rank 0 only (the one result a sharded sweep prints)."""
    import typer

    if not other_rank():
        typer.echo(text, nl=nl)


def print_line(text: str, label: str = "", con=None) -> None:
    """One message on stderr (or on `con`): `label` (rich markup, e.g. "[yellow]warning[/]"), then `text` exactly
    as given: its square brackets are escaped, not read as markup ("[n, seq_len]" stays)."""
    from rich.markup import escape

    (con or console()).print(f"{label}: {escape(text)}" if label else escape(text), highlight=False, soft_wrap=True)


def heads_cell(heads, shown: int = 6) -> str:
    """A table's heads column: the heads themselves (the first `shown` and a count when there are more)."""
    if not heads:
        return "-"
    return ",".join(heads) if len(heads) <= shown else f"{','.join(heads[:shown])},... ({len(heads)})"


def print_tests(stem: str, d: dict, digits: int = 2, lines: bool = True) -> None:
    """A result's main tests, one line each (estimate [CI], p flagged at its floor or without power, the
    Holm-adjusted p; `lines=False`: a table above shows them), then the notes that go with them: the same rows
    and notes as the report page (`figures.tables.main_tests`)."""
    from interp.figures.tables import main_tests
    from interp.figures.text import p_flag

    rows, notes = main_tests(stem, d)
    c = console()
    for r in rows if lines else ():
        def f(x):
            return "?" if x is None else f"{x:+.{digits}f}"

        ci = "" if r["lo"] is None else f" [{f(r['lo'])}, {f(r['hi'])}]"
        holm = "" if r["p_holm"] is None else f", Holm-adjusted p = {r['p_holm']:.3g}"
        p = "" if r["p_value"] is None else f", p = {r['p_value']:.3g}{p_flag(r)}"
        c.print(f"{r['test']} ({r['metric']}, paired): {f(r['estimate'])}{ci}{p}{holm}", highlight=False,
                soft_wrap=True)
    for n in notes:
        print_line(n, "note", c)


def note_niah(m, niah) -> None:
    """The haystack note (`tasks.niah.fallback_note`) as one line on stderr; called after the prompts are
    built, so a refused run prints only its error."""
    from interp.tasks.niah import fallback_note

    print_note(fallback_note(m, niah))


def print_note(note: str | None) -> None:
    """A note (if any) as one line on stderr."""
    if note:
        print_line(note, "note")


class _LazyProgress:
    """The CLI's progress, shown from the first step (a run refused while it checks its inputs prints only its
    one-line error, not an empty bar): a rich bar on a terminal; in a log or a pipe, plain lines at most every
    $INTERP_PROGRESS_EVERY seconds and one at the end (`runtime.progress.PlainLines`). Called as `advance(n)`;
    takes the analysis's plan (`runtime.progress.plan`): its total, and why work was left out."""

    def __init__(self, total, description: str, con=None):
        self.con = con if con is not None else console()
        self.total, self.description, self.why = total, description, None
        self.completed = 0
        self.bar = self.lines = None

    def _start(self) -> None:
        if not self.con.is_terminal:
            from interp.runtime.progress import PlainLines

            self.lines = PlainLines(self.total, self.description, lambda line: print_line(line, con=self.con))
            self.lines.plan(self.total, self.why)
            return
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.bar = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                            console=self.con, transient=False)
        self.task = self.bar.add_task(self._title(), total=self.total)
        self.bar.start()

    def _title(self) -> str:
        from rich.markup import escape

        return escape(self.description + (f" ({self.why})" if self.why else ""))

    def __call__(self, n: int = 1) -> None:
        if self.bar is None and self.lines is None:
            self._start()
        self.completed += n
        if self.bar is not None:
            self.bar.advance(self.task, n)
        else:
            self.lines.advance(n)

    def plan(self, total: int, why: str | None = None) -> None:
        self.total, self.why = total, why
        if self.bar is not None:
            self.bar.update(self.task, total=total, description=self._title())
        elif self.lines is not None:
            self.lines.plan(total, why)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.bar is not None:
            self.bar.stop()
        elif self.lines is not None:
            self.lines.close()
        return False


def progress_bar(total: int | None, description: str):
    """(context manager, advance(n)) of the CLI's progress on stderr (`_LazyProgress`), shown from the first
    advance; `total` None: the analysis plans it (`runtime.progress.plan`)."""
    p = _LazyProgress(total, description)
    return p, p
