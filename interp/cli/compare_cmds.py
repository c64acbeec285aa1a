"""`interp compare A B`: do two runs (or two trees of runs) agree, number by number? Exit 0 when every result
number agrees within the tolerance, 1 when some do not, 2 when A or B is not a run folder."""

from __future__ import annotations

from pathlib import Path

import typer

from interp.cli.runs import RUN_MARKER
from interp.errors import InvalidInputError
from interp.runtime.compare import RunComparison, check_tolerances, compare_runs
from interp.runtime.jsonio import read_json

SHOWN = 5  # differences listed per file


def _run_folders(root: Path) -> dict[str, Path]:
    """Relative path -> run folder, for every run folder below root."""
    return {str(p.parent.relative_to(root)): p.parent for p in sorted(root.rglob(RUN_MARKER))}


def _results(folder: Path) -> dict[str, object]:
    out = {}
    for p in sorted(folder.glob("*.json")):
        if p.name == RUN_MARKER:
            continue
        out[p.name] = read_json(p, "result file", "is the run complete? rerun the command that wrote it (its "
                                f"{RUN_MARKER} names it)", want=None)
    return out


def _fmt(x) -> str:
    s = f"{x:.6g}" if isinstance(x, float) else str(x)
    return s if len(s) <= 60 else s[:57] + "..."


def compare(a: str = typer.Argument(..., help="A run folder, or a folder of run folders (e.g. runs/results-real)."),
            b: str = typer.Argument(..., help="The run folder (or folder of runs) to compare it with."),
            atol: float = typer.Option(1e-8, "--atol", help="Numbers agree when |a - b| <= atol + rtol |b| (a finite "
                                       "number >= 0)."),
            rtol: float = typer.Option(1e-6, "--rtol", help="Relative part of the tolerance (see --atol)."),
            as_json: bool = typer.Option(False, "--json", help="Print the comparison as JSON on stdout.")):
    """Do two runs agree? Every number of their result files compared by place (settings compared apart;
    provenance and cost left out). Exit 0: all agree within the tolerance; 1: some differ; 2: not run folders."""
    from rich.table import Table

    from interp.cli.output import stdout_console
    from interp.runtime.jsonio import dumps

    check_tolerances(atol, rtol, "--atol", "--rtol")
    paths = [Path(name) for name in (a, b)]
    for name, p in zip((a, b), paths):
        if not p.is_dir():
            raise InvalidInputError(f"{name}: no such folder; pass two run folders (each with its {RUN_MARKER})")
    single = [(p / RUN_MARKER).is_file() for p in paths]
    if any(single) and not all(single):
        raise InvalidInputError(f"{a if single[0] else b} is a run folder and the other is not: compare a run "
                                "folder with a run folder, or a folder of runs with a folder of runs")
    ra, rb = ({".": paths[0]}, {".": paths[1]}) if all(single) else (_run_folders(paths[0]), _run_folders(paths[1]))
    for name, runs in ((a, ra), (b, rb)):
        if not runs:
            raise InvalidInputError(f"{name} holds no run ({RUN_MARKER} neither in it nor below it); pass folders "
                                    "written by an interp command's --out")
    common = [k for k in ra if k in rb]
    if not common:
        raise InvalidInputError(f"{a} and {b} have no run in common (same relative folder): "
                                f"{', '.join(list(ra)[:5])} vs {', '.join(list(rb)[:5])}")
    comps: dict[str, RunComparison] = {
        k: compare_runs(str(ra[k]), str(rb[k]), _results(ra[k]), _results(rb[k]), atol, rtol) for k in common}
    only_a, only_b = [k for k in ra if k not in rb], [k for k in rb if k not in ra]
    agree = all(c.agree for c in comps.values())
    if as_json:
        typer.echo(dumps({"agree": agree, "runs": {k: c.to_dict() for k, c in comps.items()},
                          "only_a": only_a, "only_b": only_b}, indent=2))
        raise typer.Exit(0 if agree else 1)

    con = stdout_console()
    t = Table(title=f"{a} vs {b} (agree: |a - b| <= {atol:g} + {rtol:g} |b|)")
    for col in ("run", "file", "numbers", "identical", "within tol", "max |a - b|", "at", "verdict"):
        t.add_column(col, justify="right" if col in ("numbers", "identical", "within tol", "max |a - b|") else "left")
    for k, c in comps.items():
        for f in c.files:
            verdict = "agree" if f.agree else "DIFFER"
            if f.settings:
                verdict += " (settings differ)"
            t.add_row(k, f.name, str(f.numbers), str(f.identical), str(f.within), f"{f.max_abs_diff:.3g}",
                      f.worst or "-", verdict)
        for n in c.only_a + c.only_b:
            t.add_row(k, n, "-", "-", "-", "-", "-", f"only in {'A' if n in c.only_a else 'B'}")
    con.print(t)
    for k, c in comps.items():
        for f in c.files:
            for title, items in (("settings", f.settings), ("differences", f.differences),
                                 ("structure", f.structure)):
                if items:
                    con.print(f"{k}/{f.name}: {len(items)} {title}" + (f" (first {SHOWN})" if len(items) > SHOWN
                                                                        else ""), highlight=False)
                    for d in items[:SHOWN]:
                        con.print(f"  {d.path}: {_fmt(d.a)} vs {_fmt(d.b)}", highlight=False)
    for side, ks in (("A", only_a), ("B", only_b)):
        if ks:
            con.print(f"runs only in {side}: {', '.join(ks)}", highlight=False)
    n = sum(f.numbers for c in comps.values() for f in c.files)
    same = sum(f.identical for c in comps.values() for f in c.files)
    con.print(f"{'agree' if agree else 'differ'}: {len(comps)} run(s), {n} numbers, {same} bit-identical",
              highlight=False)
    raise typer.Exit(0 if agree else 1)
