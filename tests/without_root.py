"""Run an installed command where a file's permissions refuse it, also when the tests run as root.

Root reads and writes any file through two capabilities, CAP_DAC_OVERRIDE and
CAP_DAC_READ_SEARCH; a test of a file mode 0 or 0444 (permission denied, exit 1) passed
vacuously or was skipped under root, as CI runs. ``run`` starts the command in a fresh
interpreter that gives up those two capabilities before it loads anything: open(2) and
access(2) then refuse a file whose mode refuses its owner, as they refuse a user, with
EACCES. Root keeps its own files' other rights, so the test's directory and the installed
Python (under /root on this machine, out of reach of a user such as nobody) still serve it.
Where the tests do not run as root there is nothing to give up, and the command runs as is.

Run as a script: ``python tests/without_root.py COMMAND ARGS...``, COMMAND an installed
command's name (``train``, ``generate-netcdf``), started as its console script starts it;
or ``python tests/without_root.py -c CODE ARGS...``, Python code with ``sys.argv[1:]`` ARGS.
"""

from __future__ import annotations

import ctypes
import os
import pathlib
import subprocess
import sys

CAP_DAC_OVERRIDE, CAP_DAC_READ_SEARCH = 1, 2
_VERSION_3 = 0x20080522  # _LINUX_CAPABILITY_VERSION_3: two 32-bit words per set


class _Header(ctypes.Structure):
    _fields_ = [("version", ctypes.c_uint32), ("pid", ctypes.c_int)]


class _Data(ctypes.Structure):
    _fields_ = [("effective", ctypes.c_uint32), ("permitted", ctypes.c_uint32),
                ("inheritable", ctypes.c_uint32)]


def _capabilities(field: str) -> int:
    """This thread's capability set ``field`` (CapEff, CapPrm, ...) from /proc."""
    with open("/proc/thread-self/status") as f:
        for line in f:
            if line.startswith(field + ":"):
                return int(line.split()[1], 16)
    raise RuntimeError(f"no {field} in /proc/thread-self/status")


def give_up_file_access_overrides() -> None:
    """Drop CAP_DAC_OVERRIDE and CAP_DAC_READ_SEARCH from this thread's effective, permitted
    and inheritable sets (the ambient set follows the inheritable one), for good: threads
    started later inherit it. Lowering one's own capabilities needs no privilege. Exits 3
    with a message if they are still held after, so a test cannot pass on a root that still
    reads everything."""
    if not sys.platform.startswith("linux"):
        if os.geteuid() == 0:
            sys.exit("without_root: cannot give up root's file access on " + sys.platform)
        return
    libc = ctypes.CDLL(None, use_errno=True)
    header, data = _Header(_VERSION_3, 0), (_Data * 2)()
    if libc.capget(ctypes.byref(header), data) != 0:
        sys.exit(f"without_root: capget: {os.strerror(ctypes.get_errno())}")
    mask = ~((1 << CAP_DAC_OVERRIDE) | (1 << CAP_DAC_READ_SEARCH)) & 0xFFFFFFFF
    for word in ("effective", "permitted", "inheritable"):
        setattr(data[0], word, getattr(data[0], word) & mask)
    if libc.capset(ctypes.byref(header), data) != 0:
        sys.exit(f"without_root: capset: {os.strerror(ctypes.get_errno())}")
    held = (1 << CAP_DAC_OVERRIDE) | (1 << CAP_DAC_READ_SEARCH)
    if (_capabilities("CapEff") | _capabilities("CapPrm")) & held:
        print("without_root: CAP_DAC_OVERRIDE or CAP_DAC_READ_SEARCH still held",
              file=sys.stderr)
        sys.exit(3)


def run(command: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """``command args...`` (an installed command) in a fresh interpreter without root's
    file access overrides, in the current directory; its output captured as text."""
    script = pathlib.Path(__file__).resolve()
    return subprocess.run([sys.executable, str(script), command, *args], capture_output=True,
                          text=True, timeout=timeout)


def run_python(code: str, *args: str, timeout: float = 120) -> subprocess.CompletedProcess:
    """Python ``code`` (``sys.argv[1:]`` being ``args``) run as ``run`` runs a command."""
    return run("-c", code, *args, timeout=timeout)


def _main() -> None:
    give_up_file_access_overrides()  # (first: before numba starts any thread)
    del sys.path[0]  # (tests/, this script's folder: its modules are not the command's)
    from importlib.metadata import entry_points

    command, *args = sys.argv[1:]
    if command == "-c":
        sys.argv = ["-c", *args[1:]]
        exec(compile(args[0], "<without_root -c>", "exec"), {"__name__": "__main__"})
        return
    (entry,) = entry_points(group="console_scripts", name=command)
    sys.argv = [command, *args]
    sys.exit(entry.load()())


if __name__ == "__main__":
    _main()
