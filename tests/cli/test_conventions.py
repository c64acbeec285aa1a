"""CLI conventions: -h, --version, completion, an Examples block in every help whose examples parse, one
meaning per option name, old option names as hidden deprecated aliases, untruncated tables off a terminal."""

from __future__ import annotations

import shlex

import pytest

from tests.helpers import run_cli


def _commands():
    """(name, click command) of every leaf command, and of every group that also runs alone (`interp models`)."""
    import typer.main

    from interp.cli import app

    root = typer.main.get_command(app)
    out = []
    for name, cmd in root.commands.items():
        if hasattr(cmd, "commands"):
            out += [(name, cmd)] if cmd.invoke_without_command else []
            out += [(f"{name} {sub}", c) for sub, c in cmd.commands.items()]
        else:
            out.append((name, cmd))
    return root, out


def test_help_version_and_completion(capsys, monkeypatch):
    for flag in ("-h", "--help"):
        code, out, _ = run_cli([flag], capsys)
        assert code == 0 and "Usage" in out and "ablate" in out and "--version" in out
    code, out, _ = run_cli(["--version"], capsys)
    from interp import __version__

    assert code == 0 and out.strip() == f"interp {__version__}"
    # with shellingham installed --show-completion is a flag and the shell is detected from the parent process
    # (under `sh` typer refuses); pin the detection to bash so the test does not depend on who started pytest
    import typer.completion

    monkeypatch.setattr(typer.completion, "_get_shell_name", lambda: "bash")
    code, out, _ = run_cli(["--show-completion"], capsys)
    assert code == 0 and "_interp_completion" in out and "complete" in out, (code, out, _)
    code, out, _ = run_cli(["-h"], capsys)
    assert "--install-completion" in out


def test_every_command_has_help_with_examples_that_parse(capsys):
    from interp.cli import renamed_options
    from interp.cli.examples import EXAMPLES

    root, cmds = _commands()
    assert {n for n, _ in cmds} == set(EXAMPLES)
    for name, cmd in cmds:
        if name == "organisms":  # its options are argparse's: `interp organisms -h` shows them
            code, out, _ = run_cli(["organisms", "-h"], capsys)
            assert code == 0 and "{tokenizer,build,eval,sweep}" in out
            continue
        code, out, _ = run_cli(name.split() + ["-h"], capsys)
        assert code == 0 and "Examples" in out, name
        for line in EXAMPLES[name]:
            args = shlex.split(line)[1 + len(name.split()):]
            assert renamed_options(name.split() + args)[1] == [], f"{line}: uses an old option name"
            cmd.make_context(name, args)  # raises a UsageError on an unknown option or a bad value


def test_one_meaning_per_option_name():
    _, cmds = _commands()
    meaning: dict[str, set] = {}
    for name, cmd in cmds:
        for p in cmd.params:
            if getattr(p, "hidden", False):
                continue
            for opt in p.opts:
                meaning.setdefault(opt, set()).add((p.name, type(getattr(p, "type", None)).__name__))
    clashes = {o: m for o, m in meaning.items() if len(m) > 1}
    assert clashes == {}


@pytest.mark.parametrize("old,new,cmd", [
    ("--seeds", "--n-seeds", ["detect", "retrieval"]), ("--seeds", "--n-seeds", ["patch"]),
    ("--dtype", "--model-dtype", ["ablate"]), ("--dtype", "--store-dtype", ["cache"]),
    ("--lengths", "--copy-lengths", ["detect", "induction"]), ("--seqs", "--n-seqs", ["detect", "induction"]),
    ("--sink", "--sinks", ["detect", "retrieval"]), ("--recent", "--window", ["detect", "retrieval"]),
])
def test_old_option_names_still_work_hidden_with_a_deprecation_note(old, new, cmd, capsys, tmp_path):
    code, out, _ = run_cli(cmd + ["-h"], capsys)
    assert new in out and f"{old} " not in out.replace(new, "")
    o = tmp_path / "new" / "folders" / "o"
    bad = {"--dtype": "bogus", "--sink": "-1"}.get(old, "0")  # a value the new option refuses
    code, _, err = run_cli(cmd + [old, bad, "--out", str(o)], capsys)
    assert code == 2 and f"{old} is renamed {new}" in err, err
    assert list(tmp_path.iterdir()) == []  # the folders a failed run created are gone again


def test_texts_and_tokens_mean_one_thing_each(capsys):
    """--texts is a file and --tokens a pool wherever they exist (copy-suppression); rope-profile's counts are
    --n-texts / --n-tokens only (the old count aliases are gone): the old spelling is refused, naming the new one."""
    code, _, err = run_cli(["rope-profile", "--texts", "4"], capsys)
    assert code == 2 and "--texts" in err and "--n-texts" in err, err
    code, out, _ = run_cli(["detect", "copy-suppression", "-h"], capsys)
    assert "--texts" in out and "--tokens" in out


def test_tables_keep_whole_names_off_a_terminal(capsys):
    code, out, err = run_cli(["models"], capsys)
    assert code == 0 and "…" not in out and "tiny-random-gemma2" in out
    code, out, err = run_cli(["info", "-m", "tiny-qwen2"], capsys)
    assert code == 0 and "…" not in out


def test_no_cli_module_is_over_200_lines(tmp_path):
    """The CLI parses, calls the library and prints: each module of interp/cli/ stays at most 200 lines (a command
    group that grows splits into its commands, its inputs and its printing)."""
    from pathlib import Path

    import interp.cli

    def long(folder):
        return sorted(f"{p.name}: {n}" for p in Path(folder).glob("*.py")
                      if (n := len(p.read_text(encoding="utf-8").splitlines())) > 200)

    assert not long(Path(interp.cli.__file__).parent), long(Path(interp.cli.__file__).parent)
    (tmp_path / "big_cmds.py").write_text("x = 1\n" * 201)  # the check can fail
    assert long(tmp_path) == ["big_cmds.py: 201"]
