"""Runs that are stopped leave nothing behind: SIGTERM (like Ctrl-C) drops the run's staging folder
(.NAME.partial-PID), a staging folder left by a killed run (its pid gone) is removed by the next run into the
same parent and skipped with a note by `interp report`, a running process's is left alone, and a finished
cache leaves no lock naming its pid."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
RUN = ["detect", "induction", "-m", "tiny-random-gpt2", "--copy-lengths", "6", "--n-seqs", "3", "--heads", "L1H1",
       "--draws", "1", "--copy-tokens", "40", "--n-boot", "100"]


def _dead_pid() -> int:
    p = subprocess.Popen([sys.executable, "-c", "pass"])
    p.wait()
    return p.pid


def _partial(parent: Path, name: str, pid: int) -> Path:
    d = parent / f".{name}.partial-{pid}"
    d.mkdir(parents=True)
    (d / "induction.json").write_text("{}")
    return d


def test_a_killed_runs_staging_folder_is_removed_by_the_next_run(tmp_path, capsys):
    dead = _partial(tmp_path, "old", _dead_pid())
    live = _partial(tmp_path, "other", os.getpid())  # this process runs: its folder is not touched
    code, _, err = run_cli(RUN + ["--out", str(tmp_path / "new")], capsys)
    assert code == 0, err
    assert not dead.exists() and live.is_dir()
    assert f"note: removed {dead}: the staging folder of a run that was stopped" in err
    assert (tmp_path / "new" / "run.json").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted(["new", live.name])


def test_report_skips_staging_folders_with_a_note(tmp_path, capsys):
    code, _, err = run_cli(RUN + ["--out", str(tmp_path / "run")], capsys)
    assert code == 0, err
    dead, live = _partial(tmp_path, "a", _dead_pid()), _partial(tmp_path, "b", os.getpid())
    code, _, err = run_cli(["report", str(tmp_path / "run"), str(dead), str(live)], capsys)
    assert code == 0, err
    assert f"note: skipped {dead}: the staging folder of a run that was stopped" in err
    assert f"note: skipped {live}: the staging folder of a run still going (pid {os.getpid()})" in err
    assert (tmp_path / "run" / "index.html").is_file()
    code, _, err = run_cli(["report", str(dead)], capsys)  # nothing else: a clear error, exit 2
    assert code == 2 and "error:" in err and "not running), not a run" in err


def test_sigterm_during_a_run_leaves_no_staging_folder(tmp_path):
    env = {**os.environ, "PYTHONPATH": str(ROOT), "OMP_NUM_THREADS": "1"}
    args = ["ablate", "-m", "tiny-qwen2", "--heads", "L2H4", "--lengths", "256", "--depths", "0.5", "--n-seeds", "2",
            "--out", str(tmp_path / "run")]
    p = subprocess.Popen([sys.executable, "-c", "import sys; from interp.cli import main; main(sys.argv[1:])", *args],
                         env=env, cwd=ROOT, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    stage = tmp_path / f".run.partial-{p.pid}"
    deadline = time.monotonic() + 120
    while not stage.exists() and p.poll() is None and time.monotonic() < deadline:
        time.sleep(0.02)
    assert stage.exists(), "the run never staged its folder"
    p.send_signal(signal.SIGTERM)
    _, err = p.communicate(timeout=120)
    assert p.returncode == 128 + signal.SIGTERM, err
    assert list(tmp_path.iterdir()) == [], "a stopped run leaves nothing (no staging folder, no --out)"


def test_a_finished_cache_releases_its_lock(tmp_path, capsys):
    out = tmp_path / "store"
    code, _, err = run_cli(["cache", "-m", "tiny-qwen2", "-n", "4", "--max-length", "32", "--out", str(out)], capsys)
    assert code == 0, err
    assert (out / "manifest.json").is_file()
    assert not list(out.rglob(".lock")), "a finished cache leaves no lock naming its pid"
