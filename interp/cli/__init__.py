"""The `interp` command line. Thin and lazy: parse, build the config, call the library.

Any `InterpError` (bad model name, bad head id, unsupported architecture, ...) becomes a one-line
message on stderr and exit code 2; typer's own usage errors also exit with 2.
"""

from __future__ import annotations

import os
import sys

from interp.cli.app import app
from interp.runtime.records import model_commands


# Old option names, kept for one release: rewritten to the new name (with a deprecation warning) before
# click parses the command line, so they stay out of every --help. Keys: the command ("detect induction").
# ANALYSES: the commands of the analyses that run a model over prompts, whose --dtype was the model's
ANALYSES = model_commands()
RENAMED = {
    **{c: {"--dtype": "--model-dtype"} for c in ANALYSES},
    **{c: {"--dtype": "--model-dtype", "--seeds": "--n-seeds"} for c in
       ("detect retrieval", "ablate", "patch", "rope-zero", "rope-profile")},
    "detect induction": {"--dtype": "--model-dtype", "--lengths": "--copy-lengths", "--seqs": "--n-seqs"},
    # one vocabulary with `ablate --mode window`: --sinks first tokens and a --window of recent keys
    "detect retrieval": {"--dtype": "--model-dtype", "--seeds": "--n-seeds", "--sink": "--sinks", "--recent": "--window"},
    "cache": {"--dtype": "--store-dtype"},
}


def renamed_options(argv: list[str]) -> tuple[list[str], list[str]]:
    """argv with the old option names of its command replaced by the new ones, and one note per rename."""
    words = [a for a in argv[:2] if not a.startswith("-")]
    table = RENAMED.get(" ".join(words[:2]), RENAMED.get(words[0] if words else "", {}))
    out, notes = [], []
    for i, a in enumerate(argv):
        if a == "--":
            out += argv[i:]
            break
        name, eq, value = a.partition("=")
        if name in table:
            notes.append(f"{name} is renamed {table[name]} (the old name goes in the next release)")
            a = table[name] + eq + value
        out.append(a)
    return out, notes


def _end_sweep(ok: bool, refused: bool) -> None:
    """Close the call's sweep: its unit files go once the run is written, or when the run was refused (an
    InterpError: the rerun will differ); a run that crashed or was interrupted keeps them (and says so), so
    rerunning the same command resumes. Then leave the process group, if any."""
    from interp.runtime import distributed
    from interp.cli.output import print_line

    sw = distributed.current()
    distributed.end(ok or refused)
    ok = ok or refused
    kept = len(list(sw.folder.glob("*/*.json"))) if not ok and sw is not None and sw.folder is not None and \
        sw.folder.is_dir() else 0
    if kept:
        print_line(f"{kept} finished sweep units kept in {sw.folder}: rerun the same command to resume from them")
    distributed.finish()


def _utf8(arg: str) -> bool:
    try:
        arg.encode("utf-8")
        return True
    except UnicodeEncodeError:
        return False


def main(argv: list[str] | None = None) -> None:
    from interp.errors import InterpError
    from interp.cli import runs
    from interp.cli.runs import commit_staged
    from interp.runtime import interrupt

    import functools
    import warnings

    from interp.errors import InterpWarning

    argv = list(sys.argv[1:] if argv is None else argv)
    bad = next((a for a in argv if not _utf8(a)), None)
    if bad is not None:  # bytes that are not UTF-8 reach Python as lone surrogates: refused here, not deep inside
        shown = bad.encode("utf-8", "surrogateescape").decode("utf-8", "backslashreplace")
        print(f"error: the argument '{shown}' is not valid UTF-8 text; pass it in UTF-8 (e.g. write a byte as the "
              "escape \\xHH where an option takes escapes, such as --separator)", file=sys.stderr)
        sys.exit(2)
    runs.begin(argv)
    shown = warnings.showwarning
    warnings.showwarning = functools.partial(runs.show_warning, _default=shown)
    warnings.simplefilter("always", InterpWarning)
    argv, notes = renamed_options(argv)
    for n in notes:
        warnings.warn(InterpWarning(n))
    ok = refused = False
    with interrupt.watch():
        try:
            rc = app(args=argv, prog_name="interp", standalone_mode=False)  # returns typer.Exit's code
            if interrupt.received():  # a Ctrl-C or SIGTERM the run swallowed (or made an exit code): interrupted
                raise KeyboardInterrupt
            if not (isinstance(rc, int) and rc != 0):
                commit_staged(True)  # the files reach --out, run.json last; refuses to mix two runs
                ok = True
        except InterpError as e:
            from interp.cli.output import console, other_rank, print_line

            refused = True
            where = f" (rank {os.environ.get('RANK')})" if other_rank() else ""
            print_line(str(e), f"[bold red]error{where}[/]", console(every_rank=True))
            sys.exit(2)
        except KeyboardInterrupt:  # Ctrl-C or SIGTERM: the staged folder is dropped below
            sys.exit(interrupt.exit_code())
        except Exception as e:
            # typer vendors click; its usage errors carry show() and exit_code (2): one line, like our own errors
            if hasattr(e, "show") and hasattr(e, "exit_code"):
                if type(e).__name__ == "NoArgsIsHelpError" or not hasattr(e, "format_message"):
                    e.show()
                else:
                    ctx = getattr(e, "ctx", None)
                    where = f" (see `{ctx.command_path} --help`)" if ctx is not None else ""
                    print(f"error: {e.format_message()}{where}", file=sys.stderr)
                sys.exit(e.exit_code)
            if type(e).__name__ == "Abort":
                sys.exit(1)
            raise
        finally:
            commit_staged(False)  # whatever is still staged (a failed run) is dropped: --out stays as it was
            _end_sweep(ok, refused)
        warnings.showwarning = shown
    if isinstance(rc, int) and rc != 0:
        sys.exit(rc)


__all__ = ["app", "main"]
