"""The `interp` commands of the README and docs/ that name a bundled model: the README's run as written
(in-process, from an empty folder, in page order so that `--from runs/ret` finds the run before it) and exit 0;
every page's parse (option names and click-typed values). The docs' result pages run their commands
in `make results` (minutes each); real-model and 7B commands are the real-model and offline plan tests' job."""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from tests.helpers import run_cli

ROOT = Path(__file__).resolve().parents[2]
PAGES = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
BUNDLED = re.compile(r"(--model|-m)[ =](tiny-qwen2|tiny-llama|tiny-gpt2|minilm-l6)\b")


def doc_commands(page: Path) -> list[list[str]]:
    """The argv of each `interp ...` line of a page's shell blocks that names a bundled model (continuations
    joined, comments dropped)."""
    out = []
    text = page.read_text(encoding="utf-8")
    for block in re.findall(r"```(?:bash|sh|shell|console)?\n(.*?)```", text, flags=re.S):
        for line in re.sub(r"\\\n\s*", " ", block).splitlines():
            line = line.strip()
            if line.startswith("interp ") and BUNDLED.search(line):
                out.append(shlex.split(line, comments=True)[1:])
    return out


COMMANDS = {p.relative_to(ROOT).as_posix(): doc_commands(p) for p in PAGES}
COMMANDS = {k: v for k, v in COMMANDS.items() if v}
ALL = [(page, argv) for page, cmds in COMMANDS.items() for argv in cmds]


def test_the_pages_name_bundled_model_commands():
    assert len(COMMANDS.get("README.md", [])) >= 3 and len(ALL) >= 15


@pytest.mark.parametrize("page,argv", ALL, ids=[f"{p}:{' '.join(a[:2])}" for p, a in ALL])
def test_doc_command_parses(page, argv):
    """The command and every option name of the line are accepted, and the values click types (numbers, ranges,
    choices): click parses them, nothing runs. Values the command parses itself are checked by running (README)."""
    import typer.main

    from interp.cli import app, renamed_options

    cmd, args = typer.main.get_command(app), list(argv)
    while hasattr(cmd, "commands") and args and args[0] in cmd.commands:
        cmd, args = cmd.commands[args[0]], args[1:]
    assert renamed_options(argv)[1] == [], f"{page}: `interp {shlex.join(argv)}` uses an old option name"
    cmd.make_context(" ".join(argv[:2]), args)  # raises a UsageError on an unknown option or a bad value


@pytest.mark.slow
def test_readme_commands_run_as_written(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for argv in COMMANDS["README.md"]:
        code, out, err = run_cli(argv, capsys)
        assert code == 0, f"README.md: `interp {shlex.join(argv)}` exited {code}: {err[-1500:]}"
        assert out.strip() or err.strip(), f"`interp {shlex.join(argv)}` printed nothing"
