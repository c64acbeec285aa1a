"""Sharded sweeps (interp.runtime.distributed): torchrun with 2 gloo processes gives the one-process result,
and a sweep killed mid-way resumes from its finished units without computing them again."""

import json
import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import numpy as np
import pytest

from interp.runtime import distributed

pytestmark = pytest.mark.slow  # the heavy tier: torchrun launches and killed subprocesses

BIN = Path(sys.executable).parent
ENV = {**os.environ, "OPENBLAS_NUM_THREADS": "1", "OMP_NUM_THREADS": "1", "HF_HUB_OFFLINE": "1"}
ENV.pop("WORLD_SIZE", None)

NIAH = ["--lengths", "256", "--depths", "0,0.5,1", "--n-seeds", "2", "--batch-size", "2"]
COMMANDS = {
    "detect": (["detect", "retrieval", *NIAH], "retrieval.json"),
    "ablate": (["ablate", "--heads", "L2H4,L2H5", "--draws", "2", *NIAH], "ablation.json"),
    "rope-zero": (["rope-zero", "--heads", "L2H4,L2H5", "--dims", "0,8", "--head-draws", "1", "--random-draws", "1", *NIAH], "rope_zero.json"),
    "patch": (["patch", "--task", "niah", "--lengths", "128", "--depths", "0,1", "--n-seeds", "2",
               "--site", "head_out,resid_pre"], "patching.json"),
}


def _interp(args, out, nproc=1, **kw):
    if nproc == 1:
        cmd = [str(BIN / "interp"), *args, "--out", str(out)]
    else:  # torchrun's own launcher (elastic agent, c10d rendezvous on a free port), gloo on CPU
        cmd = [str(BIN / "torchrun"), "--nproc-per-node", str(nproc), "--rdzv-backend", "c10d",
               "--rdzv-endpoint", "localhost:0", "--no-python", str(BIN / "interp"), *args, "--out", str(out)]
    return subprocess.run(cmd, env=ENV, capture_output=True, text=True, timeout=600, **kw)


def _result(folder: Path, name: str) -> dict:
    d = json.loads((folder / name).read_text())
    d.pop("provenance")  # time stamps, and world_size (checked apart)
    return d


@pytest.fixture(scope="module")
def single(tmp_path_factory):
    """The one-process runs every sharded run is compared with."""
    root = tmp_path_factory.mktemp("single")
    for name, (args, _) in COMMANDS.items():
        r = _interp(args, root / name)
        assert r.returncode == 0, r.stderr
    return root


@pytest.mark.parametrize("name", list(COMMANDS))
def test_two_gloo_processes_equal_one(name, single, tmp_path):
    args, result = COMMANDS[name]
    r = _interp(args, tmp_path / "run", nproc=2)
    assert r.returncode == 0, r.stderr
    assert _result(tmp_path / "run", result) == _result(single / name, result)
    prov = json.loads((tmp_path / "run" / result).read_text())["provenance"]
    assert prov["world_size"] == 2
    one = json.loads((single / name / "run.json").read_text())["sweep"]
    two = json.loads((tmp_path / "run" / "run.json").read_text())["sweep"]
    assert one == {"world_size": 1, "units": one["units"], "computed": one["units"], "reused": 0}
    assert two == {**one, "world_size": 2} and two["units"] > 2
    assert json.loads((single / name / result).read_text())["provenance"]["world_size"] == 1
    # one result: rank 1 wrote nothing anywhere near --out, and no unit files stay once the run is written
    assert sorted(p.name for p in tmp_path.iterdir()) == ["run"]
    assert r.stdout.count("written to") <= 1


def test_killed_rank_resumes_without_recomputing(single, tmp_path):
    """Kill rank 1 while the sweep runs; torchrun stops rank 0 too; the rerun reads every finished unit back."""
    args = ["ablate", "--heads", "L2H4,L2H5", "--draws", "2", "--lengths", "256", "--depths", "0,0.25,0.5,0.75,1",
            "--n-seeds", "4", "--batch-size", "1"]
    out = tmp_path / "run"
    cmd = [str(BIN / "torchrun"), "--nproc-per-node", "2", "--rdzv-backend", "c10d", "--rdzv-endpoint", "localhost:0",
           "--no-python", str(BIN / "interp"), *args, "--out", str(out)]
    proc = subprocess.Popen(cmd, env=ENV, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True)
    units = tmp_path / ".run.units"
    victim, deadline = None, time.time() + 300
    while victim is None and time.time() < deadline and proc.poll() is None:
        for f in units.glob("*/*/*.json") if units.is_dir() else ():
            try:
                d = json.loads(f.read_text())
            except (OSError, ValueError):
                continue
            if d["rank"] == 1 and len(list(units.glob("*/*/*.json"))) >= 4:
                victim = d["pid"]
                break
        time.sleep(0.05)
    assert victim is not None, "no unit of rank 1 appeared (the sweep finished or failed first)"
    os.kill(victim, signal.SIGKILL)
    proc.communicate(timeout=300)
    assert proc.returncode != 0
    assert not (out / "run.json").exists()  # no result that looks finished
    kept = sorted(units.glob("*/*/*.json"))
    assert kept, "the finished units must stay for the rerun"
    total = 4 * (5 * 4)  # conditions (baseline, target, 2 draws) x prompts (batch size 1)
    assert len(kept) < total

    r = _interp(args, out, nproc=2)
    assert r.returncode == 0, r.stderr
    sweep = json.loads((out / "run.json").read_text())["sweep"]
    assert sweep == {"world_size": 2, "units": total, "computed": total - len(kept), "reused": len(kept)}
    assert not units.exists()
    ref = _interp(args, tmp_path / "single")
    assert ref.returncode == 0, ref.stderr
    assert _result(out, "ablation.json") == _result(tmp_path / "single", "ablation.json")


def test_unit_files_are_exact_and_keyed(tmp_path):
    """In-process: a second sweep over the same folder reads units back (fn not called) with the same
    values, bit for bit; other keys or names are computed afresh."""
    calls = []
    vals = {"f64": np.array([np.pi, np.nan, -np.inf, 1e-300]), "f32": np.float32([1 / 3, 2.5]),
            "i": np.arange(5, dtype=np.int64), "nested": [{"x": 0.1 + 0.2, "t": (1, 2)}], "none": None}

    def fn(i):
        calls.append(i)
        return {**vals, "i": vals["i"] + i}

    with distributed.sweep(tmp_path / "u") as s:
        a = distributed.map_units("t", 3, fn, key="k")
    assert calls == [0, 1, 2] and s.computed == 3 and s.reused == 0
    with distributed.sweep(tmp_path / "u") as s:
        b = distributed.map_units("t", 3, fn, key="k")
    assert calls == [0, 1, 2] and s.reused == 3
    for x, y in zip(a, b):
        for k in ("f64", "f32", "i"):
            assert x[k].dtype == y[k].dtype and x[k].tobytes() == y[k].tobytes()
        assert x["nested"] == y["nested"] == [{"x": 0.1 + 0.2, "t": [1, 2]}]
    assert a[0]["f32"].dtype == np.float32
    with distributed.sweep(tmp_path / "u") as s:
        distributed.map_units("t", 3, fn, key="other")
    assert calls == [0, 1, 2, 0, 1, 2] and s.computed == 3
    # without a sweep and a launcher: a plain loop, same values
    c = distributed.map_units("t", 3, fn, key="k")
    assert all(x["f64"].tobytes() == y["f64"].tobytes() for x, y in zip(a, c))


def test_damaged_unit_file_is_recomputed(tmp_path):
    with distributed.sweep(tmp_path / "u"):
        distributed.map_units("t", 2, lambda i: np.arange(3) * i, key="k")
    f = sorted((tmp_path / "u").glob("*/*.json"))[1]
    f.write_text(f.read_text()[:20])
    calls = []
    with distributed.sweep(tmp_path / "u") as s:
        out = distributed.map_units("t", 2, lambda i: calls.append(i) or np.arange(3) * i, key="k")
    assert calls == [1] and s.reused == 1 and out[1].tolist() == [0, 1, 2]


def test_in_place_commands_refuse_torchrun(tmp_path):
    env = {**ENV, "WORLD_SIZE": "2", "RANK": "0", "LOCAL_RANK": "0", "MASTER_ADDR": "localhost", "MASTER_PORT": "1"}
    r = subprocess.run([str(BIN / "interp"), "probe", "--out", str(tmp_path / "p")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2
    assert "does not shard" in r.stderr and "Traceback" not in r.stderr


def test_sharded_cache_writes_the_one_process_store(tmp_path):
    """`interp cache` under torchrun: shards dealt out over 2 ranks, rank 0 writes the manifest; the shards
    (files, sizes, CRC-32 of every byte, offsets) equal a one-process store's, and it verifies."""
    from interp.store import open_store

    args = ["cache", "--n-sequences", "40", "--shard-size", "8", "--batch-size", "4", "--json"]
    assert _interp(args, tmp_path / "one").returncode == 0
    r = _interp(args, tmp_path / "two", nproc=2)
    assert r.returncode == 0, r.stderr
    one, two = (json.loads((tmp_path / n / "manifest.json").read_text()) for n in ("one", "two"))
    assert len(two["shards"]) == 5 and two["shards"] == one["shards"]
    assert two["world_size"] == 2 and two["complete"] and two["n_tokens"] == one["n_tokens"]
    open_store(tmp_path / "two").verify()
    assert r.stdout.count('"world_size": 2') == 1  # one summary, from rank 0


def test_replica_gpus_and_memory_per_rank():
    """--device-map under torchrun: each rank's copy gets its own contiguous GPUs, and accelerate's max_memory
    lists only those (the user's sizes kept, cpu shared)."""
    from interp.errors import InvalidInputError

    assert [distributed.replica_gpus(8, r, 4) for r in range(4)] == [[0, 1], [2, 3], [4, 5], [6, 7]]
    assert distributed.replica_gpus(8, 1, 8) == [1] and distributed.replica_gpus(3, 1, 2) == [1]
    with pytest.raises(InvalidInputError, match="at least one GPU"):
        distributed.replica_gpus(2, 0, 4)
    with pytest.raises(InvalidInputError, match="is not a rank"):
        distributed.replica_gpus(8, 4, 4)
    mm = distributed.replica_max_memory({2: "70GiB", 0: "10GiB", "disk": "1TiB"}, [2, 3], {2: 80, 3: 81}, 5)
    assert mm == {2: "70GiB", 3: 81, "disk": "1TiB", "cpu": 5}
    assert distributed.replica_max_memory({"cpu": "9GiB"}, [0], {0: 1}, 5) == {0: 1, "cpu": "9GiB"}


def _sigint_default():
    """In the child: SIGINT back to its default action, so that Python installs its KeyboardInterrupt handler even
    when this suite was started in the background of a non-interactive shell (which starts it with SIGINT ignored,
    and an ignored SIGINT is inherited: then Ctrl-C does nothing, as the launcher asked)."""
    signal.signal(signal.SIGINT, signal.SIG_DFL)


def test_interrupted_single_process_sweep_says_so_and_resumes(tmp_path):
    """Ctrl-C (SIGINT) mid-sweep in one process: exit 130, the kept units are named on stderr, the rerun
    reads them back."""
    args = ["ablate", "--heads", "L2H4", "--draws", "2", "--lengths", "256", "--depths", "0,0.25,0.5,0.75,1",
            "--n-seeds", "4", "--batch-size", "1"]
    out = tmp_path / "run"
    proc = subprocess.Popen([str(BIN / "interp"), *args, "--out", str(out)], env=ENV, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, preexec_fn=_sigint_default)
    units, deadline = tmp_path / ".run.units", time.time() + 300
    while time.time() < deadline and proc.poll() is None and len(list(units.glob("*/*/*.json"))) < 3:
        time.sleep(0.05)
    assert proc.poll() is None, "the sweep ended before it could be interrupted"
    proc.send_signal(signal.SIGINT)
    _, err = proc.communicate(timeout=120)
    assert proc.returncode == 130
    kept = len(list(units.glob("*/*/*.json")))
    assert kept >= 3 and f"{kept} finished sweep units kept in" in " ".join(err.split())
    assert not (out / "run.json").exists()
    r = _interp(args, out)
    assert r.returncode == 0, r.stderr
    sweep = json.loads((out / "run.json").read_text())["sweep"]
    assert sweep["reused"] == kept and sweep["computed"] == sweep["units"] - kept


def test_a_ctrl_c_swallowed_inside_a_unit_still_stops_the_sweep(tmp_path, capsys, monkeypatch):
    """SIGINT whose KeyboardInterrupt some code catches and drops (as Python does for one raised in a destructor
    the garbage collector runs): the sweep stops before its next unit, exit 130, the finished units kept and
    named; without the SIGINT record the run would finish and write a result as if Ctrl-C had not been pressed."""
    previous = signal.signal(signal.SIGINT, signal.default_int_handler)  # a background launch may ignore SIGINT
    try:
        _swallowed_ctrl_c(tmp_path, capsys, monkeypatch)
    finally:
        signal.signal(signal.SIGINT, previous)


def _swallowed_ctrl_c(tmp_path, capsys, monkeypatch):
    from tests.helpers import run_cli

    calls = []
    real = distributed.normalize

    def normalize(result):
        calls.append(1)
        if len(calls) == 2:
            try:
                os.kill(os.getpid(), signal.SIGINT)
                time.sleep(1)  # the handler runs here and raises; the exception is dropped
            except KeyboardInterrupt:
                pass
        return real(result)

    monkeypatch.setattr(distributed, "normalize", normalize)
    args = ["ablate", "--heads", "L2H4", "--draws", "1", "--lengths", "256", "--depths", "0,1", "--n-seeds", "2",
            "--batch-size", "1"]
    out = tmp_path / "run"
    code, _, err = run_cli(args + ["--out", str(out)], capsys)
    units = list((tmp_path / ".run.units").glob("*/*/*.json"))
    assert code == 130 and len(calls) == 2 and len(units) == 2, (code, len(calls), err)
    assert "2 finished sweep units kept in" in err and not (out / "run.json").exists()
    assert signal.getsignal(signal.SIGINT) is signal.default_int_handler  # put back
    monkeypatch.setattr(distributed, "normalize", real)
    code, _, err = run_cli(args + ["--out", str(out)], capsys)
    assert code == 0, err
    sweep = json.loads((out / "run.json").read_text())["sweep"]
    assert sweep["reused"] == 2 and sweep["computed"] == sweep["units"] - 2
