"""Messages printed by the CLI keep their text: square brackets in an error, warning or note are text, not rich
markup ("pass token ids [n, seq_len]" must not lose "[n, seq_len]")."""

from __future__ import annotations

from tests.helpers import run_cli


def test_error_keeps_square_brackets(capsys):
    code, _, err = run_cli(["info", "-m", "[n, seq_len]"], capsys)
    assert code == 2
    assert "error: unknown model '[n, seq_len]'" in err


def test_warning_and_note_keep_square_brackets(capsys):
    from interp.cli.output import print_note
    from interp.cli.runs import show_warning
    from interp.errors import InterpWarning

    show_warning(InterpWarning("pass token ids [n, seq_len] instead of text"), InterpWarning, "f.py", 1)
    print_note("shape [batch, seq] [bold]not bold[/bold]")
    err = capsys.readouterr().err
    assert "warning: pass token ids [n, seq_len] instead of text" in err
    assert "note: shape [batch, seq] [bold]not bold[/bold]" in err
