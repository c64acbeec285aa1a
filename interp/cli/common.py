"""Option parsing shared by the analysis commands (strings -> typed config, with clear errors)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..errors import InvalidInputError


def _parse_list(text: str, what: str, cast, kind: str) -> tuple:
    try:
        vals = tuple(cast(x) for x in text.split(",") if x.strip())
    except ValueError:
        raise InvalidInputError(f"{what} must be comma-separated {kind}, got {text!r}") from None
    if not vals:
        raise InvalidInputError(f"{what} is empty")
    return vals


def parse_ints(text: str, what: str) -> tuple[int, ...]:
    return _parse_list(text, what, int, "integers")


def parse_floats(text: str, what: str) -> tuple[float, ...]:
    return _parse_list(text, what, float, "numbers")


def niah_config(lengths: str, depths: str, seeds: int, haystack, needles, separator: str, max_new_tokens):
    from ..tasks.niah import NiahConfig

    if max_new_tokens is not None and max_new_tokens < 1:
        raise InvalidInputError(f"--max-new-tokens must be >= 1, got {max_new_tokens}")
    for f, flag in ((haystack, "--haystack"), (needles, "--needles")):
        if f is not None and not Path(f).is_file():
            raise InvalidInputError(f"{flag} {f}: no such file")
    return NiahConfig(context_lengths=parse_ints(lengths, "--lengths"), depths=parse_floats(depths, "--depths"),
                      n_seeds=seeds, haystack_file=haystack, needles_file=needles,
                      separator=separator.encode().decode("unicode_escape"), max_new_tokens=max_new_tokens)


def niah_for_model(m, niah):
    """Check the NIAH grid against the model (refuse, or warn on stderr past the trained length)."""
    from rich.console import Console

    from ..tasks.niah import check_context

    for w in check_context(m.spec, niah):
        Console(stderr=True).print(f"[yellow]warning[/]: {w}", highlight=False)
    return niah


_STAGED: list[tuple[Path, Path]] = []  # (staging folder, --out) of this CLI call


def out_dir(out: str | None, command: str, model: str, staged: bool = True) -> Path:
    """The folder a command writes into. Staged (the default): a hidden sibling of --out, whose files
    `commit_staged` moves into --out only when the command succeeds, so a failed run leaves --out as
    it was. Unstaged (the activation store, which has its own atomic shards and resume): --out itself."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / f"{command}-{Path(model).name}-{stamp}"
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise InvalidInputError(f"--out {out} exists and is not a directory")
    if not staged:
        p.mkdir(parents=True, exist_ok=True)
        return p
    for stage, final in _STAGED:
        if final == p:
            return stage
    import os
    import shutil

    stage = p.parent / f".{p.name}.partial-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    stage.mkdir(parents=True)
    _STAGED.append((stage, p))
    return stage


def final_path(o: Path) -> Path:
    """--out for a staging folder (what messages and result files should name)."""
    return next((final for stage, final in _STAGED if stage == o), o)


def commit_staged(ok: bool) -> None:
    """Move the staged files into --out (ok) or drop them (a failed run)."""
    import os
    import shutil

    while _STAGED:
        stage, final = _STAGED.pop()
        if ok and stage.is_dir():
            final.mkdir(parents=True, exist_ok=True)
            for f in sorted(stage.iterdir()):
                dest = final / f.name
                if dest.is_dir() and not dest.is_symlink():
                    shutil.rmtree(dest)
                os.replace(f, dest)
        shutil.rmtree(stage, ignore_errors=True)


def strict(obj):
    """`obj` with every non-finite float replaced by null, so strict JSON parsers accept it. A dict that
    held any gets a "nonfinite" entry naming them ({"cohens_d": "-inf"}): the value is kept, as text."""
    import math

    if isinstance(obj, dict):
        out, bad = {}, {}
        for k, v in obj.items():
            if isinstance(v, float) and not math.isfinite(v):
                out[k] = None
                bad[str(k)] = "nan" if math.isnan(v) else ("inf" if v > 0 else "-inf")
            else:
                out[k] = strict(v)
        if bad:
            out["nonfinite"] = {**out.get("nonfinite", {}), **bad} if isinstance(out.get("nonfinite"), dict) else bad
        return out
    if isinstance(obj, (list, tuple)):
        return [None if isinstance(v, float) and not math.isfinite(v) else strict(v) for v in obj]
    return obj


def dumps(obj, **kw) -> str:
    """Strict JSON (no NaN/Infinity literals; see `strict`)."""
    return json.dumps(strict(obj), allow_nan=False, **kw)


def write_json(obj: dict, path: Path) -> None:
    """Write atomically (a half-written file never looks valid), as strict JSON."""
    tmp = path.with_suffix(path.suffix + ".partial")
    tmp.write_text(dumps(obj, indent=2))
    tmp.replace(path)


def write_table(res, path: Path, echo: bool = False) -> None:
    """A result's tidy table (its `to_frame()`, or a DataFrame) as CSV beside its JSON, atomically; on
    stdout with echo."""
    import typer

    df = res.to_frame() if hasattr(res, "to_frame") else res
    tmp = path.with_suffix(".csv.partial")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    if echo:
        typer.echo(df.to_csv(index=False), nl=False)


def progress_bar(total: int, description: str):
    from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

    from rich.console import Console

    prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                    console=Console(stderr=True), transient=False)
    task = prog.add_task(description, total=total)
    return prog, (lambda n: prog.advance(task, n))
