"""The stop signals held back through steps that must not be cut in two (destiny/signals.py)."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import threading

import pytest

from destiny.signals import held_back, uninterrupted


@pytest.fixture
def handlers():
    """A handler on each stop signal that notes the signal and raises an interrupt, as the
    command line's does: ``handlers`` lists the signals it was called with."""
    called = []

    def interrupt(signum, frame):
        called.append(signum)
        raise KeyboardInterrupt

    saved = {s: signal.signal(s, interrupt) for s in (signal.SIGINT, signal.SIGTERM,
                                                       signal.SIGHUP)}
    yield called
    for signum, handler in saved.items():
        signal.signal(signum, handler)


def test_the_first_signal_held_goes_to_its_handler_once_the_block_is_done(handlers):
    """Two signals during the block: the block runs to its end, then the first that came
    goes to its handler (its interrupt ends the command: one is enough)."""
    done = []
    with pytest.raises(KeyboardInterrupt):
        with uninterrupted():
            os.kill(os.getpid(), signal.SIGTERM)
            os.kill(os.getpid(), signal.SIGHUP)
            done.append(True)
    assert done == [True] and handlers == [signal.SIGTERM]


def test_a_signal_held_through_a_block_that_fails_still_goes_to_its_handler(handlers):
    """A block that raises: the signal that came meanwhile still goes to its handler (it is
    not lost with the failure)."""
    with pytest.raises(KeyboardInterrupt) as raised:
        with uninterrupted():
            os.kill(os.getpid(), signal.SIGTERM)
            raise OSError(28, "No space left on device")
    assert handlers == [signal.SIGTERM] and isinstance(raised.value.__context__, OSError)


_DEFAULT_ACTION = """
import os, signal
from destiny.signals import uninterrupted
signal.signal(signal.SIGTERM, signal.SIG_DFL)
with uninterrupted():
    os.kill(os.getpid(), signal.SIGTERM)
    print("block done", flush=True)
print("went on", flush=True)
"""


def test_a_signal_held_whose_action_is_the_default_ends_the_process_after_the_block():
    """Where the signal has no handler (a library caller), its default action, ending the
    process by it, comes once the block is done."""
    done = subprocess.run([sys.executable, "-c", _DEFAULT_ACTION], capture_output=True,
                          text=True, timeout=60)
    assert done.returncode == -signal.SIGTERM, done.stderr
    assert done.stdout == "block done\n"


_DEFAULT_ACTION_WHILE_HELD = """
import os, signal
from destiny.signals import held_back
signal.signal(signal.SIGTERM, signal.SIG_DFL)
with held_back(lambda held, signum, frame: held.deliver(signum, frame)):
    os.kill(os.getpid(), signal.SIGTERM)
    print("went on", flush=True)
"""


def test_a_signal_acted_on_while_held_whose_action_is_the_default_ends_the_process():
    """Acted on while the signals are still held (all_or_none acts on one at once, so does
    stop_together on a second): the default action ends the process there and then, not the
    recording handler sent the signal again (a RecursionError)."""
    done = subprocess.run([sys.executable, "-c", _DEFAULT_ACTION_WHILE_HELD],
                          capture_output=True, text=True, timeout=60)
    assert (done.returncode, done.stdout, done.stderr) == (-signal.SIGTERM, "", "")


def test_a_signal_that_comes_as_the_handlers_go_back_is_raised_once_all_are_back(
        handlers, monkeypatch):
    """A signal whose handler is back already comes while the others go back: its interrupt
    is raised once all of them are back, not lost, and no handler is left recording."""
    real, restoring = signal.signal, []

    def set_handler(signum, handler):
        previous = real(signum, handler)
        if restoring and signum == signal.SIGTERM:  # (SIGINT's is back already)
            restoring.clear()
            os.kill(os.getpid(), signal.SIGINT)
        return previous

    monkeypatch.setattr(signal, "signal", set_handler)
    with pytest.raises(KeyboardInterrupt):
        with held_back():
            restoring.append(True)
    monkeypatch.undo()
    assert handlers == [signal.SIGINT]
    for signum in (signal.SIGINT, signal.SIGTERM, signal.SIGHUP):
        assert signal.getsignal(signum).__name__ == "interrupt", signum


def test_a_block_in_another_thread_runs_as_it_is():
    """Only the main thread can set handlers: elsewhere the block runs, unheld (a failure to
    set them would be an error of its own)."""
    outcome = []

    def work():
        try:
            with uninterrupted():
                outcome.append("ran")
        except Exception as e:  # (reported below)
            outcome.append(repr(e))

    thread = threading.Thread(target=work)
    thread.start()
    thread.join()
    assert outcome == ["ran"]
