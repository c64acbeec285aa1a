"""Ctrl-C that is not lost. Python turns SIGINT into a KeyboardInterrupt wherever the main thread happens to be;
when that is a destructor or a callback run by the garbage collector, the exception is printed as "ignored" and
the run goes on as if nothing was pressed. `watch()` records that SIGINT arrived, so the sweep stops at its next
unit (`check()`) and the CLI exits 130 with the finished units kept even when the first KeyboardInterrupt was
swallowed."""

from __future__ import annotations

import signal
import threading
from contextlib import contextmanager

_received = False


def _on_sigint(signum, frame):
    global _received
    _received = True
    raise KeyboardInterrupt


def received() -> bool:
    """Whether SIGINT arrived while `watch()` was active."""
    return _received


def check() -> None:
    """Raise KeyboardInterrupt if SIGINT arrived (again, if the first one was swallowed)."""
    if _received:
        raise KeyboardInterrupt


@contextmanager
def watch():
    """Record SIGINT for the block (main thread, and only where SIGINT still has Python's default handler:
    a handler someone else installed is left alone); the previous handler and state come back after."""
    global _received
    own = threading.current_thread() is threading.main_thread() and \
        signal.getsignal(signal.SIGINT) is signal.default_int_handler
    before = _received
    _received = False
    if own:
        signal.signal(signal.SIGINT, _on_sigint)
    try:
        yield
    finally:
        if own:
            signal.signal(signal.SIGINT, signal.default_int_handler)
        _received = before
