"""The stop signals (Ctrl-C, SIGTERM, SIGHUP), and holding them back while work must go on.

The command line turns each stop signal into an interrupt (cli/common.py). Some work holds
them back for a while and acts on them afterwards (``uninterrupted``): creating a temporary
output or a lock file and noting it for clean-up, putting outputs in place, all or none of
them (io/atomic.py); and, under MPI, what the ranks do together, so that they stop together
(parallel.py: ``stop_together`` for steps and rounds, ``all_or_none`` for blocks that may
fail).
"""

from __future__ import annotations

import contextlib
import math
import os
import signal
import threading
import time
from typing import Callable, Iterator

# Ctrl-C, SIGTERM (timeout, schedulers), SIGHUP (the terminal closed).
STOP_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)

_last_heard = -math.inf  # when a Python handler of a stop signal last ran (time.monotonic)


def heard() -> None:
    """Note that a stop signal reached a Python handler: each calls it first, so that the
    command line's watch for a process stuck in a call into C (cli/stuck.py) can tell a signal
    being acted on from one that cannot be."""
    global _last_heard
    _last_heard = time.monotonic()


def last_heard() -> float:
    """When a Python handler of a stop signal last ran (``time.monotonic``; -inf: never)."""
    return _last_heard


class HeldSignals:
    """The stop signals that came while held (``arrived``, in order), and the handlers that
    were theirs (``deliver`` acts on one as its handler would)."""

    def __init__(self):
        self.arrived: list[int] = []
        self._saved: dict[int, object] = {}

    def deliver(self, signum: int, frame=None) -> None:
        """Act on ``signum`` now as its own handler would: a Python handler is called (the
        command line's raises KeyboardInterrupt); the default action ends the process; an
        ignored signal does nothing."""
        handler = self._saved.get(signum)
        if callable(handler):
            handler(signum, frame)
        elif handler == signal.SIG_DFL:
            signal.signal(signum, signal.SIG_DFL)
            os.kill(os.getpid(), signum)

    def pass_once(self, signum: int) -> None:
        """Let the next ``signum`` pass unheeded once the handlers are back; the one after it
        goes to its handler."""
        handler = self._saved.get(signum)
        if handler is None:  # (ignored)
            return

        def once(number, frame):
            heard()
            signal.signal(number, handler)

        self._saved[signum] = once

    def _record(self, signum, frame) -> None:
        self.arrived.append(signum)

    def _hold(self, on_arrival: Callable) -> None:
        def arrival(signum, frame):
            heard()
            on_arrival(signum, frame)

        for signum in STOP_SIGNALS:
            handler = signal.getsignal(signum)
            # (an ignored signal stays ignored; None: a handler set outside Python)
            if handler is not signal.SIG_IGN and handler is not None:
                self._saved[signum] = handler
                signal.signal(signum, arrival)

    def _restore(self) -> KeyboardInterrupt | None:
        """Put every handler back, even if one put back already ran meanwhile (a signal that
        came as they went back): its interrupt is returned, to be raised once all are back."""
        late = None
        for signum, handler in self._saved.items():
            try:
                signal.signal(signum, handler)
            except KeyboardInterrupt as e:
                late = late or e
        return late


@contextlib.contextmanager
def held_back(on_arrival: Callable[[HeldSignals, int, object], None] | None = None
              ) -> Iterator[HeldSignals | None]:
    """Hold the stop signals back through the block: each that comes is recorded in
    ``arrived`` (or given to ``on_arrival(held, signum, frame)``) instead of going to its
    handler.
    Once the block is over the handlers are back, and the caller acts on what arrived.

    A handler that records stands in for each signal's own (a signal mask would not do: the C
    handler runs in whichever thread leaves the signal unblocked, numba's workers included).
    Only the main thread can set handlers: elsewhere the block runs as it is, given None.
    """
    if threading.current_thread() is not threading.main_thread():
        yield None
        return
    held = HeldSignals()
    try:
        held._hold(held._record if on_arrival is None else
                   (lambda signum, frame: on_arrival(held, signum, frame)))
        yield held
    finally:
        late = held._restore()
        if late is not None:
            raise late


@contextlib.contextmanager
def uninterrupted() -> Iterator[None]:
    """Run the block whole, the stop signals held back; the first that came then goes to its
    handler (the command line's raises KeyboardInterrupt), also if the block raised. For short
    steps that an interrupt must not cut in two: a file created and noted for clean-up (an
    interrupt between the two would leave it), outputs put in place."""
    held = None
    try:
        with held_back() as held:
            yield
    finally:
        if held is not None and held.arrived:
            held.deliver(held.arrived[0])
