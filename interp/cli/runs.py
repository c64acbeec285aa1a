"""The CLI's side of run folders (interp.runtime.runs holds them): a call's RunContext prints its notes as
`note:` lines and writes its report pages; InterpWarnings become `warning:` lines recorded for run.json; the
result files a command writes, echoed on stdout with --json / --csv; and the run folder + model of a command."""

from __future__ import annotations

from pathlib import Path

from interp.cli.output import echo, print_line
from interp.runtime.jsonio import dumps
from interp.runtime.runs import (RUN_MARKER, RunContext, check_out_location, commit_staged, current, final_path,
                                 out_dir, partial_note)
from interp.runtime import runs as _runs

__all__ = ["RUN_MARKER", "RunContext", "begin", "check_out_location", "commit_staged", "current", "final_path",
           "open_run", "out_dir", "partial_note", "record_dtype", "show_warning", "write_result", "write_table"]


def _note(text: str) -> None:
    print_line(text, "note")


def _report(folder: Path, run: dict):
    from interp.figures.report import write_report

    return write_report(folder, run)  # every figure page and index.html, from the result files alone


def _say_library_lines() -> None:
    """What the library says on the `interp.batch` logger (the batch size it picked) as lines on stderr."""
    import logging

    from interp.cli.output import console

    class ConsoleLines(logging.Handler):
        def emit(self, record):
            console().print(record.getMessage(), highlight=False, soft_wrap=True)

    log = logging.getLogger("interp.batch")
    if not any(type(h).__name__ == "ConsoleLines" for h in log.handlers):
        log.addHandler(ConsoleLines())
        log.setLevel(logging.INFO)
        log.propagate = False


def begin(argv: list[str]) -> RunContext:
    """A fresh RunContext for a CLI call (cli.main): notes on stderr, report pages in every run folder."""
    _say_library_lines()
    return _runs.begin(argv, say=_note, report=_report)


def show_warning(message, category, filename, lineno, file=None, line=None, _default=None):
    """warnings.showwarning for the CLI: an InterpWarning is one 'warning: ...' line on stderr and is
    recorded for run.json; other warnings go to Python's default display."""
    from interp.errors import InterpWarning

    if isinstance(message, InterpWarning) or (isinstance(category, type) and issubclass(category, InterpWarning)):
        current().warnings.append(str(message))
        print_line(str(message), "[yellow]warning[/]")
    elif _default is not None:
        _default(message, category, filename, lineno, file, line)


def write_result(res, out: Path, stem: str, as_json: bool = False, csv: bool = False) -> dict:
    """A result as STEM.json and STEM.csv in `out` (runtime.runs.write_result); the JSON on stdout with
    `as_json`, else the table with `csv`. Returns the result's dict."""
    d, df = _runs.write_result(res, out, stem)
    if as_json:
        echo(dumps(d))
    elif csv:
        echo(df.to_csv(index=False), nl=False)
    return d


def write_table(res, path: Path, echo_: bool = False) -> None:
    """A result's tidy table as CSV (runtime.runs.write_table); on stdout with echo_."""
    df = _runs.write_table(res, path)
    if echo_:
        echo(df.to_csv(index=False), nl=False)


def open_run(command: str, out, overwrite: bool, load, *old_style):
    """(run folder, model) of a command: the folder is made (staged) first, so a bad --out fails before the
    model loads. `load`: the command's LoadOptions (`cli.options.load_options`); the loading options one by one
    (--model, --device, --model-dtype, --revision, --device-map, --max-memory as given) are taken too."""
    from interp.cli.options import load_options
    from interp.models.load_options import LoadOptions

    if not isinstance(load, LoadOptions):
        load = load_options(load, *old_style)
    o = out_dir(out, command, load.model, overwrite=overwrite)
    current().max_memory, current().device_map = load.max_memory, load.device_map
    m = load.load()  # its max_memory: the budget of --batch-size (with a device map also the placement limits)
    record_dtype(m)
    return o, m


def record_dtype(model) -> None:
    """Note the model's dtype choice (asked, used, reason) for this call's run.json."""
    choice = getattr(model, "dtype_choice", None)
    if choice is not None:
        current().dtype = choice.to_dict()
