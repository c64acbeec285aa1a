"""Progress reporting of the library: plain lines for a log or a pipe (every $INTERP_PROGRESS_EVERY seconds and
one at the end) and the plan an analysis gives its progress (the total of the work that will run)."""

from __future__ import annotations

import pytest

from interp.errors import InvalidInputError
from interp.runtime.progress import PlainLines, plan, progress, progress_every


def test_plan_on_a_plain_callable_and_on_interp_progress():
    seen = []
    plan(seen.append, 7)  # a plain function takes no plan: left alone
    assert seen == []
    with progress(10, "x") as advance:
        plan(advance, 4)
        advance(4)
        assert (advance.bar.n, advance.bar.total) == (4, 4)


@pytest.mark.parametrize("value", ["soon", "-1", "nan"])
def test_a_bad_interval_is_a_clear_error(monkeypatch, value):
    monkeypatch.setenv("INTERP_PROGRESS_EVERY", value)
    with pytest.raises(InvalidInputError, match="INTERP_PROGRESS_EVERY.*a number >= 0"):
        progress_every()


def test_plain_lines_every_interval():
    out = []
    p = PlainLines(4, "probes", out.append, every=0)
    p.advance(1)
    p.close()
    p.close()  # the end line only once: the last line shown says it already
    assert [line.split(" (")[0] for line in out] == ["probes 1/4"]
