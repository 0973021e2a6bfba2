"""``destiny.errors``: the text of the library's errors; how the system's failures are worded."""

from __future__ import annotations

import errno
import os

import pytest

from destiny.errors import (NOTHING_REPLACED, DataFormatError, DestinyError, InPlaceFailure,
                            file_in_use, in_file, netcdf_reads, netcdf_text_error,
                            starts_as_netcdf, system_failure)

NOT_UTF8 = os.fsdecode(b"in\xff.txt")  # as Python holds such a file name: 'in\udcff.txt'


def test_an_errors_text_shows_the_bytes_of_a_name_that_is_not_utf8():
    """Whatever shows it (the command line, an MPI rank's report to the others, a caller of
    the library), the text is writable as UTF-8; the attribute keeps the name as given."""
    e = DataFormatError(NOT_UTF8, "the line 'u1 a' has no TAB", line=3, column=2)
    assert str(e) == "in\\xff.txt, line 3, column 2: the line 'u1 a' has no TAB"
    assert e.path == NOT_UTF8
    assert str(DestinyError(f"{NOT_UTF8}: not found")) == "in\\xff.txt: not found"


@pytest.mark.parametrize("head", [b"CDF\x01\x00\x00\x00\x00", b"CDF\x02\x00\x00\x00\x00",
                                  b"CDF\x05\x00\x00\x00\x00", b"\x89HDF\r\n\x1a\n"],
                         ids=["classic", "64-bit-offset", "cdf5", "netcdf4"])
def test_every_netcdf_format_is_told_from_text(tmp_path, head):
    """Classic, 64-bit offset, CDF-5 (64-bit data: ncks -5, PnetCDF) and netCDF-4 files."""
    path = tmp_path / "x.nc"
    path.write_bytes(head + b"\x00" * 8)
    assert starts_as_netcdf(path)
    assert str(netcdf_text_error("x.nc", head)).startswith("x.nc: is a NetCDF file")
    assert netcdf_text_error("x.nc", b"CDF\x03\x00\x00\x00\x00") is None
    assert netcdf_text_error("x.nc", b"u1\tCDF\x01") is None


def test_a_named_pipe_is_not_read_to_tell_whether_it_is_netcdf(tmp_path):
    """Only a regular file is opened: a named pipe's open waits for a writer, and a read would
    take the bytes meant for the command's reader."""
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    fd = os.open(fifo, os.O_RDWR | os.O_NONBLOCK)  # (a writer: an open to read would not wait)
    try:
        os.write(fd, b"CDF\x01\x00\x00\x00\x00")
        assert not starts_as_netcdf(fifo)
        assert os.read(fd, 16) == b"CDF\x01\x00\x00\x00\x00"  # (still there for the reader)
    finally:
        os.close(fd)
    assert not starts_as_netcdf(tmp_path / "missing.nc")


def test_the_file_in_use_is_the_innermost_and_is_forgotten_as_its_block_ends():
    """What the stuck-command watch names (cli/stuck.py): the file read or written within
    the block, the outer one again after an inner block, none after, also after a failure
    (a damaged file raised as a DataFormatError)."""
    assert file_in_use() is None
    with netcdf_reads("in.nc", "."):
        assert file_in_use() == ("reading", "in.nc")
        with in_file("out.nc", "writing"):
            assert file_in_use() == ("writing", "out.nc")
        assert file_in_use() == ("reading", "in.nc")
    with pytest.raises(DataFormatError), netcdf_reads("in.nc", "."):
        raise RuntimeError("NetCDF: HDF error")
    assert file_in_use() is None


def test_a_failure_of_the_system_names_its_file_when_it_has_one():
    assert system_failure(OSError(errno.EIO, "Input/output error")) == (
        f"Input/output error; {NOTHING_REPLACED}. Check the file and the file system, then run "
        "the command again, or write the outputs elsewhere.")
    assert system_failure(OSError(errno.EIO, "Input/output error", "out.nc")).startswith(
        "out.nc: Input/output error; ")


@pytest.mark.parametrize("code", [errno.ENOSPC, errno.EDQUOT], ids=["ENOSPC", "EDQUOT"])
def test_a_full_file_system_or_a_quota_reached_says_to_free_space(code):
    assert system_failure(OSError(code, os.strerror(code), "out.nc"), "try again") == (
        f"out.nc: {os.strerror(code)}; {NOTHING_REPLACED}. Free space on that file system (or "
        "raise the quota), then try again.")


def test_standard_output_full_is_judged_on_its_own_file_system(tmp_path, monkeypatch):
    """Standard output on a full disk (`> out.txt`) was judged on the current directory's
    file system (its name, "standard output", is no path), and /dev/stdout on /dev's."""
    from types import SimpleNamespace

    full = SimpleNamespace(f_files=1000, f_ffree=0)
    spare = SimpleNamespace(f_files=1000, f_ffree=500)
    monkeypatch.setattr(os, "fstatvfs", lambda fd: full if fd == 1 else spare)
    monkeypatch.setattr(os, "statvfs", lambda path: spare)
    monkeypatch.chdir(tmp_path)
    said = system_failure(OSError(errno.ENOSPC, "No space left on device", "standard output"))
    assert "it has no inode left" in said, said
    monkeypatch.setattr(os, "statvfs", lambda path: full if path == "/dev/stdout" else spare)
    said = system_failure(OSError(errno.ENOSPC, "No space left on device", "/dev/stdout"))
    assert "it has no inode left" in said, said


def test_a_file_system_with_no_inode_left_says_to_remove_files(tmp_path, monkeypatch):
    """ENOSPC also where space is free but no inode is (many small files): freeing space in
    large files does not mend it. Said where the file's file system has none left."""
    from types import SimpleNamespace

    from destiny.io import atomic

    seen = []

    def statvfs(path):
        seen.append(path)
        return SimpleNamespace(f_files=1000, f_ffree=0)

    monkeypatch.setattr(os, "statvfs", statvfs)
    out = tmp_path / "out.nc"
    said = system_failure(OSError(errno.ENOSPC, "No space left on device", str(out)), "retry")
    assert said.endswith("Remove files from that file system: it has no inode left for a new "
                         "one (df -i shows it), whatever space it has free, then retry."), said
    assert seen == [str(tmp_path)]

    def no_inode(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device", str(tmp_path / ".out.nc.x.tmp"))

    monkeypatch.setattr(atomic.tempfile, "mkstemp", no_inode)
    with pytest.raises(atomic.OutputError, match=r"\(No space left on device\); remove files "
                       r"from that file system: it has no inode left .*, or choose another path"):
        with atomic.atomic_outputs() as outputs:
            outputs.path(out)
    monkeypatch.setattr(os, "statvfs", lambda path: SimpleNamespace(f_files=1000, f_ffree=7))
    assert "Free space on that file system" in system_failure(
        OSError(errno.ENOSPC, "No space left on device", str(out)))


def test_an_output_written_in_place_holds_what_was_written():
    assert system_failure(InPlaceFailure(errno.ENOSPC, "No space left on device", "m.json")
                          ).startswith("m.json: No space left on device; it is written as the "
                                       "command goes, and holds what was written before the "
                                       "failure. Free space")
    assert system_failure(InPlaceFailure(errno.EIO, "Input/output error")).startswith(
        "Input/output error; the output is written as the command goes")


def test_outputs_put_in_place_before_the_failure_are_complete():
    """evaluate's --json-out file, put in place before its table failed on standard output:
    "no output was replaced" was false, and a stream's failure said nothing of it."""
    full = OSError(errno.ENOSPC, "No space left on device")
    assert system_failure(full, complete=["m.json"]).startswith(
        "No space left on device; m.json was put in place before the failure and is complete; "
        "no other output was replaced (each is put in place only once complete). Free space")
    assert system_failure(InPlaceFailure(errno.EIO, "Input/output error", "standard output"),
                          complete=["a.nc", "b"]).startswith(
        "standard output: Input/output error; it is written as the command goes, and holds "
        "what was written before the failure; a.nc, b were put in place before the failure and "
        "are complete. Check the file")


@pytest.mark.parametrize("failure", [
    OSError("a bug's own OSError"),  # (no strerror: not the system's)
    BrokenPipeError(errno.EPIPE, "Broken pipe"),  # (stdout's reader left: no failure to word)
    RuntimeError("a bug"),
    ValueError("NetCDF: as a bug's text"),
], ids=["no-strerror", "broken-pipe", "runtime", "value"])
def test_a_failure_that_is_not_the_systems_is_left_to_its_traceback(failure):
    assert system_failure(failure) is None


@pytest.mark.parametrize("code, advice", [
    (errno.EMFILE, "This process has as many files open as its limit allows (ulimit -n, "),
    (errno.ENFILE, "The system has as many files open as it allows (fs.file-max)")],
    ids=["EMFILE", "ENFILE"])
def test_too_many_open_files_says_to_raise_the_limit_not_to_check_the_file(code, advice):
    """The file named is whichever one was being opened when the limit was reached (a module
    numpy loads on first use, the output's directory): it is at no fault. Nor is its file
    system: writing the outputs elsewhere, the other failures' advice, does not mend a limit
    on open files."""
    failure = OSError(code, os.strerror(code), "numpy/ma/__init__.py")
    message = system_failure(failure)
    assert message.startswith(f"numpy/ma/__init__.py: {os.strerror(code)}; {NOTHING_REPLACED}. "
                              f"{advice}"), message
    assert message.endswith(", then run the command again."), message
    assert "Check the file" not in message and "elsewhere" not in message
    assert system_failure(failure, "retry").endswith(", then retry.")  # (a caller's own)


@pytest.mark.parametrize("failure,said", [
    (OSError(errno.ENOMEM, "cannot allocate executable memory. This may be due to security "
             "restrictions on your system, such as SELinux or similar mechanisms."),
     "cannot allocate executable memory"),
    (OSError(errno.ENOMEM, os.strerror(errno.ENOMEM), "gl.nc"),
     f"gl.nc: {os.strerror(errno.ENOMEM)}")], ids=["llvmlite", "map"])
def test_a_map_refused_for_want_of_memory_says_so(failure, said):
    """llvmlite's OSError as numba first compiles under ulimit -v (generate-netcdf at 400 MB,
    one run in three) said to check the file and the file system, after llvmlite's guess at
    SELinux; a map of a file refused (ENOMEM) said the same."""
    message = system_failure(failure)
    assert message == (f"{said}; {NOTHING_REPLACED}. The memory free, or the address space "
                       "that a limit allows (ulimit -v, a container's or a job's memory limit), "
                       "is too small: free memory or raise the limit, then run the command "
                       "again."), message


@pytest.mark.parametrize("code", [errno.EMFILE, errno.ENFILE], ids=["EMFILE", "ENFILE"])
def test_a_compiled_module_not_loaded_at_the_limit_on_open_files_says_so(code):
    """numba loads its thread pool's module on first use: at the limit, the loader's
    ImportError was a traceback."""
    module = "numba/np/ufunc/workqueue.so"
    failure = ImportError(f"{module}: cannot open shared object file: {os.strerror(code)}",
                          name="numba.np.ufunc.workqueue", path=module)
    message = system_failure(failure)
    assert message is not None and message.startswith(f"{module}: {os.strerror(code)}; ")
    assert "as many files open as" in message, message
    assert system_failure(ImportError("No module named 'cupy'", name="cupy")) is None


def _split_text(path):
    import importlib.util
    import io
    import pathlib

    script = pathlib.Path(__file__).resolve().parents[1] / "scripts" / "split_holdout.py"
    spec = importlib.util.spec_from_file_location("split_holdout_script", script)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    module.split_text(path, io.StringIO(), io.StringIO(), 0.2, 1)


def _read_with(reader: str):
    """A call of one of the readers of inputs on a path."""
    import io

    from destiny import evaluate, netdef
    from destiny.io import dataset, index, network_file, ratings, text

    return {"ratings": lambda p: ratings.convert_ratings(p, io.StringIO()),
            "netdef": netdef.read_netdef_json,
            "index": index.read_index,
            "text": lambda p: next(text._chunks(p)),
            "evaluate": evaluate.read_held_out,
            "split_holdout": _split_text,
            "dataset": dataset._opened,
            "network": network_file.read_network}[reader]


@pytest.mark.parametrize("reader", ["ratings", "netdef", "index", "text", "evaluate",
                                    "split_holdout", "dataset", "network"])
def test_an_input_opened_at_the_limit_on_open_files_is_the_systems_failure(tmp_path,
                                                                        monkeypatch, reader):
    """The input is at no fault: its reader's own words ("check the path and its permissions",
    "is not a readable NetCDF file ...; create it with generate-netcdf") sent the user to it.
    The system's failure, naming it, is worded by system_failure (raise ulimit -n)."""
    import builtins

    import netCDF4

    path = tmp_path / "input"
    path.write_text("u1\ta\n")
    read = _read_with(reader)  # (its modules loaded before open fails)
    real_open = builtins.open

    def at_the_limit(file, *args, **kwargs):
        if str(file) == str(path):
            raise OSError(errno.EMFILE, "Too many open files")
        return real_open(file, *args, **kwargs)

    monkeypatch.setattr(builtins, "open", at_the_limit)
    monkeypatch.setattr(netCDF4, "Dataset", at_the_limit)
    with pytest.raises(OSError) as raised:
        read(str(path))
    assert (raised.value.errno, raised.value.filename) == (errno.EMFILE, str(path))
    assert "ulimit -n" in system_failure(raised.value)


def _llvmlite_not_loaded() -> OSError:
    """llvmlite's failure to load its library, as it raises it: an OSError without a strerror,
    raised while handling ctypes' OSError, which has the loader's words."""
    e = OSError("Could not find/load shared object file 'libllvmlite.so' from resource "
                "location: 'llvmlite.binding'.")
    e.__context__ = OSError("/venv/llvmlite/binding/libllvmlite.so: failed to map segment from "
                            "shared object")
    return e


@pytest.mark.parametrize("failure, said", [
    (ImportError("libbz2-a1e77c99.so.1.0.6: failed to map segment from shared object"),
     "libbz2-a1e77c99.so.1.0.6: failed to map segment from shared object"),
    (_llvmlite_not_loaded(),
     "/venv/llvmlite/binding/libllvmlite.so: failed to map segment from shared object")],
    ids=["import", "llvmlite"])
def test_a_library_not_loaded_for_want_of_memory_is_out_of_memory(failure, said):
    """ulimit -v (or a container's limit) too small for the libraries the commands load: a
    traceback through the imports said it."""
    message = system_failure(failure)
    assert message.startswith(f"out of memory ({said}); {NOTHING_REPLACED}. A library the "
                              "command needs could not be loaded"), message
    assert "(ulimit -v, " in message
    assert message.endswith("then run the command again.")  # (another file system: no help)
    assert system_failure(ImportError("No module named 'netCDF4'")) is None  # (a bug's)


@pytest.mark.parametrize("limits, advice", [
    ((1024, 524288), "(ulimit -n, 1024 now): raise the limit (ulimit -n 4096, "),
    ((256, 800), "(ulimit -n, 256 now): raise the limit (ulimit -n 800, "),
    ((1024, 1024), "(ulimit -n, 1024 now), which is also the hard limit: raise the hard limit "
                   "(as root: nofile in /etc/security/limits.conf, ")],
    ids=["soft", "up-to-hard", "at-hard"])
def test_the_limit_on_open_files_to_raise_to_is_above_the_one_in_force(monkeypatch, limits,
                                                                      advice):
    """At 1024 open files, the usual default, the advice was to run ulimit -n 1024."""
    import resource

    monkeypatch.setattr(resource, "getrlimit", lambda which: limits)
    message = system_failure(OSError(errno.EMFILE, "Too many open files", "in.nc"))
    assert advice in message, message


def test_the_limit_on_open_files_is_said_where_no_module_can_be_loaded_any_more(monkeypatch):
    """At the limit, the resource module's own loading failed: the limit's value was left out
    just where the user needs it."""
    import builtins
    import resource

    limit = resource.getrlimit(resource.RLIMIT_NOFILE)[0]
    real_import = builtins.__import__

    def at_the_limit(name, *args, **kwargs):
        if name == "resource":
            raise OSError(errno.EMFILE, "Too many open files")
        return real_import(name, *args, **kwargs)

    monkeypatch.setattr(builtins, "__import__", at_the_limit)
    assert f"(ulimit -n, {limit} now)" in system_failure(OSError(errno.EMFILE,
                                                                 "Too many open files"))
