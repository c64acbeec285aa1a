"""Run folders: one call of a command is one `RunContext` (its arguments, the folders it stages, the warnings it
raised, its memory options). A run writes into a staged hidden sibling of its folder (--out); only a run that
succeeds is moved there, with run.json written last, so a failed or interrupted run leaves the folder as it was
and a folder without run.json holds no finished run. The CLI and the organisms sweep both write their run
folders here; what a run prints (notes) and the pages it adds (a report) come in as callables."""

from __future__ import annotations

import json
import re
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Callable

from interp.errors import InvalidInputError
from interp.runtime.cost import Clock
from interp.runtime.jsonio import write_json

RUN_MARKER = "run.json"  # written last into every run folder: the command, the files, when it finished, its cost
PARTIAL = re.compile(r"^\.(?P<name>.+)\.partial-(?P<pid>\d+)$")  # a run's staging folder: .NAME.partial-PID


def _stderr_note(text: str) -> None:
    import sys

    print(f"note: {text}", file=sys.stderr)


@dataclass
class RunContext:
    """One call of a command. `staged`: (folder written into, --out, --overwrite) per run folder; `created`: parent
    folders of --out this call created (a failed run removes them if empty); `warnings`: its InterpWarnings,
    for run.json; `max_memory` / `device_map`: the parsed loading options, for the batch-size budget; `say`: how
    a note is shown (one line); `report(folder, run)`: what writes a run's pages into its folder before it is
    committed (None: no pages)."""

    argv: list[str] = field(default_factory=list)
    staged: list[tuple[Path, Path, bool]] = field(default_factory=list)
    created: list[Path] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    max_memory: dict | None = None
    device_map: str | None = None
    clock: Clock = field(default_factory=Clock)
    dtype: dict | None = None  # the model dtype asked, used and why (DtypeChoice): run.json's "dtype"
    say: Callable[[str], None] = _stderr_note
    report: Callable[[Path, dict], object] | None = None
    prog: str = "interp"  # what run.json's command starts with

    def compute(self) -> dict:
        """Wall and CPU seconds of this call so far, and torch's thread count: run.json's record of its cost."""
        return self.clock.compute()


_current = RunContext()


def current() -> RunContext:
    """The RunContext of this call."""
    return _current


def begin(argv: list[str], **kw) -> RunContext:
    """A fresh RunContext for a call (`kw`: its say, report, prog)."""
    global _current
    _current = RunContext(argv=list(argv), **kw)
    return _current


def other_rank() -> bool:
    """True in the processes of a torchrun launch other than rank 0: they compute their share of a sweep
    and write nothing (rank 0 writes for all)."""
    import os

    from interp.runtime.distributed import launched

    return launched() and os.environ.get("RANK", "0") != "0"


def previous_run(p: Path) -> dict | None:
    """The run.json of folder `p` (an empty dict when it is damaged), or None when `p` holds no run."""
    f = p / RUN_MARKER
    if not f.is_file():
        return None
    try:
        d = json.loads(f.read_text(encoding="utf-8"))
        return d if isinstance(d, dict) else {}
    except (OSError, ValueError):
        return {}


def out_dir(out: str | None, command: str, model: str, staged: bool = True, overwrite: bool = False,
            units: bool = True) -> Path:
    """The folder a command writes into. Staged (the default): a hidden sibling of --out, whose files
    `commit_staged` moves into --out only when the command succeeds, so a failed run leaves --out as
    it was. Unstaged (probe, whose store inside --out has its own atomic shards and resume; the organisms sweep,
    whose measures inside --out are its resume): --out itself. An --out that holds another run (its run.json) is
    refused unless `overwrite`: two runs never mix. `units`: finished sweep units of the call are kept beside
    --out (`runtime.distributed`), so a rerun of the same command resumes."""
    if out is None:
        stamp = time.strftime("%Y%m%d-%H%M%S")
        out = Path("runs") / f"{command}-{Path(model).name}-{stamp}"
    p = Path(out)
    if p.exists() and not p.is_dir():
        raise InvalidInputError(f"--out {out} exists and is not a directory")
    for stage, final, _ in current().staged:
        if final == p:
            return stage
    prev = previous_run(p)
    if prev is not None and not overwrite:
        raise InvalidInputError(f"--out {out} already holds a run ({prev.get('command') or 'interp'}); pass "
                                "--overwrite to replace it, or choose another --out")
    from interp.runtime import distributed

    if distributed.launched() and not staged:
        raise InvalidInputError(f"`interp {command}` writes in place and does not shard: run it as one process "
                                "(without torchrun)")
    if units:
        distributed.init()
    if units and distributed.current() is None:  # finished sweep units of this command go beside --out (resume)
        distributed.begin(units_folder(p))
    if other_rank():  # computes its share; rank 0 writes the run
        import tempfile

        stage = Path(tempfile.mkdtemp(prefix=f"interp-rank{distributed.world().rank}-"))
        current().staged.append((stage, p, overwrite))
        return stage
    if not staged:
        try:
            p.mkdir(parents=True, exist_ok=True)
        except OSError as e:
            raise InvalidInputError(f"--out {out}: cannot create it ({e.strerror or e}); choose a writable "
                                    "location") from None
        current().staged.append((p, p, overwrite))
        return p
    import os
    import shutil

    stage = p.parent / f".{p.name}.partial-{os.getpid()}"
    shutil.rmtree(stage, ignore_errors=True)
    remove_stale_partials(p.parent)
    top = p.parent  # the outermost folder this call creates: removed again if the run fails
    while not top.parent.exists() and top.parent != top:
        top = top.parent
    if not top.exists():
        current().created.append(top)
    try:
        stage.mkdir(parents=True)
    except OSError as e:
        raise InvalidInputError(f"--out {out}: cannot create a folder in {p.parent} ({e.strerror or e}); "
                                "choose a writable location") from None
    current().staged.append((stage, p, overwrite))
    return stage


def partial_pid(p: Path) -> int | None:
    """The pid of the run staging in folder `p` (named .NAME.partial-PID), or None for any other folder."""
    m = PARTIAL.match(p.name)
    return int(m.group("pid")) if m else None


def partial_note(p: Path) -> str | None:
    """What the staging folder `p` of a run is, for `interp report` (not a run), or None for any other folder."""
    pid = partial_pid(p)
    if pid is None:
        return None
    if pid_alive(pid):
        return (f"the staging folder of a run still going (pid {pid}), not a run: its results go to "
                f"{p.parent / PARTIAL.match(p.name).group('name')} when it finishes")
    return (f"the staging folder of a run that was stopped (pid {pid} is not running), not a run: the next run "
            f"into {p.parent} removes it")


def pid_alive(pid: int) -> bool:
    """Whether a process `pid` runs on this machine (one of another user counts)."""
    import os

    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return False
    except PermissionError:
        return True
    return True


def remove_stale_partials(parent: Path) -> None:
    """Remove the staging folders in `parent` of runs whose process is gone (killed before it could clean up),
    with a note each; a running process's folder is left alone."""
    import shutil

    if not parent.is_dir():
        return
    for d in sorted(parent.iterdir()):
        pid = partial_pid(d)
        if pid is not None and d.is_dir() and not d.is_symlink() and not pid_alive(pid):
            shutil.rmtree(d, ignore_errors=True)
            current().say(f"removed {d}: the staging folder of a run that was stopped (pid {pid} is not running)")


def check_out_location(out: str | Path) -> None:
    """Refuse an --out where no folder can be made (a file on the way, a read-only or pseudo file system
    such as /proc or /sys), before any work: a probe folder is created at the first missing level and
    removed again, so nothing is left either way."""
    p = Path(out)
    top = p
    while not top.exists() and top.parent != top:
        if top.parent.exists() and not top.parent.is_dir():
            raise InvalidInputError(f"--out {out}: {top.parent} is not a directory; choose another --out")
        if not top.parent.exists():
            top = top.parent
            continue
        try:
            top.mkdir()
            top.rmdir()
        except OSError as e:
            raise InvalidInputError(f"--out {out}: cannot create a folder in {top.parent} ({e.strerror or e}); "
                                    "choose a writable location") from None
        return
    if p.exists() and not p.is_dir():
        raise InvalidInputError(f"--out {out} exists and is not a directory")


def units_folder(p: Path) -> Path:
    """Where the finished units of this command's sweep are kept until its run is written: beside --out,
    one folder per command line (--overwrite aside), so only a rerun of the same command reads them."""
    import hashlib

    words = [a for a in current().argv if a != "--overwrite"]
    return p.parent / f".{p.name}.units" / hashlib.sha256("\0".join(words).encode()).hexdigest()[:16]


def final_path(o: Path) -> Path:
    """--out for a staging folder (what messages and result files should name)."""
    return next((final for stage, final, _ in current().staged if stage == o), o)


def _remove(path: Path) -> None:
    import shutil

    if path.is_dir() and not path.is_symlink():
        shutil.rmtree(path)
    elif path.exists() or path.is_symlink():
        path.unlink()


def _commit(stage: Path, final: Path, overwrite: bool) -> None:
    import os

    from interp import __version__
    from interp.runtime import distributed

    marker = {"format": "interp-run", "command": " ".join([current().prog, *current().argv]), "files": [],
              "interp_version": __version__, "finished": time.strftime("%Y-%m-%dT%H:%M:%S%z"),
              "warnings": list(dict.fromkeys(current().warnings)), "compute": current().compute()}
    if current().dtype is not None:
        marker["dtype"] = current().dtype
    sw = distributed.current()
    if sw is not None and sw.units:  # sharded / resumable work units: how many, where they were computed
        marker["sweep"] = sw.summary()
    if current().report is not None:
        current().report(stage, marker)  # e.g. every figure page and index.html, from the result files alone
    if stage == final:  # unstaged: the files are in place already
        names = sorted(f.name for f in final.iterdir() if f.name != RUN_MARKER)
    else:
        names = sorted(f.name for f in stage.iterdir())
        prev = previous_run(final)
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
    run = current()
    try:
        while run.staged:
            stage, final, overwrite = run.staged[-1]
            if ok and stage.is_dir():
                _commit(stage, final, overwrite)
            run.staged.pop()
            if stage != final:
                shutil.rmtree(stage, ignore_errors=True)
    finally:
        for stage, final, _ in run.staged:
            if stage != final:
                shutil.rmtree(stage, ignore_errors=True)
        run.staged.clear()
        if not ok:
            for top in run.created:
                _remove_empty(top)
        run.created.clear()


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


def write_table(res, path: Path):
    """A result's tidy table (its `to_frame()`, or a DataFrame) as CSV beside its JSON, atomically; returns the
    DataFrame."""
    df = res.to_frame() if hasattr(res, "to_frame") else res
    tmp = path.with_suffix(".csv.partial")
    df.to_csv(tmp, index=False)
    tmp.replace(path)
    return df


def write_result(res, out: Path, stem: str) -> tuple[dict, object]:
    """A result as STEM.json (strict) and its tidy table STEM.csv in `out`. Returns (the result's dict, the
    table)."""
    d = res.to_dict()
    write_json(d, out / f"{stem}.json")
    return d, write_table(res, out / f"{stem}.csv")
