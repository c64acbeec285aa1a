"""The typer application: every command registered in one place, plus `interp models`, `info`, `report`
and `organisms`."""

from __future__ import annotations

import typer

from interp.cli.catalog_cmds import models_app, texts_app
from interp.cli.info_cmds import info
from interp.cli.report_cmds import report

HELP = {"help_option_names": ["-h", "--help"]}
app = typer.Typer(add_completion=True, no_args_is_help=True, pretty_exceptions_show_locals=False,
                  context_settings=HELP, help="Mechanistic interpretability of open-weight language models.")


def _version(value: bool):
    if value:
        from interp import __version__

        typer.echo(f"interp {__version__}")
        raise typer.Exit()


@app.callback()
def _quiet(version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                        help="Print interp's version and exit.")):
    """Mechanistic interpretability of open-weight language models."""
    import os
    import sys

    if "transformers" not in sys.modules:  # read when transformers is imported: no import here (a fast start)
        os.environ.setdefault("TRANSFORMERS_VERBOSITY", "error")
        return
    from transformers.utils import logging as hf_logging

    hf_logging.disable_progress_bar()
    hf_logging.set_verbosity_error()

detect_app = typer.Typer(no_args_is_help=True, help="Detect head types.", context_settings=HELP)


app.command()(info)


def _register_analyses():
    """Every analysis's commands, from its record (interp.runtime.records: `detect X` under `interp detect`), then
    the command groups and the tools that run no analysis (plan, compare)."""
    from interp.cli.compare_cmds import compare
    from interp.cli.plan_cmds import plan
    from interp.runtime.records import commands, resolve

    analyses = commands()
    for name, path in analyses.items():
        if name.startswith("detect "):
            detect_app.command(name.removeprefix("detect "))(resolve(path))
    app.add_typer(detect_app, name="detect")
    app.add_typer(models_app, name="models")
    app.add_typer(texts_app, name="texts")
    for name, path in analyses.items():
        if not name.startswith("detect "):
            app.command(name)(resolve(path))
    app.command("plan")(plan)
    app.command("compare")(compare)


_register_analyses()


app.command()(report)


@app.command(context_settings={"allow_extra_args": True, "ignore_unknown_options": True,
                                "help_option_names": []}, add_help_option=False)
def organisms(ctx: typer.Context):
    """Build or evaluate the bundled model organisms: `interp organisms build NAME`, `interp organisms eval NAME`,
    `interp organisms sweep` (rope_theta variants: build, measure, head count vs theta), `interp organisms
    tokenizer` (same options as `python -m interp.organisms`; `interp organisms -h` and `interp organisms build -h`
    list them)."""
    from interp.organisms.__main__ import main as organisms_main

    raise typer.Exit(organisms_main(list(ctx.args)))


def _add_examples() -> None:
    """An Examples block at the end of every command's --help (from cli/examples.py)."""
    from interp.cli.examples import EXAMPLES, epilog

    for prefix, group in (("", app), ("detect ", detect_app), ("models ", models_app), ("texts ", texts_app)):
        for c in group.registered_commands:
            name = prefix + (c.name or c.callback.__name__).replace("_", "-")
            c.epilog = epilog(EXAMPLES[name])
    models_app.info.epilog = epilog(EXAMPLES["models"])
    texts_app.info.epilog = epilog(EXAMPLES["texts"])


_add_examples()
