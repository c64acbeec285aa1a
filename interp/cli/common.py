"""Option parsing shared by the analysis commands (strings -> typed config, with clear errors)."""

from __future__ import annotations

import json
import time
from pathlib import Path

from ..errors import InvalidInputError


def other_rank() -> bool:
    """True in the processes of a torchrun launch other than rank 0: they compute their share of a sweep
    and print and write nothing (rank 0 speaks and writes for all)."""
    import os

    from ..distributed import launched

    return launched() and os.environ.get("RANK", "0") != "0"


def console(every_rank: bool = False):
    """The CLI's stderr console. Not a terminal (a log, a pipe, a test): 200 columns, so tables keep whole
    head and site names instead of truncating them to the default 80. Quiet on ranks other than 0 of a
    torchrun launch, unless `every_rank` (errors)."""
    import sys

    from rich.console import Console

    return Console(stderr=True, width=None if sys.stderr.isatty() else 200, quiet=other_rank() and not every_rank)


def stdout_console():
    """A console on stdout, 200 columns when stdout is not a terminal (see `console`); quiet on other ranks."""
    import sys

    from rich.console import Console

    return Console(width=None if sys.stdout.isatty() else 200, quiet=other_rank())


def echo(text: str, nl: bool = True) -> None:
    """typer.echo on rank 0 only (the one result a sharded sweep prints)."""
    import typer

    if not other_rank():
        typer.echo(text, nl=nl)


def heads_cell(heads, shown: int = 6) -> str:
    """A table's heads column: the heads themselves (the first `shown` and a count when there are more)."""
    if not heads:
        return "-"
    return ",".join(heads) if len(heads) <= shown else f"{','.join(heads[:shown])},... ({len(heads)})"


def finite(value):
    """typer callback: a float option must be a finite number (nan and inf are refused, not passed on)."""
    import math

    import typer

    if value is not None and not math.isfinite(value):
        raise typer.BadParameter(f"{value} is not a finite number")
    return value


def unit_interval(value):
    """typer callback: a float option in [0, 1]."""
    import typer

    finite(value)
    if value is not None and not 0 <= value <= 1:
        raise typer.BadParameter(f"{value} is not in [0, 1]")
    return value


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


_ESCAPES = {"n": "\n", "t": "\t", "r": "\r", "\\": "\\", "0": "\0", "'": "'", '"': '"'}


def parse_escapes(text: str, what: str = "--separator") -> str:
    """Backslash escapes (\\n \\t \\r \\\\ \\xHH \\uXXXX) decoded; every other character is kept as it is,
    so non-ASCII text passes through unchanged (unicode_escape would garble it). A bad escape is an error."""
    import re

    def one(m):
        e = m.group(1)
        if not e:
            raise InvalidInputError(f"{what} {text!r} ends in a lone backslash; write \\\\ for a backslash")
        if e in _ESCAPES:
            return _ESCAPES[e]
        if len(e) > 1:
            return chr(int(e[1:], 16))
        raise InvalidInputError(f"{what} {text!r}: bad escape \\{e}; use \\n, \\t, \\r, \\\\, \\xHH or \\uXXXX")

    return re.sub(r"\\(x[0-9a-fA-F]{2}|u[0-9a-fA-F]{4}|.?)", one, text, flags=re.S)


def parse_max_memory(text: str | None) -> dict | None:
    """--max-memory "0=20GiB,1=20GiB,cpu=60GiB" -> {0: "20GiB", 1: "20GiB", "cpu": "60GiB"} (accelerate's form)."""
    import re

    if text is None:
        return None
    out = {}
    for part in (p.strip() for p in text.split(",") if p.strip()):
        m = re.fullmatch(r"(cpu|disk|mps|cuda:\d+|\d+)=(\d+(?:\.\d+)?\s*(?:[KMGT]i?B))", part, re.I)
        if m is None:
            raise InvalidInputError(f"--max-memory {text!r}: write DEVICE=SIZE pairs, e.g. 0=20GiB,cpu=60GiB")
        key = m.group(1).lower()
        key = int(key.split(":")[-1]) if key.split(":")[-1].isdigit() else key
        out[key] = m.group(2).replace(" ", "")
    if not out:
        raise InvalidInputError("--max-memory is empty")
    return out


def niah_config(lengths: str, depths: str, seeds: int, haystack, needles, separator: str, max_new_tokens,
                paired: bool = False):
    """The NIAH grid of the options; `paired` (an experiment comparing conditions) needs >= 2 prompts.
    `needles`: "corpus" | "standard" (a built-in set; ./corpus for a file of that name) | a JSONL file | None
    (picked from the model by `niah_for_model`); `haystack`: a text file, a directory of .txt files or None."""
    from ..tasks.niah import NEEDLE_SOURCES, NiahConfig, haystack_files

    source = None
    if needles in NEEDLE_SOURCES:
        source, needles = needles, None
    if needles is not None and Path(needles).is_dir():
        raise InvalidInputError(f"--needles {needles} is a directory, not a file")
    if needles is not None and not Path(needles).is_file():
        raise InvalidInputError(f"--needles {needles}: no such file (or pass corpus or standard)")
    if haystack is not None:
        if not Path(haystack).exists():
            raise InvalidInputError(f"--haystack {haystack}: no such file or directory")
        haystack_files(haystack)  # a directory without .txt files is refused before the model loads
    cfg = NiahConfig(context_lengths=parse_ints(lengths, "--lengths"), depths=parse_floats(depths, "--depths"),
                     n_seeds=seeds, haystack_file=haystack, needles_file=needles,
                     separator=parse_escapes(separator), max_new_tokens=max_new_tokens, needle_source=source)
    n = len(cfg.context_lengths) * len(cfg.depths) * cfg.n_seeds
    if paired and n < 2:
        raise InvalidInputError(f"the NIAH grid has {n} prompt: paired comparisons need at least 2 (raise --n-seeds, "
                                "or add --lengths/--depths)")
    return cfg


def niah_for_model(m, niah, decode: bool = True):
    """The NIAH grid for the model, checked before any decoding: the needles picked from the model when
    --needles is not given (`tasks.niah.resolve_niah`: the corpus's for the organisms, the standard ones for
    every other model); refused (an encoder, no tokenizer, or past learned positions, with the NIAH --lengths
    that would fit; an encoder only where the prompts are decoded), or warned once past a RoPE model's trained length (the model's own check: an
    InterpWarning, printed and recorded in run.json). Returns the grid to use; `note_niah` speaks once the
    prompts are built."""
    from ..tasks.niah import check_context, resolve_niah

    if m.tokenizer is None:
        raise InvalidInputError("NIAH needs a tokenizer: this model was loaded without one")
    if decode and not m.spec.causal:
        raise InvalidInputError(f"{m.spec.architecture} is an encoder; it cannot decode")
    niah = resolve_niah(m, niah)
    if check_context(m.spec, niah):  # past the trained length: say it now, not at the first forward pass
        m.check_positions(max(niah.context_lengths) + (niah.max_new_tokens or 8))
    return niah


def note_niah(m, niah) -> None:
    """One note line when the corpus haystack stands in for real text (standard needles, no --haystack);
    called after the prompts are built, so a refused run prints only its error."""
    if niah.haystack_fallback:
        from ..tasks.niah import trained_on_corpus

        seen = (f"{m.name} was trained on this corpus (an organism), with the standard needles in it" if
                trained_on_corpus(m) else f"{m.name} was not trained on it; needles: {niah.needles}")
        console().print(f"note: the NIAH haystack is interp's synthetic corpus, an offline fallback ({seen}): pass "
                        "--haystack FILE or a directory of .txt files for real long text", highlight=False,
                        soft_wrap=True)


RUN_MARKER = "run.json"  # written last into every run folder: the command, the files, when it finished
_STAGED: list[tuple[Path, Path, bool]] = []  # (folder written into, --out, --overwrite) of this CLI call
ARGV: list[str] = []  # this CLI call's arguments (set by cli.main), for run.json
_CREATED: list[Path] = []  # parent folders of --out this call created (a failed run removes them if empty)
WARNINGS: list[str] = []  # InterpWarnings of this CLI call (printed on stderr by cli.main), for run.json


def show_warning(message, category, filename, lineno, file=None, line=None, _default=None):
    """warnings.showwarning for the CLI: an InterpWarning is one 'warning: ...' line on stderr and is
    recorded for run.json; other warnings go to Python's default display."""
    from ..errors import InterpWarning

    if isinstance(message, InterpWarning) or (isinstance(category, type) and issubclass(category, InterpWarning)):
        WARNINGS.append(str(message))
        console().print(f"[yellow]warning[/]: {message}", highlight=False, soft_wrap=True)
    elif _default is not None:
        _default(message, category, filename, lineno, file, line)


def _previous_run(p: Path) -> dict | None:
    f = p / RUN_MARKER
    if not f.is_file():
        return None
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def out_dir(out: str | None, command: str, model: str, staged: bool = True, overwrite: bool = False) -> Path:
    """The folder a command writes into. Staged (the default): a hidden sibling of --out, whose files
    `commit_staged` moves into --out only when the command succeeds, so a failed run leaves --out as
    it was. Unstaged (probe, whose store inside --out has its own atomic shards and resume): --out itself.
    An --out that holds another run (its run.json) is refused unless `overwrite`: two runs never mix."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / f"{command}-{Path(model).name}-{stamp}"
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise InvalidInputError(f"--out {out} exists and is not a directory")
    for stage, final, _ in _STAGED:
        if final == p:
            return stage
    prev = _previous_run(p)
    if prev is not None and not overwrite:
        raise InvalidInputError(f"--out {out} already holds a run ({prev.get('command') or 'interp'}); pass "
                                "--overwrite to replace it, or choose another --out")
    from .. import distributed

    if distributed.launched() and not staged:
        raise InvalidInputError(f"`interp {command}` writes in place and does not shard: run it as one process "
                                "(without torchrun)")
    distributed.init()
    if distributed.current() is None:  # finished sweep units of this command go beside --out (resume)
        distributed.begin(units_folder(p))
    if other_rank():  # computes its share; rank 0 writes the run
        import tempfile

        stage = Path(tempfile.mkdtemp(prefix=f"interp-rank{distributed.world().rank}-"))
        _STAGED.append((stage, p, overwrite))
        return stage
    if not staged:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InvalidInputError(f"--out {out}: cannot create it ({e.strerror or e}); choose a writable "
                                    "location") from None
        _STAGED.append((p, p, overwrite))
        return p
    import os
    import shutil

    stage = p.parent / f".{p.name}.partial-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    top = p.parent  # the outermost folder this call creates: removed again if the run fails
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    if not top.exists():
        _CREATED.append(top)
    try:
        stage.mkdir(parents=True)
    except OSError as e:
        raise InvalidInputError(f"--out {out}: cannot create a folder in {p.parent} ({e.strerror or e}); "
                                "choose a writable location") from None
    _STAGED.append((stage, p, overwrite))
    return stage


def units_folder(p: Path) -> Path:
    """Where the finished units of this command's sweep are kept until its run is written: beside --out,
    one folder per command line (--overwrite aside), so only a rerun of the same command reads them."""
    import hashlib

    words = [a for a in ARGV if a != "--overwrite"]
    return p.parent / f".{p.name}.units" / hashlib.sha256("\0".join(words).encode()).hexdigest()[:16]


def final_path(o: Path) -> Path:
    """--out for a staging folder (what messages and result files should name)."""
    return next((final for stage, final, _ in _STAGED if stage == o), o)


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _commit(stage: Path, final: Path, overwrite: bool) -> None:
    import os

    from .. import __version__
    from ..report import write_report

    from .. import distributed

    marker = {"format": "interp-run", "command": " ".join(["interp", *ARGV]), "files": [],
              "interp_version": __version__, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "warnings": list(dict.fromkeys(WARNINGS))}
    sw = distributed.current()
    if sw is not None and sw.units:  # sharded / resumable work units: how many, where they were computed
        marker["sweep"] = sw.summary()
    write_report(stage, marker)  # every figure page and index.html, from the result files alone
    if stage == final:  # unstaged: the files are in place already
        names = sorted(f.name for f in final.iterdir() if f.name != RUN_MARKER)
    else:
        names = sorted(f.name for f in stage.iterdir())
        prev = _previous_run(final)
        earlier = set((prev or {}).get("files") or [])
        clash = [n for n in names if (final / n).exists() and n not in earlier]
        if clash and not overwrite:
            raise InvalidInputError(f"--out {final} already has {', '.join(clash[:5])} (not from an interp run); "
                                    "nothing was written: pass --overwrite to replace them, or choose another --out")
        final.mkdir(parents=True, exist_ok=True)
        if overwrite:  # the earlier run's files go, so the folder holds one run
            for n in sorted(earlier - set(names)):
                if "/" not in n and n not in ("", ".", ".."):
                    _remove(final / n)
        for n in names:
            dest = final / n
            if dest.is_dir() and not dest.is_symlink():
                _remove(dest)
            os.replace(stage / n, dest)
    marker["files"] = names
    write_json(marker, final / RUN_MARKER)  # last: a folder without it holds no finished run


def commit_staged(ok: bool) -> None:
    """Move the staged files into --out and write run.json last (ok), or drop them (a failed run).
    A commit that would mix two runs raises InvalidInputError and drops the staged files."""
    import shutil

    ok = ok and not other_rank()  # other ranks of a sharded sweep write nothing
    try:
        while _STAGED:
            stage, final, overwrite = _STAGED[-1]
            if ok and stage.is_dir():
                _commit(stage, final, overwrite)
            _STAGED.pop()
            if stage != final:
                shutil.rmtree(stage, ignore_errors=True)
    finally:
        for stage, final, _ in _STAGED:
            if stage != final:
                shutil.rmtree(stage, ignore_errors=True)
        _STAGED.clear()
        if not ok:
            for top in _CREATED:
                _remove_empty(top)
        _CREATED.clear()


def _remove_empty(top: Path) -> None:
    """Remove `top` if it holds nothing but empty folders."""
    if not top.is_dir():
        return
    for d in sorted((x for x in top.rglob("*") if x.is_dir()), key=lambda x: -len(x.parts)):
        try:
            d.rmdir()
        except OSError:
            return
    try:
        top.rmdir()
    except OSError:
        pass


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


def write_result(res, out: Path, stem: str, as_json: bool = False, csv: bool = False) -> dict:
    """A result as STEM.json (strict) and its tidy table STEM.csv in `out`; the JSON on stdout with
    `as_json`, else the table with `csv`. Returns the result's dict."""
    d = res.to_dict()
    write_json(d, out / f"{stem}.json")
    write_table(res, out / f"{stem}.csv", echo_=csv and not as_json)
    if as_json:
        echo(dumps(d))
    return d


def write_table(res, path: Path, echo_: bool = False) -> None:
    """A result's tidy table (its `to_frame()`, or a DataFrame) as CSV beside its JSON, atomically; on
    stdout with echo_."""
    df = res.to_frame() if hasattr(res, "to_frame") else res
    tmp = path.with_suffix(".csv.partial")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    if echo_:
        echo(df.to_csv(index=False), nl=False)


class _LazyProgress:
    """A rich progress bar that appears at the first step: a run refused while it checks its inputs prints
    only its one-line error, not an empty bar."""

    def __init__(self, total, description: str):
        from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

        self.prog = Progress(TextColumn("{task.description}"), BarColumn(), MofNCompleteColumn(), TimeElapsedColumn(),
                             console=console(), transient=False)
        self.task = self.prog.add_task(description, total=total)
        self.started = False

    def advance(self, n: int) -> None:
        if not self.started:
            self.prog.start()
            self.started = True
        self.prog.advance(self.task, n)

    def __enter__(self):
        return self

    def __exit__(self, *exc):
        if self.started:
            self.prog.stop()
        return False


def progress_bar(total: int | None, description: str):
    """(context manager, advance(n)) of a progress bar on stderr, shown from the first advance."""
    p = _LazyProgress(total, description)
    return p, p.advance
