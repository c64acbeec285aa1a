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


def begin(argv: list[str]) -> RunContext:
    """A fresh RunContext for a CLI call (cli.main): notes on stderr, report pages in every run folder."""
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


def open_run(command: str, out, overwrite: bool, name, device, dtype, revision=None, device_map=None,
             max_memory=None):
    """(run folder, model) of a command: the folder is made (staged) first, so a bad --out fails before the
    model loads."""
    from interp.cli.options import model_label, parse_max_memory
    from interp.models.loading import load_model

    o = out_dir(out, command, model_label(name), overwrite=overwrite)
    mm = parse_max_memory(max_memory)
    current().max_memory, current().device_map = mm, device_map  # without a device map: --batch-size's budget only
    m = load_model(model_label(name), device=device, dtype=dtype, revision=revision, device_map=device_map,
                   max_memory=mm if device_map is not None else None)
    record_dtype(m)
    return o, m


def record_dtype(model) -> None:
    """Note the model's dtype choice (asked, used, reason) for this call's run.json."""
    choice = getattr(model, "dtype_choice", None)
    if choice is not None:
        current().dtype = choice.to_dict()
