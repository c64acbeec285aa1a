"""The `interp` command line. Thin and lazy: parse, build the config, call the library.

Any `InterpError` (bad model name, bad head id, unsupported architecture, ...) becomes a one-line
message on stderr and exit code 2; typer's own usage errors also exit with 2.
"""

from __future__ import annotations

import sys

from .app import app


def main(argv: list[str] | None = None) -> None:
    from ..errors import InterpError
    from .common import commit_staged

    ok = False
    try:
        rc = app(args=argv, standalone_mode=False)  # non-standalone click returns typer.Exit's code
        ok = not (isinstance(rc, int) and rc != 0)
    except InterpError as e:
        from rich.console import Console

        Console(stderr=True).print(f"[bold red]error:[/] {e}", highlight=False, soft_wrap=True)
        sys.exit(2)
    except KeyboardInterrupt:
        sys.exit(130)
    except Exception as e:
        # typer vendors click; its usage errors carry show() and exit_code (2)
        if hasattr(e, "show") and hasattr(e, "exit_code"):
            e.show()
            sys.exit(e.exit_code)
        if type(e).__name__ == "Abort":
            sys.exit(1)
        raise
    finally:
        commit_staged(ok)  # a failed run leaves --out as it was
    if isinstance(rc, int) and rc != 0:
        sys.exit(rc)


__all__ = ["app", "main"]
