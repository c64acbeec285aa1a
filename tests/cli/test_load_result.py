"""`interp.load_result` on a run folder of every analysis the CLI writes (made by the real CLI on the tiny models):
the object is its record's result class, its `to_dict()` is the JSON on disk and `to_frame()` has rows; every
command that runs an analysis has a record, and a damaged or unknown file is one line naming it."""

import json
import shutil

import pytest

import interp
from interp.errors import InvalidInputError
from interp.runtime import records
from interp.runtime.jsonio import dumps
from tests.helpers import run_cli

NIAH = ["--lengths", "256", "--depths", "0.5", "--n-seeds", "2"]
# runs beyond the shared ones of conftest.RUNS (the `cli_runs` fixture): name -> command line
EXTRA = {
    "streaming": ["detect", "streaming", "-m", "tiny-qwen2", *NIAH, "--texts", "1"],
    "rope-remap": ["rope-remap", "-m", "tiny-llama", "--heads", "L2H0,L2H1", "--scale", "2", *NIAH, "--draws", "1"],
}
# result kind -> the run folders holding it (conftest.RUNS, EXTRA, the atlas of them)
FOLDERS = {"retrieval": ["retrieval"], "ablation": ["ablate", "rope-remap"], "head_curve": ["ablate-curve"],
           "streaming": ["streaming"], "rope_zero": ["rope-zero"], "rope_profile": ["rope-profile"],
           "induction": ["induction"], "copy_suppression": ["copy-suppression"], "patching": ["patch", "patch-atp"],
           "path_patching": ["patch-path"], "probes": ["probe"], "atlas": ["atlas"]}
SLOW = {"theta"}  # `interp organisms sweep` measures two bundled builds (tests/organisms: the slow tier)


@pytest.fixture(scope="module")
def folders(cli_runs, tmp_path_factory):
    """{run name: folder}: the shared runs, EXTRA's and an atlas of two of them."""
    import contextlib

    from tests.cli.conftest import _Cap

    root = tmp_path_factory.mktemp("load-result")
    out = {name: path for name, (path, _) in cli_runs.items()}
    cap = _Cap()
    with contextlib.redirect_stdout(cap.out), contextlib.redirect_stderr(cap.err):
        for name, args in EXTRA.items():
            code, _, err = run_cli(args + ["--out", str(root / name)], cap)
            assert code == 0, f"{name}: {err}"
            out[name] = root / name
        runs = root / "runs"
        for name in ("retrieval", "ablate"):
            shutil.copytree(out[name], runs / name)
        code, _, err = run_cli(["atlas", str(runs), "--out", str(root / "atlas")], cap)
        assert code == 0, err
    out["atlas"] = root / "atlas"
    return out


def _check(folder, kind):
    r = records.record(kind)
    res = interp.load_result(folder, kind=kind)
    assert type(res) is r.result_class()
    disk = json.loads((folder / f"{r.file}.json").read_text())
    assert json.loads(dumps(res.to_dict())) == disk  # exact: the loaded object writes the same file back
    df = res.to_frame()
    assert len(df) > 0
    return res


@pytest.mark.parametrize("kind", sorted(FOLDERS))
def test_every_analysis_loads_back_from_its_run_folder(folders, kind):
    for name in FOLDERS[kind]:
        _check(folders[name], kind)


def test_a_run_folder_gives_the_analysis_its_command_ran(folders):
    """An ablation run that detected its heads holds retrieval.json too: the folder gives the ablation, kind= the
    detection; a result file loads on its own."""
    assert (folders["ablate-curve"] / "retrieval.json").is_file()
    assert type(interp.load_result(folders["ablate-curve"])).__name__ == "HeadCurveResult"
    assert type(interp.load_result(folders["ablate-curve"], kind="retrieval")).__name__ == "RetrievalResult"
    assert type(interp.load_result(folders["patch-path"] / "path_patching.json")).__name__ == "PathResult"


def test_every_result_kind_is_tested_and_every_result_file_has_a_record(folders):
    """A record without a run here fails; so does a run folder holding a result JSON no record names."""
    kinds = {r.name for r in records.RECORDS if r.file}
    assert kinds == set(FOLDERS) | SLOW
    files = {r.file for r in records.RECORDS if r.file}
    for name, path in folders.items():
        if not (path / "run.json").is_file():  # `cache` writes only a store
            assert [f.name for f in path.glob("*.json")] == ["manifest.json"], name
            continue
        run = json.loads((path / "run.json").read_text())
        written = {f[:-5] for f in run["files"] if f.endswith(".json") and "/" not in f}
        assert written - {"config"} <= files, (name, written - files)


def test_every_analysis_command_has_a_record():
    """Every command the CLI registers either runs an analysis with a record or is one of the tools that write no
    result; an analysis added without a record fails here."""
    from interp.cli.app import app, detect_app

    tools = {"info", "report", "organisms", "plan", "compare", "detect", "models", "texts"}
    def name(c):
        return c.name or c.callback.__name__.replace("_", "-")

    names = {name(c) for c in app.registered_commands} | {g.name for g in app.registered_groups}
    names |= {f"detect {name(c)}" for c in detect_app.registered_commands}
    analyses = set(records.commands())
    assert names - {"detect"} == (analyses | tools) - {"detect"}
    assert all(records.resolve(f) for f in records.commands().values())
    for r in records.RECORDS:  # every dotted path a record names resolves
        for path in (r.result, r.config, r.run, r.figures):
            assert path is None or records.resolve(path) is not None, (r.name, path)
        if r.file:
            cls = r.result_class()
            assert all(callable(getattr(cls, m, None)) for m in ("to_dict", "from_dict", "to_frame")), r.name


def test_damaged_and_unknown_files_are_one_line_naming_them(folders, tmp_path):
    src = folders["rope-zero"]
    bad = tmp_path / "bad"
    shutil.copytree(src, bad)
    f = bad / "rope_zero.json"
    text = f.read_text()
    f.write_text(text[: len(text) // 2])
    with pytest.raises(InvalidInputError, match="cut short") as e:
        interp.load_result(bad)
    assert str(bad / "rope_zero.json") in str(e.value) and "\n" not in str(e.value)
    d = json.loads(text)
    del d["doses"][0]["target"]
    f.write_text(json.dumps(d))
    with pytest.raises(InvalidInputError, match=r"'doses\[0\]\.target' is missing") as e:
        interp.load_result(bad)
    assert str(f) in str(e.value)
    d = json.loads(text)
    d["doses"] = [3]
    f.write_text(json.dumps(d))
    with pytest.raises(InvalidInputError, match=r"'doses\[0\]' is a JSON number, not an object"):
        interp.load_result(bad)
    d["doses"] = {}
    f.write_text(json.dumps(d))
    with pytest.raises(InvalidInputError, match="'doses' is a JSON object, not a list"):
        interp.load_result(bad)
    other = tmp_path / "notes.json"
    other.write_text("{}")
    with pytest.raises(InvalidInputError, match="not an interp result file"):
        interp.load_result(other)
    empty = tmp_path / "empty"
    empty.mkdir()
    with pytest.raises(InvalidInputError, match="no interp result file"):
        interp.load_result(empty)
    with pytest.raises(InvalidInputError, match="unknown analysis 'bogus'"):
        interp.load_result(src, kind="bogus")


def test_non_finite_numbers_come_back():
    """A strict file's null with its "nonfinite" note loads as the float it was, and writes back the same."""
    from interp.analyses.ablation import AblationResult

    d = {"cohens_d": None, "nonfinite": {"cohens_d": "-inf"}, "diff": 1.0}
    back = records.restore_nonfinite({"a": [d]})
    assert back == {"a": [{"cohens_d": float("-inf"), "diff": 1.0}]}
    assert json.loads(dumps(back)) == {"a": [d]}
    assert AblationResult.from_dict  # the classes take the restored dicts (test above: every analysis)


@pytest.mark.slow
def test_a_theta_sweep_loads_back(tmp_path, one_thread):
    from interp.organisms.__main__ import main

    out = tmp_path / "sweep"
    assert main(["sweep", "--no-build", "--thetas", "10000,500000", "--seeds", "2", "--lengths", "256", "--n-seeds",
                 "2", "--n-boot", "100", "--out", str(out)]) == 0
    _check(out, "theta")
