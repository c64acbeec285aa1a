"""Ctrl-C and SIGTERM that are not lost. Python turns SIGINT into a KeyboardInterrupt wherever the main thread happens to be;
when that is a destructor or a callback run by the garbage collector, the exception is printed as "ignored" and
the run goes on as if nothing was pressed. `watch()` records that SIGINT arrived, so the sweep stops at its next
unit (`check()`) and the CLI exits 130 with the finished units kept even when the first KeyboardInterrupt was
swallowed. SIGTERM (`kill PID`, a job scheduler stopping the run) is handled the same way, so the run's
clean-up (its staging folder, its locks) happens instead of the process vanishing mid-write."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

_received = False
_signal = signal.SIGINT  # the last signal received: the exit code says which one stopped the run


def _on_signal(signum, frame):
    global _received, _signal
    _received, _signal = True, signum
    raise KeyboardInterrupt


def received() -> bool:
    """Whether SIGINT or SIGTERM arrived while `watch()` was active."""
    return _received


def exit_code() -> int:
    """The shell's code of a run stopped by the signal received: 128 + its number (130 SIGINT, 143 SIGTERM)."""
    return 128 + int(_signal)


def check() -> None:
    """Raise KeyboardInterrupt if SIGINT arrived (again, if the first one was swallowed)."""
    if _received:
        raise KeyboardInterrupt


@contextmanager
def watch():
    """Record SIGINT and SIGTERM for the block, each raising KeyboardInterrupt (main thread, and only where the
    signal still has Python's default handler: a handler someone else installed is left alone); the previous
    handlers and state come back after."""
    global _received, _signal
    main = threading.current_thread() is threading.main_thread()
    defaults = {signal.SIGINT: signal.default_int_handler, signal.SIGTERM: signal.SIG_DFL}
    own = {s: d for s, d in defaults.items() if main and signal.getsignal(s) is d}
    before = _received, _signal
    _received, _signal = False, signal.SIGINT
    for s in own:
        signal.signal(s, _on_signal)
    try:
        yield
    finally:
        for s, d in own.items():
            signal.signal(s, d)
        _received, _signal = before
