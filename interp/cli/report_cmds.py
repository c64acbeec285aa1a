"""`interp report`: a run folder's pages rebuilt from its result files."""

from __future__ import annotations

import typer


def report(dirs: list[str] = typer.Argument(..., help="Run folders (each with its run.json and result files).")):
    """Rebuild each run folder's report page (index.html) and figure pages from its result files."""
    from pathlib import Path

    from interp.cli.output import print_line
    from interp.cli.runs import partial_note

    from interp.errors import InvalidInputError
    from interp.figures.report import RESULTS, write_report

    skipped, done = [], []
    for d in dirs:  # a glob (runs/*/) may match folders that are not runs: each is skipped with a note
        p = Path(d)
        if not p.is_dir():
            skipped.append(f"{d}: no such run folder")
        elif partial_note(p):  # a run still staging, or one killed before it cleaned up
            skipped.append(f"{d}: {partial_note(p)}")
        elif not any((p / f"{stem}.json").is_file() for stem in RESULTS):
            skipped.append(f"{d} holds no interp result file ({', '.join(s + '.json' for s in RESULTS)})")
        else:
            done.append(p)
    if not done:
        raise InvalidInputError("; ".join(skipped))
    checked = [(p, *_report_inputs(p)) for p in done]  # every folder's files checked before any page is written
    for note in skipped:
        print_line(f"skipped {note}", "note")
    for p, run, results in checked:
        print_line(f"{write_report(p, run, results)}")


def _report_inputs(folder):
    """A run folder's run.json and result files as `interp report` reads them: each file through the checked
    JSON reader (damaged, cut short, nested too deeply, not an object) and each result's fields checked; one
    error naming the file otherwise."""
    from interp.figures.report import RERUN, check_result, result_files
    from interp.runtime.jsonio import read_json

    f = folder / "run.json"
    run = read_json(f, "run record", "the run's record is damaged: rerun the command (or remove run.json to build "
                                     "the page without it)") if f.is_file() else {}
    results = [(stem, check_result(stem, read_json(r, "result file", RERUN, want=None), r))
               for stem, r in result_files(folder)]
    return run, results
