"""The command line as a whole: every command is installed, documented and has an example."""

from __future__ import annotations

import itertools
import os
import pathlib
import re
import shutil
import subprocess
import sys

import click
import pytest
from click.testing import CliRunner

from destiny.cli.main import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMANDS = sorted(cli.commands)


def generate_in(tmp_path, *flags, text="s1\ta:b\n"):
    """generate-netcdf, in-process, of ``text`` (written to in.txt) into out.nc, f and s, all
    in ``tmp_path``, with ``flags`` (-c, -m, -q)."""
    from destiny.cli.generate_netcdf import generate_netcdf

    (tmp_path / "in.txt").write_text(text)
    return CliRunner().invoke(generate_netcdf, [
        "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.nc"), "-d", "gl_input",
        "-f", str(tmp_path / "f"), "-s", str(tmp_path / "s"), *flags])


def test_group_lists_the_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output
    assert "generate-netcdf" in COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_an_example(name):
    result = CliRunner().invoke(cli, [name, "-h"])
    assert result.exit_code == 0
    assert "Example:" in result.output


@pytest.mark.parametrize("name", COMMANDS)
def test_every_commands_example_is_a_command_line_of_the_readme(name):
    """The help's example, its continued lines joined, is one the README gives, file names
    and all (evaluate's named held_out.txt, where the README and make demo write heldout.txt),
    spaces aside."""
    help_text = CliRunner().invoke(cli, [name, "-h"]).output
    example = help_text.split("Example:\n", 1)[1].split("\n\n", 1)[0]
    example = " ".join(example.replace("\\\n", " ").split())
    readme = (ROOT / "README.md").read_text().replace("\\\n", " ")
    assert example.startswith(f"{name} ")
    assert example in {" ".join(line.split()) for line in readme.splitlines()}, example


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_in_the_readme(name):
    readme = (ROOT / "README.md").read_text()
    assert f"### `{name}`" in readme


# A flag in the first cell of a README table row, as `-k, --k` (100) or `-o, --output FILE.nc`:
# the flags, a metavar or the choices (`indicator\|analog`), and a default in parentheses.
README_FLAG = re.compile(r"`(-[^`]*)`(?: \(`?([^`)]*)`?\))?")


@pytest.mark.parametrize("doc", ["README.md", "docs/commands.md"])
@pytest.mark.parametrize("name", COMMANDS)
def test_readme_flag_table_matches_the_help(name, doc):
    """Each option of the command is in its table, in the README (in short) and in
    docs/commands.md (in full), under the metavar and default its --help shows (the table had
    no train -d, and predict's -l was LAYER there, TEXT in the help), and the table names no
    flag the command lacks."""
    text = (ROOT / doc).read_text()
    section = re.split(rf"^#+ `{name}`", text, flags=re.M)[1]
    section = re.split(r"^##+ ", section, flags=re.M)[0]
    options = {opt: p for p in cli.commands[name].params if isinstance(p, click.Option)
               for opt in p.opts + p.secondary_opts}
    tabled = set()
    for row in section.splitlines():
        if not row.startswith("| `"):
            continue
        for span, default in README_FLAG.findall(row.split(" | ")[0]):
            *flags, last = span.replace("\\|", "|").split(", ")
            last, _, metavar = last.partition(" ")
            flags = [f for f in flags + [last] for f in f.split("/")]
            params = {options.get(f) for f in flags}
            assert None not in params and len(params) == 1, (name, span)
            param = params.pop()
            tabled.add(param.name)
            if metavar:
                shown = ("|".join(param.type.choices) if isinstance(param.type, click.Choice)
                         else param.metavar)
                assert metavar == shown, (name, span, shown)
            if default:
                assert default == str(param.default), (name, span, param.default)
    untabled = {p.opts[0] for p in options.values() if p.name not in tabled}
    assert not untabled, (name, untabled)


@pytest.mark.parametrize("name", COMMANDS)
def test_console_script_installed(name):
    exe = shutil.which(name, path=str(pathlib.Path(sys.executable).parent))
    assert exe, f"{name} is not installed next to {sys.executable}"
    result = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "Usage:" in result.stdout


def test_version():
    """The installed package's version (pyproject.toml's), which destiny.__version__ repeats."""
    import importlib.metadata

    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0
    assert result.output == f"destiny, version {importlib.metadata.version('destiny')}\n"


def test_out_of_memory_is_a_message_not_a_traceback(monkeypatch):
    """A network too large for the machine: NumPy's MemoryError (which names the size) becomes
    the commands' one-paragraph error, exit code 1."""
    import destiny.fit
    from destiny.cli.train import train

    def too_large(**_):
        raise MemoryError("Unable to allocate 763. GiB for an array with shape "
                          "(1024, 200000000) and data type float32")

    monkeypatch.setattr(destiny.fit, "fit", too_large)
    result = CliRunner().invoke(train, ["-c", "n.json", "-i", "i.nc", "-o", "o.nc", "-n", "x.nc"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: out of memory (Unable to allocate 763. GiB")
    assert "smaller batch (-b)" in result.output and "Traceback" not in result.output


def test_predict_out_of_memory_advises_on_the_networks_size(model, monkeypatch, tmp_path):
    """predict holds a network, as train does: the advice is the network's size and -b."""
    import destiny.predict
    from destiny.cli.predict import predict

    def too_large(*_, **__):
        raise MemoryError("Unable to allocate 38.1 GiB for an array with shape (10000, 1024000) "
                          "and data type float32")

    monkeypatch.setattr(destiny.predict.Predictor, "__init__", too_large)
    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
        str(model / "features_output"), "-r", str(model / "ratings.txt"), "-q",
        "-s", str(tmp_path / "recs.txt")])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: out of memory (Unable to allocate 38.1 GiB")
    assert "The network's weights" in result.output and "smaller batch (-b)" in result.output
    assert list(tmp_path.iterdir()) == []


class OutOfMemoryError(MemoryError):  # (as cupy.cuda.memory defines it)
    pass


class CudaAPIError(Exception):  # (as numba.cuda.cudadrv.driver defines it)
    pass


OutOfMemoryError.__module__ = "cupy.cuda.memory"


@pytest.mark.parametrize("failure, shown", [
    (OutOfMemoryError("Out of memory allocating 8,589,934,592 bytes (allocated so far: "
                      "79,456,894,976 bytes)."),
     "(Out of memory allocating 8,589,934,592 bytes (allocated so far: 79,456,894,976 bytes))"),
    (CudaAPIError("[2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY"),
     "([2] Call to cuMemAlloc results in CUDA_ERROR_OUT_OF_MEMORY)")])
def test_out_of_gpu_memory_names_the_gpu(monkeypatch, failure, shown):
    """CuPy's pool (numba.cuda's allocator on a GPU) raises its OutOfMemoryError, a
    MemoryError; numba's own allocator (without CuPy's pool) its CudaAPIError: the advice is
    the GPU's memory, not the machine's, and no traceback."""
    import destiny.fit
    from destiny.cli.train import train

    def too_large(**_):
        raise failure

    monkeypatch.setattr(destiny.fit, "fit", too_large)
    result = CliRunner().invoke(train, ["-c", "n.json", "-i", "i.nc", "-o", "o.nc", "-n", "x.nc"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: out of GPU memory {shown}")
    assert ".)." not in result.output and "). The network's weights (in" in result.output
    assert "fit in the GPU's memory" in result.output and "machine's" not in result.output


def test_another_failure_of_the_gpu_keeps_its_traceback(monkeypatch):
    """A driver error that is not the memory's is a fault to report as it is."""
    import destiny.fit
    from destiny.cli.train import train

    def fails(**_):
        raise CudaAPIError("[700] Call to cuMemcpyDtoH results in CUDA_ERROR_ILLEGAL_ADDRESS")

    monkeypatch.setattr(destiny.fit, "fit", fails)
    result = CliRunner().invoke(train, ["-c", "n.json", "-i", "i.nc", "-o", "o.nc", "-n", "x.nc"])
    assert isinstance(result.exception, CudaAPIError)


def test_out_of_memory_without_a_network_says_so(monkeypatch, tmp_path):
    """generate-netcdf (a binary file given as text, say) has no network to make smaller;
    a MemoryError without a message says what failed."""
    import destiny.generate
    from destiny.cli.generate_netcdf import generate_netcdf

    def too_large(**_):
        raise MemoryError()

    monkeypatch.setattr(destiny.generate, "generate_netcdf", too_large)
    monkeypatch.chdir(tmp_path)
    (tmp_path / "in.txt").write_text("u1\ta\n")
    result = CliRunner().invoke(generate_netcdf, ["-d", "x", "-i", "in.txt", "-o", "x.nc",
                                                  "-f", "f", "-s", "s", "-c"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: out of memory (an allocation failed); no output was "
                                    "replaced"), result.output
    assert "Check that the inputs and flags are the ones meant (not a binary file" in result.output
    assert "network" not in result.output


def test_a_library_not_loaded_for_want_of_memory_as_a_command_loads_is_a_message():
    """Under ulimit -v too small for numba's LLVM (or netCDF4's libraries), the command's
    modules fail to load before any handler of its own: exit status 1 and one paragraph,
    not a traceback of the imports (the scripts, too, call default_ctrl_c_while_loading)."""
    code = ("from destiny.cli.entry import default_ctrl_c_while_loading\n"
            "default_ctrl_c_while_loading()\n"
            "raise ImportError('libbz2.so.1.0.6: failed to map segment from shared object')\n")
    env = {k: v for k, v in os.environ.items() if k != "DESTINY_DEBUG"}
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: out of memory (libbz2.so.1.0.6: failed to map segment "
                                  "from shared object); no output was replaced"), done.stderr
    assert "Traceback" not in done.stderr and done.stderr.count("\n") == 1, done.stderr
    at_the_limit = code.replace(
        "ImportError('libbz2.so.1.0.6: failed to map segment from shared object')",
        "OSError(24, 'Too many open files', 'difflib.py')")  # (click loads it as it parses)
    done = subprocess.run([sys.executable, "-c", at_the_limit], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith("Error: difflib.py: Too many open files; no output was "
                                  "replaced"), done.stderr
    assert "(ulimit -n, " in done.stderr and "Traceback" not in done.stderr, done.stderr
    other = code.replace("libbz2.so.1.0.6: failed to map segment from shared object",
                         "No module named netCDF4")  # (anything else: its traceback)
    done = subprocess.run([sys.executable, "-c", other], capture_output=True, text=True,
                          timeout=60, env=env)
    assert done.returncode == 1 and "Traceback" in done.stderr, done.stderr


def test_numbas_warning_that_it_cannot_take_its_lock_is_left_out():
    """/dev/shm missing or read-only (some containers), or the limit on open files: numba
    warned in three lines as it started its thread pool, before every run's output."""
    code = ("from destiny.cli.entry import default_ctrl_c_while_loading\n"
            "default_ctrl_c_while_loading()\n"
            "import numba, warnings\n"
            "from numba.core.errors import NumbaSystemWarning\n"
            "warnings.warn(NumbaSystemWarning('Could not obtain multiprocessing lock due to OS "
            "level error: [Errno 2] No such file or directory'))\n"
            "warnings.warn(NumbaSystemWarning('another warning'))\n")
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60)
    assert done.returncode == 0, done.stderr
    assert "multiprocessing lock" not in done.stderr and "another warning" in done.stderr


@pytest.mark.parametrize("failure, expected", [
    (OSError(28, "No space left on device"),
     "Error: {out}: No space left on device; no output was replaced (each is put in place only "
     "once complete). Free space on that file system"),
    (OSError(5, "Input/output error"), "Error: {out}: Input/output error; no output was replaced"),
    (RuntimeError("NetCDF: HDF error"), "Error: {out}: the NetCDF library failed (NetCDF: HDF "
                                        "error); no output was replaced"),
    (KeyboardInterrupt(), "Error: interrupted; no output was replaced"),
    # (netCDF4's libraries load on first use, as a dataset is written: ulimit -v too small)
    (ImportError("libbz2.so.1.0.6: failed to map segment from shared object"),
     "Error: out of memory (libbz2.so.1.0.6: failed to map segment from shared object); no "
     "output was replaced"),
], ids=["disk-full", "io-error", "netcdf", "interrupt", "library-not-loaded"])
def test_failures_of_the_system_and_interrupts_are_messages(tmp_path, monkeypatch, failure,
                                                            expected):
    """A full disk, an I/O error, netCDF's own failure or Ctrl-C (or SIGTERM) part-way: one
    paragraph and exit code 1, not a traceback (or click's bare "Aborted!"). A write's failure
    names no file: the message names the output being written (it said "No space left on
    device" alone), as the user gave it, not its temporary file."""
    import destiny.generate

    def fail(path, *_, **__):
        pathlib.Path(path).write_bytes(b"\x89HDF")  # (part of it written)
        raise failure

    monkeypatch.setattr(destiny.generate, "write_dataset", fail)
    result = generate_in(tmp_path, "-c")
    assert result.exit_code == 1, result.output
    assert result.output.startswith(expected.format(out=tmp_path / "out.nc")), result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("failure", [
    "DataFormatError", OSError(28, "No space left on device"), RuntimeError("NetCDF: HDF error"),
    KeyboardInterrupt(), "InterruptedAfterOutputs"],
    ids=["DataFormatError", "disk-full", "netcdf", "interrupt", "interrupted-after-outputs"])
def test_destiny_debug_lets_every_failure_through_as_it_is(tmp_path, monkeypatch, failure):
    """DESTINY_DEBUG=1: the failure itself (its traceback), not the one-paragraph message; an
    interrupt is click's own 'Aborted!'. The outputs are still not put in place."""
    import destiny.generate
    from destiny.errors import DataFormatError, InterruptedAfterOutputs

    failure = {"DataFormatError": DataFormatError("in.txt", "bad", line=1),
               "InterruptedAfterOutputs": InterruptedAfterOutputs(["out.nc"])}.get(failure,
                                                                                  failure)

    def fail(*_, **__):
        raise failure

    monkeypatch.setattr(destiny.generate, "write_dataset", fail)
    monkeypatch.setenv("DESTINY_DEBUG", "1")
    result = generate_in(tmp_path, "-c")
    if isinstance(failure, KeyboardInterrupt):
        assert (result.exit_code, result.output) == (1, "\nAborted!\n"), result.output
    else:
        # (the system's failures named with the output: io/failures.py)
        assert isinstance(result.exception, type(failure)), result.output
        assert str(failure) in str(result.exception) and "Error:" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_a_failing_write_of_an_index_names_it(tmp_path, monkeypatch):
    """The disk filling up as generate-netcdf writes the feature index, after the dataset:
    the index is named, and neither output is put in place."""
    import errno

    import destiny.generate
    from destiny.cli.generate_netcdf import generate_netcdf

    def full(path, *_):
        pathlib.Path(path).write_text("a\t0\n")
        raise OSError(errno.ENOSPC, "No space left on device")

    monkeypatch.setattr(destiny.generate, "write_index", full)
    (tmp_path / "in.txt").write_text("s1\ta:b\n")
    result = CliRunner().invoke(generate_netcdf, [
        "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.nc"), "-d", "gl_input",
        "-f", "f", "-s", str(tmp_path / "s"), "-c"])  # (-f relative: named as given)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: f: No space left on device; no output was "
                                    "replaced"), result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def _file_size_limit(size: int):
    """For subprocess's preexec_fn: writes past ``size`` bytes fail (EFBIG) as on a full disk
    or quota, for real, where no small file system can be mounted (ulimit -f)."""
    import resource
    import signal

    def limit():
        signal.signal(signal.SIGXFSZ, signal.SIG_IGN)  # (its default kills the process)
        resource.setrlimit(resource.RLIMIT_FSIZE,
                           (size, resource.getrlimit(resource.RLIMIT_FSIZE)[1]))
    return limit


def _compiled(command, argv, tmp_path):
    """Run ``command`` once here, so that numba's cache holds its kernels: under a file size
    limit, a process compiling them fails as it writes the cache."""
    assert CliRunner().invoke(command, argv).exit_code == 0
    for path in tmp_path.iterdir():
        path.unlink()


@pytest.mark.parametrize("output", ["file", "-"])
def test_a_failing_write_of_the_records_names_them(model, tmp_path, output):
    """predict's writes failing part-way (a file past the size limit; standard output a full
    device): the message names the output, not only "File too large", and leaves nothing."""
    from destiny.cli.predict import predict

    argv = ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
            str(model / "features_output"), "-r", str(model / "ratings.txt"), "-q", "-s"]
    _compiled(predict, [*argv, str(tmp_path / "warm")], tmp_path)
    recs = tmp_path / "recs" if output == "file" else "-"
    with open("/dev/full", "wb") as full:
        done = subprocess.run(
            [str(pathlib.Path(sys.executable).parent / "predict"), *argv, str(recs)],
            stdout=full, stderr=subprocess.PIPE, text=True, timeout=120,
            preexec_fn=_file_size_limit(4096) if output == "file" else None)
    assert done.returncode == 1, done.stderr
    expected = (f"Error: {recs}: File too large; no output was replaced" if output == "file"
                else "Error: standard output: No space left on device; it is written as the "
                "command goes, and holds what was written before the failure.")
    assert done.stderr.startswith(expected), done.stderr
    assert list(tmp_path.iterdir()) == []


def test_records_to_a_full_device_name_it(model, tmp_path):
    """`predict -s /dev/full`: the device is named."""
    from destiny.cli.predict import predict

    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
        str(model / "features_output"), "-r", str(model / "ratings.txt"), "-q", "-s",
        "/dev/full"])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: /dev/full: No space left on device; it is written "
                                    "as the command goes"), result.output


@pytest.mark.skipif(not os.path.exists("/proc/self/mem"), reason="Linux's /proc")
def test_a_failing_read_is_not_named_as_the_output(model, tmp_path):
    """An input that fails as it is read, while predict writes its records (/proc/self/mem:
    an I/O error at offset 0): its failure is not put down to the records file, but to it."""
    from destiny.cli.predict import predict

    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
        str(model / "features_output"), "-r", "/proc/self/mem", "-q", "-s",
        str(tmp_path / "recs")])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: /proc/self/mem: Input/output error; "), result.output
    assert "recs" not in result.output, result.output
    assert list(tmp_path.iterdir()) == []


def test_a_failure_naming_no_file_between_writes_of_an_opened_output_is_not_put_down_to_it(
        tmp_path):
    """An output opened with ``OutputSet.open`` names its own write failures: a failure naming
    no file that comes while it is open (an input read between two writes) is left as it was,
    not said to be the output's, and nothing is put in place."""
    import errno

    from destiny.io import atomic

    failure = OSError(errno.EIO, "Input/output error")
    with pytest.raises(OSError) as raised:
        with atomic.atomic_outputs() as out, out.open(tmp_path / "recs.txt") as f:
            f.write("1\t2,0.5\n")
            raise failure
    assert raised.value is failure and raised.value.filename is None
    assert list(tmp_path.iterdir()) == []


def test_a_failure_naming_an_input_while_an_output_is_written_is_the_inputs(tmp_path):
    """An output a library writes to a path (netCDF's dataset) names no failure of its own: a
    failure naming another file meanwhile (an input that fails as it is read) is left naming
    that file, not put down to the output, and nothing is put in place."""
    import errno

    from destiny.io import atomic

    failure = OSError(errno.EIO, "Input/output error", str(tmp_path / "in.txt"))
    with pytest.raises(OSError) as raised:
        with atomic.atomic_outputs() as out:
            pathlib.Path(out.path(tmp_path / "out.nc")).write_bytes(b"\x89HDF")
            raise failure
    assert raised.value is failure
    assert list(tmp_path.iterdir()) == []


def test_an_output_failing_as_it_is_closed_is_named(tmp_path):
    """NFS reports a full disk (or a quota reached) when the file is closed, not at its
    writes: that failure names the output too, as the user gave it."""
    import errno
    import io

    from destiny.io import failures

    class FailingAtClose(io.FileIO):
        def close(self):
            closed = self.closed
            super().close()
            if not closed:
                raise OSError(errno.EDQUOT, "Disk quota exceeded")

    class Output(failures._NamedFile, FailingAtClose):
        pass

    written = Output(tmp_path / ".out.txt.abcdefgh.tmp", "out.txt")
    written.write(b"data")
    with pytest.raises(OSError) as raised:
        written.close()
    assert (raised.value.errno, raised.value.filename) == (errno.EDQUOT, "out.txt")


def test_every_command_turns_stop_signals_into_an_interrupt(tmp_path):
    """Each command's own entry point (generate-netcdf, evaluate, ... not only those run
    through run_command) stops on SIGTERM and SIGHUP as on Ctrl-C; a signal the command was
    started with ignored (nohup's SIGHUP) stays ignored."""
    import signal

    from destiny.cli.common import _interrupt
    from destiny.cli.evaluate import evaluate

    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.getsignal(signum) for signum in signals}
    try:
        for signum in signals:
            signal.signal(signum, signal.SIG_DFL)
        signal.signal(signal.SIGHUP, signal.SIG_IGN)
        CliRunner().invoke(evaluate, ["-r", str(tmp_path / "none"), "-t", str(tmp_path / "x")])
        assert signal.getsignal(signal.SIGINT) is _interrupt
        assert signal.getsignal(signal.SIGTERM) is _interrupt
        assert signal.getsignal(signal.SIGHUP) is signal.SIG_IGN
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)


def test_a_command_run_in_another_thread_leaves_the_signals_alone(tmp_path):
    """Only the main thread can set handlers: a command run elsewhere (a caller's worker
    thread) runs with the signals as they are, its failure still a message."""
    import threading

    from destiny.cli.evaluate import evaluate

    results = []
    thread = threading.Thread(target=lambda: results.append(CliRunner().invoke(
        evaluate, ["-r", str(tmp_path / "none"), "-t", str(tmp_path / "x")])))
    thread.start()
    thread.join()
    assert results[0].exit_code == 1, results[0].exception
    assert results[0].output.startswith(f"Error: {tmp_path / 'x'}: the held-out file"), \
        results[0].output


def test_the_group_names_itself_in_its_usage_errors():
    exe = pathlib.Path(sys.executable).parent / "destiny"
    for argv, usage in ((["--bogus"], "Usage: destiny [OPTIONS] COMMAND"),
                        (["predict", "--bogus"], "Usage: destiny predict [OPTIONS]")):
        done = subprocess.run([exe, *argv], capture_output=True, text=True, timeout=60)
        assert done.returncode == 2 and done.stderr.startswith(usage), done.stderr


_SIGNAL_IN_AN_IMPORT = """
import os, sys, time
from destiny.cli.common import _catch_stop_signals

_catch_stop_signals()
sys.path.insert(0, os.environ["MODULES"])
try:
    import stopped_while_loading
    r, w = os.pipe()
    os.read(r, 1)  # for ever, unless the signal comes again
except KeyboardInterrupt:
    # An import interrupted midway leaves its module out of sys.modules. (Printed here, not
    # after the import: on a busy machine the signal sent again can come during that print.)
    print("imported" if "stopped_while_loading" in sys.modules else "not imported")
    print("interrupted", flush=True)
    time.sleep(0.3)  # a cleanup that a second interrupt would cut short
    print("cleaned up", flush=True)
"""


def signal_in_an_import(tmp_path, module: str, code: str = _SIGNAL_IN_AN_IMPORT):
    (tmp_path / "stopped_while_loading.py").write_text(module)
    return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                          timeout=60, env={**os.environ, "MODULES": str(tmp_path)})


def test_a_stop_signal_during_an_import_stops_the_command_after_it(tmp_path):
    """An exception raised while a compiled module initializes can be lost (Cython's code
    drops it inside abc.register: NumPy's random module, loaded on first use), and a SIGTERM
    there left split_holdout.py running, 1 run in 7. The interrupt now waits for the import
    and is sent again to the main thread, where it also ends a read that would block."""
    result = signal_in_an_import(tmp_path, (
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(0.31)  # the handler runs here, inside the import, and is sent again\n"))
    assert result.stdout == "imported\ninterrupted\ncleaned up\n", result.stderr


def test_two_signals_during_an_import_interrupt_once(tmp_path):
    """Ctrl-C, then SIGTERM, both while a module loads: one interrupt after the import (each
    signal sent again on its own would interrupt the first one's cleanup)."""
    result = signal_in_an_import(tmp_path, (
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(0.1)\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "time.sleep(0.21)\n"))
    assert result.stdout == "imported\ninterrupted\ncleaned up\n", result.stderr


def test_an_import_that_never_ends_is_interrupted_after_a_while(tmp_path):
    """The wait for an import is bounded (_DEFER_LIMIT_S): a module that blocks while it
    loads is interrupted there."""
    result = signal_in_an_import(tmp_path, (
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"
        "r, w = os.pipe()\n"
        "os.read(r, 1)\n"))
    assert result.stdout == "not imported\ninterrupted\ncleaned up\n", result.stderr


def test_each_stop_put_off_while_a_module_loads_is_bounded_from_its_own_signal(monkeypatch):
    """_DEFER_LIMIT_S counts from the first signal of the stop put off, not of the process's
    first: in a process that runs one command after another (these tests, a notebook), a
    later command's signal would otherwise be raised inside the import at once, where it can
    be lost."""
    import signal
    import types

    from destiny.cli import common

    loading = types.SimpleNamespace(f_globals={"__name__": "importlib._bootstrap"},
                                    f_code=types.SimpleNamespace(co_name="_load"), f_back=None)
    clock, resent = [100.0], []
    monkeypatch.setattr(common, "time", types.SimpleNamespace(monotonic=lambda: clock[0]))
    monkeypatch.setattr(common, "_send_again_later", resent.append)
    for name, value in (("_stopped_by", None), ("_completed", False), ("_deferred_since", None)):
        monkeypatch.setattr(common, name, value)

    def interrupts(signum, frame) -> bool:  # (an interrupt let out would end the test run)
        try:
            common._interrupt(signum, frame)
        except KeyboardInterrupt:
            return True
        return False

    assert not interrupts(signal.SIGTERM, loading)  # put off
    assert interrupts(signal.SIGTERM, None)  # sent again once the module is loaded
    clock[0] += 60  # the next command
    assert not interrupts(signal.SIGINT, loading)  # put off too
    clock[0] += common._DEFER_LIMIT_S
    assert interrupts(signal.SIGINT, loading)  # a module that never finishes loading
    assert resent == [signal.SIGTERM, signal.SIGINT]


def test_a_command_run_after_another_in_one_process_still_stops(monkeypatch):
    """In a process that runs one command after another (these tests, a notebook), the one
    before having completed: a stop signal during the next still interrupts it, not taken
    for a signal that came as a command finished (which lets it run on)."""
    import signal

    import click

    from destiny.cli import common

    @click.command()
    @click.option("--stop", is_flag=True)
    @common.library_errors
    def command(stop):
        if stop:
            os.kill(os.getpid(), signal.SIGTERM)
        click.echo("finished")

    monkeypatch.setattr(common, "_stopped_by", None)
    monkeypatch.setattr(common, "_completed", False)
    signals = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP)
    before = {signum: signal.getsignal(signum) for signum in signals}
    try:
        assert CliRunner().invoke(command, []).output == "finished\n"
        result = CliRunner().invoke(command, ["--stop"])
    finally:
        for signum, handler in before.items():
            signal.signal(signum, handler)
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: interrupted; no output was replaced"), result.output


_LAST_STEP_AN_IMPORT = """
import os, sys
import click
from destiny.cli.common import library_errors, run_program

@click.command()
@library_errors
def command():
    sys.path.insert(0, os.environ["MODULES"])
    import stopped_while_loading
    print("done", flush=True)

run_program(command, "command")
"""


def test_a_signal_deferred_at_the_end_still_ends_the_command_by_it(tmp_path):
    """A SIGTERM during the command's last import: whether the command stops first or ends
    first, the process ends by the signal (it used to exit 0, the signal lost)."""
    result = signal_in_an_import(tmp_path, (
        "import os, signal\n"
        "os.kill(os.getpid(), signal.SIGTERM)\n"), code=_LAST_STEP_AN_IMPORT)
    assert result.returncode == -15, result.stdout + result.stderr


_SIGNAL_AS_IT_FINISHES = """
import signal
import click
from destiny.cli.common import library_errors, run_program

@click.command()
@library_errors
def command():
    print("done", flush=True)
    # (as the context closes, once the command has returned: `timeout` at the last moment)
    click.get_current_context().call_on_close(lambda: signal.raise_signal(signal.SIGTERM))

run_program(command, "command")
"""


def test_a_signal_as_the_command_finishes_says_its_work_was_complete():
    """A stop signal once the command had returned still ends it by the signal, now with a
    word that its outputs are whole: a cron log used to show exit status 143 and nothing else,
    which reads as a run cut short."""
    result = subprocess.run([sys.executable, "-c", _SIGNAL_AS_IT_FINISHES],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == -15 and result.stdout == "done\n", result.stderr
    assert result.stderr == ("command: SIGTERM came as the command finished, after its work "
                             "was complete: its outputs are whole.\n")  # (no click 'Aborted!')


_SIGNAL_IN_A_JIT_CALLBACK = """
import os, signal, time
import click
import numba
from numba.core import codegen
from destiny.cli.common import library_errors, run_program

hook = codegen.JITCodeLibrary._object_compiled_hook.__func__

def compiled(cls, ll_module, buf):  # called by llvmlite's ctypes callback, from LLVM
    os.kill(os.getpid(), signal.SIGTERM)  # (its handler runs here, inside the callback)
    return hook(cls, ll_module, buf)

codegen.JITCodeLibrary._object_compiled_hook = classmethod(compiled)

@click.command()
@library_errors
def command():
    numba.njit(lambda x: x + 1)(1)
    time.sleep(3)  # the rest of the command's work
    print("done", flush=True)

run_program(command, "command")
"""


def test_a_stop_signal_while_numba_compiles_stops_the_command():
    """A stop signal that comes while LLVM compiles a kernel (seconds on a first run) is
    acted on as its machine code is handed to numba's cache, in a ctypes callback, which drops
    the interrupt ("Exception ignored on calling ctypes callback function", a traceback): the
    command ran on to its end, 1 first run in 3 under `timeout`, and replaced its outputs. The
    interrupt now waits for the callback to return."""
    result = subprocess.run([sys.executable, "-c", _SIGNAL_IN_A_JIT_CALLBACK],
                            capture_output=True, text=True, timeout=120,
                            env={**os.environ, "NUMBA_DISABLE_CACHE": "1"})
    assert result.returncode == -15 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.startswith("Error: interrupted; "), result.stderr


_SIGNAL_IN_A_FINALIZER = """
import gc, os, signal, time
import click
from destiny.cli.common import library_errors, run_program

class Freed:  # as llvmlite's objects free their LLVM counterparts
    def __del__(self):
        os.kill(os.getpid(), signal.SIGTERM)  # (its handler runs here, inside __del__)

@click.command()
@library_errors
def command():
    Freed()
    gc.collect()
    time.sleep(3)  # the rest of the command's work
    print("done", flush=True)

run_program(command, "command")
"""


def test_a_stop_signal_in_a_finalizer_stops_the_command():
    """Python drops an exception raised in a __del__ ("Exception ignored in ...
    KeyboardInterrupt", a traceback), so a stop signal acted on while llvmlite freed a
    compiled object was lost: quality_sample.py trained on to its end, once in the suite's
    runs. The interrupt now waits for the finalizer to return."""
    result = subprocess.run([sys.executable, "-c", _SIGNAL_IN_A_FINALIZER],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == -15 and result.stdout == "", result.stdout + result.stderr
    assert result.stderr.startswith("Error: interrupted; "), result.stderr
    assert "Exception ignored" not in result.stderr, result.stderr


def test_a_stop_signal_in_a_cython_modules_code_waits_for_it():
    """An interrupt raised in netCDF4's Cython code (its Variable.__getattr__, as NumPy looked
    up an array's interface on a slice of a variable while train hashed a dataset) was lost:
    quality_sample.py stopped just after its split went on to its end, 5 runs in 15
    (test_quality_sample_stops_as_the_commands_do, 1 run in 5). A frame of a Cython module's
    source (.pyx), or called from one, now defers the interrupt as an import does."""
    from destiny.cli.common import _losing

    def frame_of(filename):
        namespace = {}
        exec(compile("import sys\ndef f():\n    return sys._getframe()\nframe = f()",
                     filename, "exec"), namespace)
        return namespace["frame"]

    assert _losing(frame_of("src/netCDF4/_netCDF4.pyx"))
    assert _losing(frame_of("src/netCDF4/_netCDF4.pyx").f_back)  # (the module's code)
    assert not _losing(frame_of("/work/destiny/io/dataset.py"))


_SIGNAL_AS_IT_EXITS = """
import os, signal
import click
from destiny.cli.common import library_errors, run_program

class Late:  # freed as the interpreter tears down its modules, after its signal handlers
    def __del__(self, kill=os.kill, pid=os.getpid(), signum=signal.SIGTERM):
        kill(pid, signum)

late = Late()

@click.command()
@library_errors
def command():
    print("done", flush=True)

run_program(command, "command")
"""


def test_a_signal_as_the_process_exits_leaves_the_commands_status():
    """Python gives the signals their default action back as it exits, a quarter of a second
    before a train or predict process ends (its modules and arrays freed): a SIGTERM there
    ended the process with status 143 and no word, after 'wrote gl.nc' (1 `timeout` in 3 at
    the end of a run). Once the command has ended, a stop signal is now ignored: the status is
    the command's."""
    result = subprocess.run([sys.executable, "-c", _SIGNAL_AS_IT_EXITS],
                            capture_output=True, text=True, timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (0, "done\n", "")


@pytest.mark.parametrize("value", ["0", "abc", ""])
def test_a_thread_count_numba_cannot_load_with_is_refused_without_a_traceback(value):
    """NUMBA_NUM_THREADS=0 (a script's cores // processes) made every command print numba's
    traceback as it loaded; text printed a warning with traceback lines and ran on. Both
    installed commands and scripts refuse it first, naming the variable."""
    env = {**os.environ, "NUMBA_NUM_THREADS": value}
    for command in ([str(pathlib.Path(sys.executable).parent / "train"), "--help"],
                    [sys.executable, str(ROOT / "scripts" / "split_holdout.py"), "--help"]):
        result = subprocess.run(command, env=env, capture_output=True, text=True, timeout=60)
        assert result.returncode == 1 and result.stdout == "", result.stderr
        assert result.stderr == (f"Error: the environment variable NUMBA_NUM_THREADS is "
                                 f"{value!r}; expected the number of threads for numba's "
                                 "parallel loops, 1 or more (under mpiexec, cores // processes, "
                                 "at least 1). Set it so, or unset it to use every core.\n")


def test_ctrl_c_while_a_command_loads_stops_it_without_a_traceback(tmp_path):
    """The installed commands load with Ctrl-C's default action (cli/entry.py): a Ctrl-C in
    the half second numba takes to load used to print Python's traceback."""
    (tmp_path / "slow_command.py").write_text(
        "import os, signal, time\n"
        "os.kill(os.getpid(), signal.SIGINT)\n"
        "time.sleep(5)\n"
        "def main():\n"
        "    print('ran')\n")
    code = (f"import sys; sys.path.insert(0, {str(tmp_path)!r}); "
            "from destiny.cli.entry import _main; _main('slow_command')")
    result = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (-2, "", "")


# A Ctrl-C as the script loads its first module beyond the standard library's (click, in
# each): deterministic, where a timed signal lands anywhere in the half second of imports.
_CTRL_C_AS_CLICK_LOADS = """
import os, runpy, signal, sys, time

class CtrlC:
    def find_spec(self, name, path=None, target=None):
        if name == "click":
            sys.meta_path.remove(self)
            os.kill(os.getpid(), signal.SIGINT)
            time.sleep(5)
        return None

assert "click" not in sys.modules
sys.meta_path.insert(0, CtrlC())
sys.argv = [sys.argv[1], "--help"]
runpy.run_path(sys.argv[0], run_name="__main__")
"""


@pytest.mark.parametrize("script", ["convert_ratings.py", "synthetic_data.py",
                                    "quality_sample.py", "split_holdout.py",
                                    "describe_dataset.py"])
def test_ctrl_c_while_a_script_loads_stops_it_without_a_traceback(script):
    """The scripts load with Ctrl-C's default action, as the installed commands do: a Ctrl-C
    in their first half second used to print Python's traceback from inside an import."""
    result = subprocess.run([sys.executable, "-c", _CTRL_C_AS_CLICK_LOADS,
                             str(ROOT / "scripts" / script)], capture_output=True, text=True,
                            timeout=60)
    assert (result.returncode, result.stdout, result.stderr) == (-2, "", "")


def test_a_script_loaded_as_a_module_keeps_the_ctrl_c_handler():
    """Only a script run as a program changes Ctrl-C's action (tests load them as modules)."""
    import importlib.util
    import signal

    spec = importlib.util.spec_from_file_location("convert_script",
                                                  ROOT / "scripts" / "convert_ratings.py")
    # (Python's own handler, which the script replaces when run: earlier tests set another)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)
    try:
        spec.loader.exec_module(importlib.util.module_from_spec(spec))
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)


def test_an_ignored_or_own_ctrl_c_is_kept_while_a_command_loads():
    """Only Python's own handler gives way to the default action: an ignored Ctrl-C (nohup, a
    job started in the background by a script) stays ignored, as the command then keeps it
    (library_errors), and another handler stays."""
    import signal

    from destiny.cli.entry import default_ctrl_c_while_loading

    def own(signum, frame):
        pass

    before = signal.getsignal(signal.SIGINT)
    try:
        for handler in (signal.SIG_IGN, own):
            signal.signal(signal.SIGINT, handler)
            default_ctrl_c_while_loading()
            assert signal.getsignal(signal.SIGINT) is handler
        signal.signal(signal.SIGINT, signal.default_int_handler)
        default_ctrl_c_while_loading()
        assert signal.getsignal(signal.SIGINT) is signal.SIG_DFL
    finally:
        signal.signal(signal.SIGINT, before)


def test_quality_sample_stops_as_the_commands_do(tmp_path):
    """Its handlers are the commands' once it starts (library_errors): a stop signal removes
    its work directory and gives a message, no traceback, and the exit status of the signal."""
    import signal
    import time

    env = {**os.environ, "TMPDIR": str(tmp_path)}
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / "quality_sample.py"),
                             "--ratings", str(ROOT / "data" / "ratings.csv"), "--config",
                             str(ROOT / "netdefs" / "movielens.json"), "--epochs", "50"],
                            cwd=tmp_path, env=env, stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True)
    deadline = time.time() + 60
    while not any((p / "gl_input.nc").exists() for p in tmp_path.iterdir()):  # training
        assert proc.poll() is None and time.time() < deadline, proc.communicate()
        time.sleep(0.05)
    proc.send_signal(signal.SIGINT)
    stdout, stderr = proc.communicate(timeout=60)
    assert proc.returncode == -signal.SIGINT, stderr
    # (or "interrupted as the outputs were put in place", where it lands in the split's commit)
    assert stderr.startswith("Error: interrupted") and stderr.count("\n") == 1, stderr
    assert stdout == "" and list(tmp_path.iterdir()) == []


def _quality_sample():
    import importlib.util

    spec = importlib.util.spec_from_file_location("quality_sample_script",
                                                  ROOT / "scripts" / "quality_sample.py")
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def test_quality_sample_checks_its_json_path_before_the_work(tmp_path, monkeypatch):
    """A mistyped --json directory failed only once every recipe had trained (hours)."""
    script = _quality_sample()

    def split(*_, **__):
        raise AssertionError("the work started before the output was checked")

    monkeypatch.setattr(script, "prepare_split", split)
    result = CliRunner().invoke(script.main, [
        "--ratings", str(ROOT / "data" / "ratings.csv"), "--json",
        str(tmp_path / "no-such-dir" / "m.json")])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: ") and "no-such-dir" in result.output, result.output
    assert "metrics file (--json)" in result.output and result.output.count("\n") == 1


def test_quality_sample_interrupted_as_its_work_files_are_put_in_place(tmp_path, monkeypatch):
    """Those files are in its work directory, removed as it stops: the message called them
    complete. It is the ordinary interrupt's."""
    from destiny.errors import InterruptedAfterOutputs

    script = _quality_sample()
    made = []

    def split(ratings, work, **_):
        made.append(work)
        raise InterruptedAfterOutputs([f"{work}/gl_input.nc"])

    monkeypatch.setattr(script, "prepare_split", split)
    result = CliRunner().invoke(script.main, ["--ratings", str(ROOT / "data" / "ratings.csv")])
    assert result.exit_code == 1, result.output
    assert result.output.startswith("Error: interrupted; no output was replaced"), result.output
    assert "is complete" not in result.output and not os.path.exists(made[0])


@pytest.mark.parametrize("script, header, line, outputs", [
    ("convert_ratings.py", "userId,movieId,rating,timestamp\n", "{n},2,3.0,4\n", ["-o", "out.txt"]),
    ("split_holdout.py", "", "{n}\t2:3:4\n", ["--train", "t.txt", "--heldout", "h.txt"]),
])
def test_the_scripts_stop_as_the_commands_do(tmp_path, script, header, line, outputs):
    """SIGTERM while a script starts to read (its input a named pipe that is still being
    written): its temporary outputs go, a message says so, and it dies by the signal (143).
    Both scripts used to leave their temporaries, which nothing ever removed."""
    import contextlib
    import signal
    import threading
    import time

    source = tmp_path / "in.txt"
    os.mkfifo(source)
    done = threading.Event()

    def writer():
        # A line every 20 ms, as a producer still at work writes. CPython runs a signal's
        # handler between bytecodes, so a signal that lands just before the script blocks in
        # read() waits for the read to return; with the pipe held open and nothing written,
        # as this test once did, that is the likely cause of its one hang (in CI, 60 s).
        with contextlib.suppress(BrokenPipeError), open(source, "w") as f:
            f.write(header)
            for n in itertools.count(1):  # (the script may stop before it reads: broken pipe)
                f.write(line.format(n=n))
                f.flush()
                if done.wait(0.02):
                    break

    threading.Thread(target=writer, daemon=True).start()
    proc = subprocess.Popen([sys.executable, str(ROOT / "scripts" / script), str(source),
                             *outputs], cwd=tmp_path, stderr=subprocess.PIPE, text=True)
    try:
        deadline = time.time() + 60
        while not any(p.name.endswith(".tmp") for p in tmp_path.iterdir()):
            ended = proc.poll()
            if ended is not None or time.time() >= deadline:
                proc.kill()  # (reading its stderr while it runs would wait for it to end)
                how = "still running after 60 s" if ended is None else f"exit status {ended}"
                pytest.fail(f"no temporary output ({how}): {proc.communicate()[1]}")
            time.sleep(0.01)
        proc.send_signal(signal.SIGTERM)
        _, stderr = proc.communicate(timeout=60)
    finally:
        done.set()
    assert proc.returncode == -signal.SIGTERM, stderr
    assert stderr.startswith("Error: interrupted; no output was replaced"), stderr
    assert [p.name for p in tmp_path.iterdir()] == ["in.txt"]


_SELF_SIGNAL = """
import os, signal, time
import click
from destiny.cli.common import library_errors, run_program

signum = getattr(signal, os.environ["SIGNAL"])
signal.signal(signum, signal.SIG_IGN if os.environ["HOW"] == "ignored" else signal.SIG_DFL)

@click.command()
@library_errors
def command():
    if os.environ["HOW"] == "no stderr":  # (a closed terminal, a reader gone): the message fails
        os.close(2)
    print("started")  # (held in stdout's buffer, a pipe: click.echo would flush it)
    os.kill(os.getpid(), signum)
    time.sleep(0.2)
    click.echo("finished")

run_program(command, "command")
"""


@pytest.mark.parametrize("name", ["SIGINT", "SIGTERM", "SIGHUP"])
def test_a_stopped_command_dies_by_its_signal(name):
    """After its message and clean-up, a stopped command dies by the signal (exit status 130
    for Ctrl-C, 143 for SIGTERM), as a shell script, make or a scheduler expect: exit code 1
    would read as an ordinary failure, past which a script without `set -e` goes on."""
    import os
    import signal
    import subprocess
    import sys

    signum = getattr(signal, name)
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # (stdout's)
    done = subprocess.run([sys.executable, "-c", _SELF_SIGNAL], capture_output=True, text=True,
                          timeout=120, env={**buffered, "SIGNAL": name, "HOW": "handled"})
    assert done.returncode == -signum, done.stderr
    assert done.stderr == ("Error: interrupted; no output was replaced (each is put in place "
                           "only once complete). Run the command again to start afresh.\n")
    assert done.stdout == "started\n"  # (what it wrote before the signal: flushed before dying)
    ignored = subprocess.run([sys.executable, "-c", _SELF_SIGNAL], capture_output=True,
                             text=True, timeout=120,
                             env={**buffered, "SIGNAL": name, "HOW": "ignored"})
    assert ignored.returncode == 0 and ignored.stdout == "started\nfinished\n", ignored.stderr
    unsaid = subprocess.run([sys.executable, "-c", _SELF_SIGNAL], capture_output=True,
                            text=True, timeout=120,
                            env={**buffered, "SIGNAL": name, "HOW": "no stderr"})
    assert unsaid.returncode == -signum and unsaid.stdout == "started\n"


_SHORT_WRITE = """
import signal, sys
from destiny.io.atomic import text_output
signal.signal(signal.SIGUSR1, lambda *_: None)
print("ready", file=sys.stderr, flush=True)
with text_output("-") as out:
    out.write("x" * (4 << 20))
"""


def test_standard_output_gets_the_whole_of_a_write_a_signal_cut_short():
    """A write to a pipe that a signal's handler cuts short: under PYTHONUNBUFFERED=1 (set in
    many containers) sys.stdout writes to the raw file and CPython's text layer drops the
    rest without a word; text_output("-"), which predict -s - writes through, loses none."""
    import signal
    import time

    proc = subprocess.Popen([sys.executable, "-c", _SHORT_WRITE], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, env={**os.environ, "PYTHONUNBUFFERED": "1"})
    assert proc.stderr.readline() == b"ready\n"
    time.sleep(0.5)  # the write has filled the pipe and waits for this reader
    proc.send_signal(signal.SIGUSR1)
    data = proc.stdout.read()
    assert proc.wait(timeout=60) == 0, proc.stderr.read()
    assert len(data) == 4 << 20


def test_a_descriptor_named_as_a_file_is_a_stream(tmp_path):
    """/dev/stdout, /dev/fd/N, /proc/self/fd/N and links to them name this process's own
    descriptors, written in place through them (even where stdout is a regular file: a log);
    a closed descriptor's name is an ordinary missing file."""
    from destiny.io.atomic import descriptor, is_stream

    link = tmp_path / "out"
    link.symlink_to("/dev/stdout")
    plain = tmp_path / "plain.txt"
    plain.write_text("")
    with open(plain, "a") as f:
        names = {"/dev/stdout": 1, "/dev/stderr": 2, "/dev/fd/2": 2, "/proc/self/fd/1": 1,
                 f"/proc/{os.getpid()}/fd/{f.fileno()}": f.fileno(), str(link): 1,
                 f"/dev/fd/{f.fileno()}": f.fileno()}
        for name, fd in names.items():
            assert descriptor(name) == fd, name
            assert is_stream(name), name
    for name in (str(plain), "/dev/null", "/dev/fd/987", "relative/name", "/proc/1/fd/1"):
        assert descriptor(name) is None, name
    assert is_stream("-") and is_stream("/dev/null") and not is_stream(plain)


def test_a_stream_given_where_a_file_is_renamed_into_place_is_named_in_the_refusal(tmp_path):
    """An output renamed into place that is this process's descriptor is refused naming which
    stream it is (standard output, standard error, descriptor N), not as some other stream."""
    from destiny.errors import OutputError
    from destiny.io.atomic import check_outputs

    with open(tmp_path / "log", "a") as f:
        for name, kind in (("/dev/stdout", "standard output"), ("/dev/stderr", "standard error"),
                           (f"/dev/fd/{f.fileno()}", f"this process's file descriptor "
                                                     f"{f.fileno()}")):
            with pytest.raises(OutputError) as raised:
                check_outputs([(name, "dataset file (-o)")])
            assert str(raised.value) == (
                f"{name}: is {kind}, not a file; the dataset file (-o) is written to a "
                "temporary file and renamed into place, which would replace it. Give the path "
                "of a file."), name


def test_an_empty_output_path_is_refused_by_the_library_too():
    """check_outputs refuses an empty path (a library caller's unset variable), which its
    other checks would pass as the current directory; an output not given (None) is skipped.
    (The commands refuse one as their flag's value, first.)"""
    from destiny.errors import OutputError
    from destiny.io.atomic import check_outputs

    with pytest.raises(OutputError) as raised:
        check_outputs([(None, "metrics file"), ("", "network file (-n)")])
    assert str(raised.value) == "the network file (-n) is an empty path; give a file name."


def test_a_stream_is_never_replaced_by_an_output_put_in_place(tmp_path):
    """Whoever asks for a stream's temporary file (here a named pipe's) is refused: the
    rename would replace the stream (as root, /dev/null itself) with a file."""
    import stat

    from destiny.errors import OutputError
    from destiny.io import atomic

    os.mkfifo(tmp_path / "pipe")
    with pytest.raises(OutputError, match="pipe: is a device, pipe or socket, not a file; it "
                                          "cannot be replaced by a file"):
        with atomic.atomic_outputs() as out:
            out.path(tmp_path / "pipe")
    assert [p.name for p in tmp_path.iterdir()] == ["pipe"]
    assert stat.S_ISFIFO(os.stat(tmp_path / "pipe").st_mode)


def test_a_descriptor_written_through_stays_open_after_what_the_process_wrote(tmp_path):
    """/dev/stdout (or /dev/fd/N) written in place: what the process had written to stdout
    and not yet flushed comes first, and the descriptor stays open for what follows (the
    summary line after predict's records)."""
    code = ("import sys\nfrom destiny.io.atomic import text_output\n"
            "print('before')\n"  # (buffered: stdout is a file)
            "with text_output('/dev/stdout') as f:\n    f.write('records\\n')\n"
            "print('after')\n")
    log = tmp_path / "log"
    env = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}  # (buffered)
    with open(log, "wb") as out:
        done = subprocess.run([sys.executable, "-c", code], stdout=out, stderr=subprocess.PIPE,
                              timeout=60, env=env)
    assert done.returncode == 0, done.stderr
    assert log.read_text().splitlines() == ["before", "records", "after"]


def test_records_to_a_closed_stdout_are_refused(model):
    """`predict -s - >&-`: a message, not an AttributeError's traceback."""
    done = subprocess.run(
        [str(pathlib.Path(sys.executable).parent / "predict"), "-n", str(model / "gl.nc"),
         "-i", str(model / "features_input"), "-o", str(model / "features_output"), "-r",
         str(model / "ratings.txt"), "-s", "-"], stdout=subprocess.DEVNULL,
        stderr=subprocess.PIPE, text=True, timeout=120, preexec_fn=lambda: os.close(1))
    assert done.returncode == 1
    assert done.stderr == ("Error: -: standard output is closed; give a file path instead, or "
                           "run the command with its output open.\n")


def test_outputs_to_stdout_keep_the_log_that_stdout_appends_to(tmp_path):
    """`... -s /dev/stdout >> log` wrote the log anew through a rename (predict, evaluate's
    --json-out): what the log held, and the notes, were gone."""
    import json

    from destiny.io.atomic import text_output

    log = tmp_path / "log"
    log.write_text("old\n")
    code = ("import sys\nfrom destiny.io.atomic import text_output\n"
            "print('note', file=sys.stderr, flush=True)\n"
            "with text_output(sys.argv[1]) as f:\n    f.write('{\"k\": 1}\\n')\n")
    inode = log.stat().st_ino
    with open(log, "ab") as out:
        done = subprocess.run([sys.executable, "-c", code, "/dev/stdout"], stdout=out,
                              stderr=subprocess.STDOUT, timeout=60)
    assert done.returncode == 0
    assert log.read_text().splitlines() == ["old", "note", '{"k": 1}']
    assert log.stat().st_ino == inode
    with text_output(tmp_path / "plain.json") as f:  # a file is still replaced whole
        f.write(json.dumps({"k": 1}))
    assert json.loads((tmp_path / "plain.json").read_text()) == {"k": 1}


def test_dash_reads_a_text_input_from_stdin(model, tmp_path):
    """`... | generate-netcdf -i -`, `predict -r -`, `evaluate -r -`, `convert_ratings.py -`,
    `split_holdout.py -`: '-' used to be looked for as a file of that name."""
    from destiny import synthetic
    from destiny.io.dataset import read_dataset

    bin_dir = pathlib.Path(sys.executable).parent
    text = (model / "ratings.txt").read_bytes()

    def run(argv, stdin: bytes):
        done = subprocess.run(argv, input=stdin, capture_output=True, timeout=300)
        assert done.returncode == 0, done.stderr.decode()
        return done.stdout

    for source, name in (("-", "piped"), (str(model / "ratings.txt"), "file")):
        run([str(bin_dir / "generate-netcdf"), "-i", source, "-o", str(tmp_path / f"{name}.nc"),
             "-d", "gl_input", "-f", str(tmp_path / f"f_{name}"), "-s",
             str(tmp_path / f"s_{name}"), "-c", "-q"], text)
    piped, plain = (read_dataset(tmp_path / f"{n}.nc") for n in ("piped", "file"))
    assert piped.indices.tolist() == plain.indices.tolist() and piped.rows == plain.rows

    model_args = ["-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
                  str(model / "features_output"), "-k", "5", "-q", "-s", "-"]
    recs = run([str(bin_dir / "predict"), *model_args, "-r", "-"], text)
    assert recs == run([str(bin_dir / "predict"), *model_args, "-r", str(model / "ratings.txt")],
                       b"")
    assert recs.count(b"\n") == 300
    (tmp_path / "recs").write_bytes(recs)
    scores = run([str(bin_dir / "evaluate"), "-r", "-", "-t", str(model / "ratings.txt"),
                  "--json", "-q"], recs)
    assert scores == run([str(bin_dir / "evaluate"), "-r", str(tmp_path / "recs"), "-t",
                          str(model / "ratings.txt"), "--json", "-q"], b"")

    synthetic.write_ratings_csv(tmp_path / "r.csv", synthetic.generate_ratings(
        users=20, items=30, mean_per_user=5, seed=1))
    script = [sys.executable, str(ROOT / "scripts" / "convert_ratings.py")]
    assert run([*script, "-"], (tmp_path / "r.csv").read_bytes()) == run(
        [*script, str(tmp_path / "r.csv")], b"")
    split = [sys.executable, str(ROOT / "scripts" / "split_holdout.py")]
    for source, name in (("-", "piped"), (str(model / "ratings.txt"), "file")):
        run([*split, source, "--train", str(tmp_path / f"t_{name}"), "--heldout",
             str(tmp_path / f"h_{name}")], text)
    for part in ("t", "h"):
        assert (tmp_path / f"{part}_piped").read_bytes() == (tmp_path / f"{part}_file").read_bytes()


_TRAIN = ["train", "-c", "net.json", "-i", "in.nc", "-o", "out.nc", "-n", "net.nc"]
_PREDICT = ["predict", "-n", "net.nc", "-i", "features_input", "-o", "features_output", "-r",
            "ratings.txt", "-s", "recs"]
_GENERATE = ["generate-netcdf", "-i", "ratings.txt", "-o", "gl.nc", "-d", "gl", "-f",
             "features", "-s", "samples"]


def _refused_flag(argv, flag, value, **invoke) -> str:
    """stderr, its lines joined, of ``argv`` with ``flag``'s value replaced by ``value``,
    run in the test's own empty directory: a usage error (exit status 2) naming the flag,
    and nothing written."""
    argv = list(argv)
    argv[argv.index(flag) + 1] = value
    result = CliRunner().invoke(cli, argv, **invoke)
    assert result.exit_code == 2, result.output
    assert f"Invalid value for '{flag}'" in result.stderr
    assert os.listdir() == []
    return " ".join(result.stderr.split())


@pytest.mark.parametrize("argv, flag, why", [
    (_TRAIN, "-c", "the network definition: under mpiexec every process reads the file itself"),
    (_TRAIN, "-i", "the input dataset: a NetCDF file is read by seeking within it"),
    (_TRAIN, "-o", "the output dataset: a NetCDF file is read by seeking within it"),
    (_PREDICT, "-n", "the network file: a NetCDF file is read by seeking within it"),
    (_PREDICT, "-i", "the input index: under mpiexec every process reads the index file"),
    (_PREDICT, "-o", "the output index: under mpiexec every process reads the index file"),
    (_GENERATE, "-f", "the feature index: it is read (unless -c) and, with -c or -m, replaced"),
    (_GENERATE, "-s", "the sample index: it is read where it exists and, when new samples "
                      "appear, replaced"),
], ids=["train-c", "train-i", "train-o", "predict-n", "predict-i", "predict-o",
        "generate-netcdf-f", "generate-netcdf-s"])
def test_dash_for_a_file_that_is_not_read_as_a_stream_is_a_usage_error(tmp_path, monkeypatch,
                                                                       argv, flag, why):
    """'-' where the command needs the file itself was looked for as a file named '-' ("No such
    file or directory"): a usage error saying why, before anything is read or written."""
    monkeypatch.chdir(tmp_path)
    stderr = _refused_flag(argv, flag, "-", input="u1\ta\n")
    assert f"'{flag}' / '--" in stderr
    assert f"standard input cannot be read for {why}" in stderr
    assert "Give the file's path." in stderr and "No such file" not in stderr


@pytest.mark.parametrize("argv, flag, what", [
    (_TRAIN, "-n", "the network file"),
    ([*_TRAIN, "--initial-network", "init.nc"], "--initial-network", "the initial network"),
    (_GENERATE, "-o", "the dataset file"),
], ids=["train-n", "train-initial-network", "generate-netcdf-o"])
def test_dash_for_a_netcdf_output_is_a_usage_error(tmp_path, monkeypatch, argv, flag, what):
    """'-' for a NetCDF file a command writes is a usage error (exit status 2), as for the files
    it reads (docs/commands.md: every NetCDF, index or definition file); the output check refused it
    with exit status 1 once the other flags were read."""
    monkeypatch.chdir(tmp_path)
    assert f"standard output cannot take {what}" in _refused_flag(argv, flag, "-")


_EVALUATE = ["evaluate", "-r", "recs", "-t", "held.txt"]


@pytest.mark.parametrize("argv, flag", [
    (_TRAIN, "-c"), (_TRAIN, "-i"), (_PREDICT, "-n"), (_PREDICT, "-r"), (_PREDICT, "-o"),
    (_GENERATE, "-i"), (_GENERATE, "-f"), (_EVALUATE, "-t"),
    # outputs: their check refused it too, but with exit status 1, once the flags were read
    (_TRAIN, "-n"), ([*_TRAIN, "--metrics", "m"], "--metrics"),
    ([*_TRAIN, "--initial-network", "i.nc"], "--initial-network"), (_PREDICT, "-s"),
    (_GENERATE, "-o"), ([*_EVALUATE, "--json-out", "j"], "--json-out")])
def test_an_empty_path_is_a_usage_error(tmp_path, monkeypatch, argv, flag):
    """An unset variable in a script (-i "$DATA"): the readers said "Error: : the input file
    does not exist", naming neither the file nor the flag."""
    monkeypatch.chdir(tmp_path)
    assert "is an empty path; give the file's path (is a variable in the command unset?)" in \
        _refused_flag(argv, flag, "")


class _FullFileSystem:
    """The os module as destiny.io.failures sees it on a full file system: writes fail with
    ``failure``, once ``room`` bytes are written (a write that does not fit writes what does,
    as where a little space is left)."""

    def __init__(self, room=0, failure=(28, "No space left on device")):
        self.room, self.failure = room, failure

    def __getattr__(self, name):
        return getattr(os, name)

    def write(self, fd, data):
        if not self.room:
            raise OSError(*self.failure)
        written = min(self.room, len(data))
        self.room -= written
        return written


@pytest.mark.parametrize("system", ["full", "nearly-full", "io-error", "not-full"])
@pytest.mark.parametrize("error", [(13, "Permission denied"), (-101, "NetCDF: HDF error")],
                         ids=["EACCES", "HDF-error"])
def test_netcdf_unable_to_create_a_file_on_a_full_file_system_says_it_is_full(
        tmp_path, monkeypatch, system, error):
    """netCDF reports a failure of HDF5 to create a file as EACCES, or as its own error code
    ("NetCDF: HDF error"): a nearly full tmpfs gave "Permission denied" for the temporary file,
    which generate-netcdf had just created. The file system is tried, by writes until one
    fails (the first may fit in part): full, the message says so; else (not full, or a write
    failing otherwise) the error stays, naming the output."""
    import destiny.generate
    from destiny.io import failures

    def create(path, *_, **__):  # as netCDF4.Dataset(path, "w") where HDF5 cannot create it
        raise OSError(*error, path)

    monkeypatch.setattr(destiny.generate, "write_dataset", create)
    if system != "not-full":
        monkeypatch.setattr(failures, "os", _FullFileSystem(
            room=100 if system == "nearly-full" else 0,
            failure=(5, "Input/output error") if system == "io-error" else
            (28, "No space left on device")))
    full = system in ("full", "nearly-full")
    out = tmp_path / "out.nc"
    result = generate_in(tmp_path, "-c")
    assert result.exit_code == 1, result.output
    assert result.output.startswith(
        f"Error: {out}: No space left on device; no output was replaced (each is put in place "
        "only once complete). Free space on that file system" if full else
        f"Error: {out}: {error[1]}; no output was replaced"), result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_a_netcdf_write_past_the_size_limit_says_so(tmp_path):
    """netCDF's "HDF error" as the dataset outgrows what the file system takes (here, for
    real, the file size limit: ulimit -f): the message gives the system's reason."""
    from destiny.cli.generate_netcdf import generate_netcdf

    (tmp_path / "in.txt").write_text("".join(f"s{s}\t" + ":".join(f"i{(s * 7 + i) % 500}"
                                                                   for i in range(20)) + "\n"
                                             for s in range(400)))
    argv = ["-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "out.nc"), "-d", "gl_input",
            "-f", str(tmp_path / "f"), "-s", str(tmp_path / "s"), "-c", "-q"]
    text = (tmp_path / "in.txt").read_bytes()
    _compiled(generate_netcdf, argv, tmp_path)
    (tmp_path / "in.txt").write_bytes(text)
    done = subprocess.run([str(pathlib.Path(sys.executable).parent / "generate-netcdf"), *argv],
                          capture_output=True, text=True, timeout=120,
                          preexec_fn=_file_size_limit(16384))
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"Error: {tmp_path / 'out.nc'}: File too large; no output was "
                                  "replaced"), done.stderr
    assert "file size limit (ulimit -f)" in done.stderr, done.stderr
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


@pytest.mark.parametrize("where", ["temporary", "lock"])
def test_a_file_system_full_as_an_output_is_begun_says_so(tmp_path, monkeypatch, where):
    """No space (or no inode, or the quota) for the lock or the temporary file: the advice is
    to free space, not to check the directory's permissions."""
    import errno
    import tempfile

    def full(*_, **__):
        raise OSError(errno.ENOSPC, "No space left on device")

    real_open = os.open

    def lock_full(path, *args, **kwargs):
        return full() if str(path).endswith(".lock") else real_open(path, *args, **kwargs)

    if where == "temporary":
        monkeypatch.setattr(tempfile, "mkstemp", full)
    else:
        monkeypatch.setattr(os, "open", lock_full)
    result = generate_in(tmp_path, "-c")
    assert result.exit_code == 1, result.output
    # (f: the indexes are written before the dataset, and the locks taken in their names' order)
    assert result.output.startswith(f"Error: {tmp_path / 'f'}: cannot create "), result.output
    assert "(No space left on device); free space on that file system (or raise the quota), " \
           "or choose another path." in result.output, result.output
    assert "permission" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def lock_files_fail(monkeypatch, error: OSError):
    """Creating any lock file (os.open of a ``.lock`` path) raises ``error``."""
    real_open = os.open

    def lock_fails(path, *args, **kwargs):
        if str(path).endswith(".lock"):
            raise error
        return real_open(path, *args, **kwargs)

    monkeypatch.setattr(os, "open", lock_fails)


def test_too_many_open_files_as_an_output_is_begun_says_to_raise_the_limit(tmp_path,
                                                                          monkeypatch):
    """The process's limit on open files (ulimit -n, low in a cron job or a service) reached
    as the lock file is created: neither the directory's permissions nor another path help."""
    import errno

    lock_files_fail(monkeypatch, OSError(errno.EMFILE, "Too many open files"))
    result = generate_in(tmp_path, "-c")
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {tmp_path / 'f'}: cannot create the lock file "), \
        result.output
    assert "(Too many open files); this process has as many files open as its limit allows " \
           "(ulimit -n, " in result.output, result.output
    assert "permission" not in result.output and "another path" not in result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_an_output_in_a_directory_that_holds_no_new_files_says_so(tmp_path, monkeypatch):
    """A directory that is there but where no file can be made (/proc: creating one fails with
    ENOENT, as in a directory removed meanwhile): the refusal said the directory had been
    removed while the command ran (predict -s /proc/version, as root)."""
    import errno

    lock_files_fail(monkeypatch, FileNotFoundError(errno.ENOENT, "No such file or directory",
                                                   str(tmp_path / ".f.lock")))
    result = generate_in(tmp_path, "-c")
    assert result.exit_code == 1, result.output
    assert result.output.startswith(f"Error: {tmp_path / 'f'}: cannot create the lock file "), \
        result.output
    assert result.output.endswith("(No such file or directory); that directory's file system "
                                  "holds no new files (as /proc); choose another path.\n"), \
        result.output
    assert sorted(p.name for p in tmp_path.iterdir()) == ["in.txt"]


def test_a_lock_file_that_is_a_link_to_a_missing_directory_says_so(tmp_path):
    """.NAME.lock made a link by hand, to a directory that is not there: creating the lock
    fails with ENOENT in a directory that exists, which is neither a removed directory nor a
    file system without new files."""
    (tmp_path / ".f.lock").symlink_to(tmp_path / "missing" / "lock")
    result = generate_in(tmp_path, "-c")
    assert result.exit_code == 1, result.output
    assert result.output == (
        f"Error: {tmp_path / 'f'}: cannot create the lock file '{tmp_path / '.f.lock'}' (No such "
        f"file or directory); it is a symbolic link to '{tmp_path / 'missing' / 'lock'}', whose "
        "directory does not exist; remove the link.\n"), result.output


def test_an_output_directory_removed_while_the_command_runs_says_so(tmp_path):
    """The directory was there when the outputs were checked, and is gone when a temporary file
    is created in it (rm -rf of a run's directory while it trains): the refusal said to choose
    another path, as if the path given were wrong."""
    from destiny.errors import OutputError
    from destiny.io.atomic import OutputSet

    out = tmp_path / "run"
    out.mkdir()
    shutil.rmtree(out)
    with pytest.raises(OutputError) as refused:
        OutputSet().path(out / "net.nc3.nc")
    assert str(refused.value) == (
        f"{out / 'net.nc3.nc'}: cannot create a file in '{out}' to write it (No such file or "
        "directory); the directory was removed (or renamed) while the command ran; create it "
        "again (mkdir -p) and run the command again, or choose another path.")


def test_an_output_the_file_system_refuses(tmp_path, monkeypatch):
    """check_writable passed, but creating the temporary file fails (a full or read-only
    file system, /proc): an OutputError naming the output, not an OSError."""
    import errno
    import tempfile

    from destiny.errors import OutputError
    from destiny.io.atomic import atomic_outputs

    def refuse(**_):
        raise OSError(errno.EROFS, "Read-only file system")

    monkeypatch.setattr(tempfile, "mkstemp", refuse)
    with pytest.raises(OutputError, match=r"out\.nc: cannot create a file in .* \(Read-only"):
        with atomic_outputs() as out:
            out.path(tmp_path / "out.nc")
    assert list(tmp_path.iterdir()) == []


def test_a_pinned_file_is_replaced_once_renamed_over_or_removed_not_once_unreadable(
        tmp_path, monkeypatch):
    """``atomic.pinned``: a file renamed over or removed is replaced; one that cannot be read
    now (its permissions changed, an I/O error) is left to the reads, which say so."""
    import errno

    from destiny.io import atomic

    path = tmp_path / "data.nc"
    path.write_bytes(b"old")
    with atomic.pinned(path) as replaced:
        assert not replaced()
        real_stat = os.stat

        def refused(*args, **kwargs):
            raise PermissionError(errno.EACCES, "Permission denied", str(path))

        monkeypatch.setattr(atomic.os, "stat", refused)
        assert not replaced()
        monkeypatch.setattr(atomic.os, "stat", real_stat)
        (tmp_path / "new").write_bytes(b"new")
        os.replace(tmp_path / "new", path)
        assert replaced()
    with atomic.pinned(path) as replaced:
        path.unlink()
        assert replaced()
    with atomic.pinned(tmp_path / "missing") as replaced:  # (its reads say it is missing)
        assert not replaced()


def test_outputs_reach_the_disk_before_they_are_renamed(tmp_path, monkeypatch):
    """Each output's data is synced before its rename, and the directory after it, so that a
    crash never publishes an empty file where the old one stood."""
    from destiny.io import atomic

    events = []
    fsync, replace = os.fsync, os.replace

    def fsync_noted(fd):
        events.append(("fsync", os.path.realpath(f"/proc/self/fd/{fd}")))
        fsync(fd)

    def replace_noted(src, dst):
        events.append(("replace", os.path.realpath(src)))
        replace(src, dst)

    monkeypatch.setattr(atomic.os, "fsync", fsync_noted)
    monkeypatch.setattr(atomic.os, "replace", replace_noted)
    with atomic.atomic_outputs() as out:
        temporaries = [os.path.realpath(out.path(tmp_path / name)) for name in ("a.nc", "b")]
        for tmp in temporaries:
            pathlib.Path(tmp).write_text("data")
    directory = os.path.realpath(tmp_path)
    assert events == ([("fsync", t) for t in temporaries] + [("replace", t) for t in temporaries]
                      + [("fsync", directory)])


def test_an_outputs_temporary_file_is_beside_it_and_each_runs_own(tmp_path):
    """The temporary file is in the output's directory (a rename from elsewhere, as $TMPDIR,
    fails across file systems), named as a killed run's clean-up looks for it
    (.NAME.XXXXXXXX.tmp), and two runs writing one output at once (the --initial-network of
    two trainings, which no lock keeps apart) each write a file of their own."""
    import re

    from destiny.io import atomic

    with atomic.atomic_outputs() as one, atomic.atomic_outputs() as two:
        temporaries = [out.path(tmp_path / "out.nc") for out in (one, two)]
        for tmp, data in zip(temporaries, ("one", "two"), strict=True):
            pathlib.Path(tmp).write_text(data)
    assert temporaries[0] != temporaries[1]
    for tmp in temporaries:
        assert os.path.dirname(tmp) == os.path.realpath(tmp_path)
        assert re.fullmatch(r"\.out\.nc\.[a-z0-9_]{8}\.tmp", os.path.basename(tmp)), tmp
    assert [p.name for p in tmp_path.iterdir()] == ["out.nc"]
    assert (tmp_path / "out.nc").read_text() in ("one", "two")


@pytest.mark.parametrize("umask,mode", [(0o022, 0o644), (0o027, 0o640)], ids=["022", "027"])
def test_outputs_get_the_permissions_a_new_file_gets(tmp_path, umask, mode):
    """An output put in place has the mode any new file gets under the umask (0644 under
    0022), not the private 0600 of the temporary file it was written as: others read it."""
    import stat

    from destiny.io import atomic

    before = os.umask(umask)
    try:
        with atomic.text_output(tmp_path / "out.txt") as f:
            f.write("data\n")
    finally:
        os.umask(before)
    assert stat.S_IMODE((tmp_path / "out.txt").stat().st_mode) == mode


def test_a_file_system_that_cannot_sync_still_takes_outputs(tmp_path, monkeypatch):
    """Some FUSE and SMB mounts cannot fsync (EINVAL, ENOTSUP): outputs are put in place
    there as before."""
    import errno

    from destiny.io import atomic

    def cannot(fd):
        raise OSError(errno.EINVAL, "Invalid argument")

    monkeypatch.setattr(atomic.os, "fsync", cannot)
    with atomic.atomic_outputs() as out:
        pathlib.Path(out.path(tmp_path / "out.nc")).write_text("new")
    assert [(p.name, p.read_text()) for p in tmp_path.iterdir()] == [("out.nc", "new")]


def test_an_output_failing_to_reach_the_disk_is_named_and_not_published(tmp_path, monkeypatch):
    """An I/O error (or NFS's full disk) reported only by fsync names the output as the user
    gave it; nothing is put in place and no temporary file is left."""
    import errno

    from destiny.errors import system_failure
    from destiny.io import atomic

    def fail(fd):
        raise OSError(errno.EIO, "Input/output error")

    (tmp_path / "out.nc").write_text("old")
    monkeypatch.setattr(atomic.os, "fsync", fail)
    with pytest.raises(OSError) as raised:
        with atomic.atomic_outputs() as out:
            pathlib.Path(out.path(tmp_path / "out.nc")).write_text("new")
    assert system_failure(raised.value).startswith(
        f"{tmp_path / 'out.nc'}: Input/output error; no output was replaced")
    assert [(p.name, p.read_text()) for p in tmp_path.iterdir()] == [("out.nc", "old")]


def test_an_interrupt_while_outputs_are_put_in_place_waits_for_all(tmp_path, monkeypatch):
    """Ctrl-C or SIGTERM between two of a command's renames (a dataset and its index) is held
    until all are in place, then raised as an interrupt that names them: never some outputs
    new and the others old."""
    import signal

    from destiny.errors import InterruptedAfterOutputs
    from destiny.io import atomic

    rename = os.replace
    renamed = []

    def replace_then_signal(src, dst):
        rename(src, dst)
        renamed.append(dst)
        if len(renamed) == 1:
            os.kill(os.getpid(), signal.SIGINT)
            for _ in range(1000):  # time for the handler, were it to run now
                pass

    monkeypatch.setattr(atomic.os, "replace", replace_then_signal)
    before = signal.getsignal(signal.SIGINT)
    try:
        signal.signal(signal.SIGINT, signal.default_int_handler)  # (pytest run as `... &`)
        with pytest.raises(InterruptedAfterOutputs) as raised:
            with atomic.atomic_outputs() as out:
                for name in ("data.nc", "index"):
                    pathlib.Path(out.path(tmp_path / name)).write_text(name)
        assert signal.getsignal(signal.SIGINT) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGINT, before)
    assert sorted(p.name for p in tmp_path.iterdir()) == ["data.nc", "index"]
    assert raised.value.paths == [str(tmp_path / "data.nc"), str(tmp_path / "index")]


def test_a_run_killed_between_generate_netcdfs_renames_leaves_the_old_dataset_to_convert_again(
        tmp_path, monkeypatch):
    """SIGKILL (or a power cut) between generate-netcdf's renames, which nothing can hold
    back, stands in here as an exception out of the second rename. The indexes are put in
    place first: the old dataset stays, still numbered by indexes that only grew, and the
    next run converts again. The dataset first had left a new dataset beside an index
    without its new entries, which make took as up to date."""
    from destiny.io import atomic
    from destiny.io.dataset import dataset_summaries, read_dataset
    from destiny.io.index import read_index
    from destiny.predict import check_trained_index

    def generate(text, *flags):
        return generate_in(tmp_path, "-q", *flags, text=text)

    assert generate("s1\ta:b\n", "-c").exit_code == 0
    old = (tmp_path / "out.nc").read_bytes()

    class Killed(BaseException):
        pass

    rename, renamed = os.replace, []

    def replace_then_die(src, dst):
        if renamed:
            raise Killed
        rename(src, dst)
        renamed.append(os.path.basename(dst))

    monkeypatch.setattr(atomic.os, "replace", replace_then_die)
    grown = "s1\ta:b\ns2\tb:c\n"
    with pytest.raises(Killed):
        generate(grown, "-m")
    assert renamed == ["f"] and (tmp_path / "out.nc").read_bytes() == old
    labels, values = read_index(tmp_path / "f")
    assert labels == ["a", "b", "c"]
    recorded = dataset_summaries(tmp_path / "out.nc")["gl_input"].index  # (the old dataset's)
    check_trained_index(tmp_path / "f", labels, values, recorded, "input", "Input")

    monkeypatch.setattr(atomic.os, "replace", rename)
    assert generate(grown, "-m").exit_code == 0
    assert read_dataset(tmp_path / "out.nc").rows == 2
    assert read_index(tmp_path / "s")[0] == ["s1", "s2"]


def test_an_interrupt_while_an_output_fails_to_be_put_in_place_does_not_call_it_complete(
        tmp_path, monkeypatch):
    """Ctrl-C held while the rename into place fails (an immutable file): the interrupt is a
    plain one once the renames stop, not one saying that the outputs are complete."""
    import errno
    import signal

    from destiny.errors import InterruptedAfterOutputs
    from destiny.io import atomic

    def refused(src, dst):
        os.kill(os.getpid(), signal.SIGINT)
        raise OSError(errno.EPERM, "Operation not permitted", dst)

    (tmp_path / "out.txt").write_text("old")
    monkeypatch.setattr(atomic.os, "replace", refused)
    before = signal.signal(signal.SIGINT, signal.default_int_handler)  # (pytest run as `&`)
    try:
        with pytest.raises(KeyboardInterrupt) as raised:
            with atomic.text_output(tmp_path / "out.txt") as f:
                f.write("new")
    finally:
        signal.signal(signal.SIGINT, before)
    assert not isinstance(raised.value, InterruptedAfterOutputs)
    assert [(p.name, p.read_text()) for p in tmp_path.iterdir()] == [("out.txt", "old")]


def test_a_directory_that_cannot_be_synced_after_the_renames_still_takes_the_outputs(
        tmp_path, monkeypatch):
    """The directory's sync comes after the renames, which are done: its failure (an I/O
    error, a file system that cannot sync a directory) is passed over, not reported as an
    output that was not replaced."""
    import errno
    import stat

    from destiny.io import atomic

    fsync = os.fsync

    def directories_fail(fd):
        if stat.S_ISDIR(os.fstat(fd).st_mode):
            raise OSError(errno.EIO, "Input/output error")
        fsync(fd)

    monkeypatch.setattr(atomic.os, "fsync", directories_fail)
    with atomic.text_output(tmp_path / "out.txt") as f:
        f.write("new")
    assert [(p.name, p.read_text()) for p in tmp_path.iterdir()] == [("out.txt", "new")]


@pytest.mark.parametrize("where", ["temporary", "lock"])
def test_an_interrupt_as_a_file_is_created_leaves_no_file(tmp_path, monkeypatch, where):
    """SIGTERM just after a temporary output or a lock file is created, before it was noted
    for clean-up: it is held until it is, so nothing is left. (A SIGTERM sent as a script's
    temporary appeared left it behind, 2 runs in 81 on a loaded machine.)"""
    import fcntl
    import signal
    import tempfile

    from destiny.io import atomic

    def then_signal(call):
        def wrapped(*args, **kwargs):
            result = call(*args, **kwargs)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # time for the handler, were it to run now
                pass
            return result
        return wrapped

    if where == "temporary":
        monkeypatch.setattr(tempfile, "mkstemp", then_signal(tempfile.mkstemp))
    else:
        monkeypatch.setattr(fcntl, "flock", then_signal(fcntl.flock))
    before = signal.signal(signal.SIGTERM, signal.default_int_handler)
    try:
        with pytest.raises(KeyboardInterrupt):
            with atomic.exclusive(tmp_path / "out.txt", "output"), \
                    atomic.text_output(tmp_path / "out.txt") as f:
                f.write("never")
        assert signal.getsignal(signal.SIGTERM) is signal.default_int_handler
    finally:
        signal.signal(signal.SIGTERM, before)
    assert list(tmp_path.iterdir()) == []


def test_locks_failing_while_waiting_run_unlocked_and_sweep_nothing(tmp_path, monkeypatch):
    """Another run holds the lock, then the wait fails as on a file system without flock
    (NFS's lockd gone): the block runs unlocked, as where flock never worked, and does not
    remove the old temporaries that the other run, perhaps only stalled, may still own."""
    import errno
    import fcntl
    import time

    from destiny.io import atomic

    calls = []

    def busy_then_no_locks(fd, operation):
        calls.append(operation)
        if operation & fcntl.LOCK_NB:
            raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable")
        raise OSError(errno.ENOLCK, "No locks available")

    old = tmp_path / ".out.txt.abcdefgh.tmp"
    old.write_text("another run's")
    os.utime(old, (time.time() - 2 * atomic.ABANDONED_SECONDS,) * 2)
    monkeypatch.setattr(fcntl, "flock", busy_then_no_locks)
    waits = []
    with atomic.exclusive(tmp_path / "out.txt", "output", on_wait=waits.append):
        ran = True
    assert ran and len(waits) == 1 and len(calls) == 2 and old.exists()


def test_a_wait_that_ends_as_the_holder_removes_its_lock_file_locks_the_new_one(tmp_path,
                                                                                monkeypatch):
    """The run waited for removes its lock file as it finishes: the lock the waiter then gets
    is on a file no longer there, which a third run would not see. The waiter locks the file
    at the lock's path instead, so that a run coming meanwhile stops at it."""
    import errno
    import fcntl

    from destiny.errors import OutputError
    from destiny.io import atomic

    real, calls = fcntl.flock, []
    lock = atomic.lock_path(tmp_path / "out.txt")

    def busy_then_released(fd, operation):
        calls.append(operation)
        if len(calls) == 1:  # the other run holds it
            raise BlockingIOError(errno.EWOULDBLOCK, "Resource temporarily unavailable")
        if len(calls) == 2:  # the wait ends as the other run, done, removes its file
            os.unlink(lock)
        return real(fd, operation)

    monkeypatch.setattr(fcntl, "flock", busy_then_released)
    waits = []
    with atomic.exclusive(tmp_path / "out.txt", "output", on_wait=waits.append):
        monkeypatch.setattr(fcntl, "flock", real)
        assert len(waits) == 1 and os.path.exists(lock)
        with pytest.raises(OutputError, match="another run is writing this output now"):
            with atomic.exclusive(tmp_path / "out.txt", "output"):
                pass
    assert not os.path.exists(lock)


def test_a_killed_runs_temporary_file_is_removed_once_an_hour_old_and_only_it(tmp_path):
    """docs/dsstne.md's promise: the next run that takes an output's lock removes its temporary
    files (`.NAME.XXXXXXXX.tmp`) once they are an hour old; one younger (perhaps a live
    run's on another machine) and a file only starting like one are left."""
    import time

    from destiny.io import atomic

    now = time.time()
    ages = {".out.txt.aaaaaaaa.tmp": 61 * 60, ".out.txt.bbbbbbbb.tmp": 59 * 60,
            ".out.txt.cccccccc.tmp.bak": 120 * 60}
    for name, age in ages.items():
        (tmp_path / name).write_text("partial")
        os.utime(tmp_path / name, (now - age, now - age))
    with atomic.exclusive(tmp_path / "out.txt", "output"):
        left = sorted(p.name for p in tmp_path.iterdir() if not p.name.endswith(".lock"))
    assert left == [".out.txt.bbbbbbbb.tmp", ".out.txt.cccccccc.tmp.bak"]


def generate_under_sigterm(tmp_path):
    """generate-netcdf -c of a one-line input into out.nc, f and s, in-process, for a test
    whose stand-in sends SIGTERM; the SIGTERM handler it had is restored after."""
    import signal

    before = signal.getsignal(signal.SIGTERM)
    try:
        return generate_in(tmp_path, "-c", "-q")
    finally:
        signal.signal(signal.SIGTERM, before)


def test_an_interrupt_held_until_the_outputs_are_in_place_says_they_are_complete(tmp_path,
                                                                               monkeypatch):
    import signal

    from destiny.io import atomic

    rename = os.replace

    def replace_then_signal(src, dst):
        rename(src, dst)
        os.kill(os.getpid(), signal.SIGTERM)

    monkeypatch.setattr(atomic.os, "replace", replace_then_signal)
    result = generate_under_sigterm(tmp_path)
    assert result.exit_code == 1
    assert result.output == (f"Error: interrupted as the outputs were put in place, once all "
                             f"were: {tmp_path / 'f'}, {tmp_path / 's'}, {tmp_path / 'out.nc'} "
                             "are complete.\n")


def test_an_interrupt_as_the_locks_are_released_says_the_outputs_are_complete(tmp_path,
                                                                            monkeypatch):
    """SIGTERM once generate-netcdf's outputs are in place, as it removes its lock files (the
    crash campaign's signal at the removal of `.samples_input.lock`): the message said "no
    output was replaced", the opposite of what was on the disk, and the lock file whose
    removal it cut short stayed. The removal now finishes first, and the message says that the
    outputs are complete."""
    import signal

    from destiny.io import atomic

    unlink, signalled = os.unlink, []

    def signal_then_unlink(path, *args, **kwargs):
        if str(path).endswith(".lock") and not signalled:
            signalled.append(path)
            os.kill(os.getpid(), signal.SIGTERM)
            for _ in range(1000):  # time for the handler, were it to run now
                pass
        unlink(path, *args, **kwargs)

    monkeypatch.setattr(atomic.os, "unlink", signal_then_unlink)
    result = generate_under_sigterm(tmp_path)
    assert signalled and result.exit_code == 1
    assert result.output == (f"Error: interrupted as the command finished, once its outputs "
                             f"were put in place: {tmp_path / 'f'}, {tmp_path / 's'}, "
                             f"{tmp_path / 'out.nc'} are complete.\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["f", "in.txt", "out.nc", "s"]


def test_generate_netcdf_says_it_waits_for_another_run(tmp_path):
    """Another process writing the same index: generate-netcdf says on stderr what it waits
    for, then runs when the lock is released (an flock between two processes), and its
    summary tells the time it waited from the time it took."""
    import re
    import threading
    import time

    from destiny.io.atomic import exclusive

    (tmp_path / "in.txt").write_text("u1\tx:y\n")
    exe = shutil.which("generate-netcdf", path=str(pathlib.Path(sys.executable).parent))
    argv = [exe, "-i", "in.txt", "-o", "gl.nc", "-d", "gl_input", "-f", "features", "-s",
            "samples", "-c"]
    with exclusive(tmp_path / "features", "feature index (-f)"):
        proc = subprocess.Popen(argv, cwd=tmp_path, stderr=subprocess.PIPE, text=True)
        watchdog = threading.Timer(120, proc.kill)  # a run that never says it waits
        watchdog.start()
        try:
            first = proc.stderr.readline()
        finally:
            watchdog.cancel()
        assert first == ("generate-netcdf: features: waiting for another run writing this "
                         "feature index (-f) to finish (it holds "
                         f"{tmp_path / '.features.lock'}).\n")
        assert proc.poll() is None and not (tmp_path / "gl.nc").exists()
        time.sleep(1.0)
    rest = proc.communicate(timeout=120)[1]
    assert proc.returncode == 0, rest
    assert "wrote gl.nc, features, samples" in rest
    waited = float(re.search(r", after ([0-9.]+) s waiting for another run\n", rest)[1])
    assert waited >= 1.0, rest


def test_the_progress_bar_counts_bytes_on_stderr_shown_only_on_a_terminal_after_a_second(
        monkeypatch):
    """generate-netcdf's bar (cli/common.py's progress_bar): bytes with their units (1.2MB),
    on stderr (stdout is for data), only on a terminal (tqdm's disable=None), after a second
    (none for a small file), cleared when done."""
    import tqdm

    from destiny.cli.common import progress_bar

    made = []
    monkeypatch.setattr(tqdm, "tqdm", lambda **kwargs: made.append(kwargs) or "bar")
    assert progress_bar(1234, "generate-netcdf") == "bar"
    assert made == [dict(total=1234, desc="generate-netcdf", unit="B", unit_scale=True,
                         delay=1.0, file=sys.stderr, disable=None, leave=False)]


def test_generate_netcdfs_progress_rate_leaves_out_the_wait(tmp_path, monkeypatch):
    """The progress bar's clock restarts once another run's lock is released, so that its
    rate is the conversion's own, not diluted by the wait."""
    import destiny.cli.generate_netcdf as command
    import destiny.generate
    from destiny.generate import GenerateReport

    events = []

    class Bar:
        disable = False

        def __enter__(self):
            return self

        def __exit__(self, *exc):
            return False

        def reset(self, total):
            events.append(("reset", total))

        def update(self, n):
            events.append(("update", n))

    def run(*, progress, on_wait, **_):
        progress(3)
        on_wait("waiting")
        events.append(("lock taken",))
        progress(5)
        progress(7)
        return GenerateReport(samples=1, entries=2, width=2, features=2, new_features=2,
                              new_samples=1, dropped=0, lines_with_drops=0)

    bars = []
    monkeypatch.setattr(command, "progress_bar", lambda total, desc: bars.append(Bar()) or bars[0])
    monkeypatch.setattr(destiny.generate, "generate_netcdf", run)
    (tmp_path / "in.txt").write_text("u1\tx:y\n")
    result = CliRunner().invoke(command.generate_netcdf, [
        "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "gl.nc"), "-d", "gl_input",
        "-f", str(tmp_path / "f"), "-s", str(tmp_path / "s"), "-c", "-q"])
    assert result.exit_code == 0, result.output
    size = (tmp_path / "in.txt").stat().st_size
    assert events == [("update", 3), ("lock taken",), ("reset", size), ("update", 5),
                      ("update", 7)]
    assert bars[0].disable  # -q: no bar
    assert result.output == ""  # (nor the wait)


def test_generate_netcdfs_time_leaves_out_the_wait(tmp_path, monkeypatch):
    """The summary's time is the conversion's own, the wait for another run's lock told
    apart."""
    import types

    import destiny.cli.generate_netcdf as command
    import destiny.generate
    from destiny.generate import GenerateReport

    clock = iter([100.0, 110.0])
    monkeypatch.setattr(command, "time", types.SimpleNamespace(perf_counter=lambda: next(clock)))
    monkeypatch.setattr(destiny.generate, "generate_netcdf", lambda **_: GenerateReport(
        samples=1, entries=2, width=128, features=2, new_features=2, new_samples=1, dropped=0,
        lines_with_drops=0, written=["gl.nc"], waited=4.0))
    (tmp_path / "in.txt").write_text("u1\tx:y\n")
    result = CliRunner().invoke(command.generate_netcdf, [
        "-i", str(tmp_path / "in.txt"), "-o", str(tmp_path / "gl.nc"), "-d", "gl_input",
        "-f", str(tmp_path / "f"), "-s", str(tmp_path / "s"), "-c"])
    assert result.exit_code == 0, result.output
    assert result.output.endswith(" in 6.0 s, after 4.0 s waiting for another run\n"), \
        result.output


# Names that are not UTF-8: Python holds a byte of a file name or of the command line that is
# not UTF-8 as a surrogate escape ('\udcff' for the byte 0xff), which messages showed as such
# (stderr writes a lone surrogate as '\udcff'; a strict UTF-8 stream could not write it at
# all). They show the byte, \xff, as the messages on NetCDF names (test_netcdf_names.py) do.

BAD = os.fsdecode(b"\xff")


def _named(path, text: str) -> None:
    """Create the file ``path``, whose name is not UTF-8; skip where the file system refuses
    such a name."""
    try:
        pathlib.Path(path).write_text(text)
    except OSError as e:  # (one that takes only UTF-8 names: macOS's APFS, some mounts)
        pytest.skip(f"the file system refuses a name that is not UTF-8 ({e.strerror})")


def _datasets() -> None:
    """i.nc and o.nc, which train reads before the network definition."""
    import numpy as np

    from destiny.io.dataset import SparseDataset, write_dataset

    for path, name in (("i.nc", "gl_input"), ("o.nc", "gl_output")):
        write_dataset(path, SparseDataset(name, 8, np.array([0, 1]), np.array([0], np.int32)))


def _shows_the_byte(result, *texts, code=1):
    assert result.exit_code == code, result.output
    assert result.exception is None or isinstance(result.exception, SystemExit), \
        result.exception  # no traceback
    for text in texts:
        assert text in result.stderr, result.stderr
    # (CliRunner's stderr, as the real one, writes a lone surrogate as '\udcff')
    assert "\\udc" not in result.stderr, result.stderr


@pytest.mark.parametrize("argv, texts, code", [
    (["generate-netcdf", "-i", f"in{BAD}.txt", "-o", "out.nc", "-d", "gl", "-f", "f", "-s", "s",
      "-c"], ["Error: in\\xff.txt: the input file does not exist"], 1),
    (["generate-netcdf", "-i", "in.txt", "-o", "out.nc", "-d", "gl", "-f", f"d{BAD}/f", "-s",
      "s", "-c"], ["Error: d\\xff/f: the directory '", "/d\\xff' for the feature index"], 1),
    (["evaluate", "-r", "in.txt", "-t", f"held{BAD}"],
     ["Error: held\\xff: the held-out file does not exist"], 1),
    (["train", "-c", f"net{BAD}.json", "-i", "i.nc", "-o", "o.nc", "-n", "n.nc"],
     ["Error: net\\xff.json: cannot read the network definition"], 1),
    (["predict", "-n", "n.nc", "-r", "in.txt", "-i", "fi", "-o", "fo", "-s", "r",
      "-p", f"4.3{BAD}"], ["'4.3\\xff' is not a printf conversion"], 2),
], ids=["generate-input", "generate-index-directory", "evaluate-held-out", "train-config",
        "predict-format"])
def test_a_name_not_utf8_shows_its_bytes(tmp_path, monkeypatch, argv, texts, code):
    """A path or value from the command line, shown as given (a message's start) or quoted
    (repr's '\\udcff' too)."""
    monkeypatch.chdir(tmp_path)
    pathlib.Path("in.txt").write_text("u1\ta:b\n")
    _datasets()
    _shows_the_byte(CliRunner().invoke(cli, argv), *texts, code=code)


@pytest.mark.parametrize("argv, text, texts", [
    (["generate-netcdf", "-i", f"in{BAD}.txt", "-o", "out.nc", "-d", "gl", "-f", "f", "-s", "s",
      "-c"], "u1 a\n", ["Error: in\\xff.txt, line 1, column 1: the line 'u1 a' has no TAB"]),
    (["evaluate", "-r", f"in{BAD}.txt", "-t", "held.txt"], "u1 a\n",
     ["Error: in\\xff.txt, line 1: 'u1 a' has no TAB"]),
    (["train", "-c", f"in{BAD}.txt", "-i", "i.nc", "-o", "o.nc", "-n", "n.nc"], "{",
     ["Error: in\\xff.txt: line 1, column 2: invalid JSON"]),
], ids=["generate", "evaluate", "train"])
def test_a_file_named_not_utf8_shows_its_bytes_in_its_errors(tmp_path, monkeypatch, argv, text,
                                                             texts):
    monkeypatch.chdir(tmp_path)
    pathlib.Path("held.txt").write_text("u1\ta\n")
    _datasets()
    _named(f"in{BAD}.txt", text)
    _shows_the_byte(CliRunner().invoke(cli, argv), *texts)


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
@pytest.mark.parametrize("argv", [["train", "-h"], ["predict", "--help"], ["destiny", "--version"],
                                  ["evaluate", "-h"], ["generate-netcdf", "-h"]])
def test_help_or_version_to_a_full_standard_output_is_a_message(argv):
    """click writes the help and the version itself, outside the command: a full device there
    gave a traceback. A usage error is still click's (exit 2), and a closed pipe is silent."""
    command = [str(pathlib.Path(sys.executable).parent / argv[0]), *argv[1:]]
    # (stdout buffered, as without PYTHONUNBUFFERED: what it holds is not written again at exit)
    buffered = {k: v for k, v in os.environ.items() if k != "PYTHONUNBUFFERED"}
    with open("/dev/full", "wb") as full:
        done = subprocess.run(command, stdout=full, stderr=subprocess.PIPE, text=True,
                              timeout=120, env=buffered)
    assert (done.returncode, done.stderr) == (1, "Error: standard output: No space left on "
                                                 "device; the help or version was not written.\n")
    with open("/dev/full", "wb") as full:
        done = subprocess.run([*command, "--no-such-flag"], stdout=full, stderr=subprocess.PIPE,
                              text=True, timeout=120)
    assert done.returncode == 2 and "No such option" in done.stderr, done.stderr
    piped = subprocess.run(f"'{command[0]}' {' '.join(argv[1:])} | head -c 1 >/dev/null",
                           shell=True, stderr=subprocess.PIPE, text=True, timeout=120)
    assert piped.stderr == "", piped.stderr


@pytest.mark.skipif(not os.path.exists("/dev/full"), reason="needs /dev/full")
def test_a_failing_write_named_not_utf8_shows_its_bytes(tmp_path, monkeypatch):
    """The system's failure (OSError's file name, errors.system_failure) is worded in cli/."""
    monkeypatch.chdir(tmp_path)
    pathlib.Path("recs.txt").write_text("u1\ta,1:\n")
    pathlib.Path("held.txt").write_text("u1\ta\n")
    try:
        os.symlink("/dev/full", f"full{BAD}")
    except OSError as e:
        pytest.skip(f"the file system refuses a name that is not UTF-8 ({e.strerror})")
    result = CliRunner().invoke(cli, ["evaluate", "-r", "recs.txt", "-t", "held.txt",
                                      "--json-out", f"full{BAD}"])
    _shows_the_byte(result, "Error: full\\xff: No space left on device")


def test_a_message_of_the_command_line_shows_the_bytes(tmp_path, monkeypatch):
    """The messages cli/ words itself: a note, an interrupt's list of complete outputs."""
    import destiny.generate
    from destiny.errors import InterruptedAfterOutputs

    monkeypatch.chdir(tmp_path)
    pathlib.Path("in.txt").write_text("u1\ta:b\n")
    _named(f"f{BAD}", "")  # (the feature index, which -c writes anew)
    argv = ["generate-netcdf", "-i", "in.txt", "-o", "out.nc", "-d", "gl", "-f", f"f{BAD}",
            "-s", "s", "-c"]
    _shows_the_byte(CliRunner().invoke(cli, argv), "generate-netcdf: wrote out.nc, f\\xff, s:",
                    code=0)

    def interrupted(**kwargs):
        raise InterruptedAfterOutputs([f"out{BAD}.nc"])

    monkeypatch.setattr(destiny.generate, "generate_netcdf", interrupted)
    _shows_the_byte(CliRunner().invoke(cli, argv), "were: out\\xff.nc is complete.")


def test_a_name_not_utf8_in_predicts_messages(model, tmp_path):
    argv = ["predict", "-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
            str(model / "features_output"), "-s", str(tmp_path / "recs"), "-q"]
    _shows_the_byte(CliRunner().invoke(cli, [*argv, "-r", f"in{BAD}"]),
                    "Error: in\\xff: the input file does not exist")
    _shows_the_byte(CliRunner().invoke(cli, [*argv, "-r", str(model / "ratings.txt"),
                                             "-l", f"Out{BAD}"]),
                    "the network has no layer named 'Out\\xff'")


def test_a_name_not_utf8_reaches_stderr_as_its_bytes(tmp_path):
    """The installed command given the byte 0xff itself (as a shell's $'in\\xff' gives it)."""
    exe = pathlib.Path(sys.executable).parent / "evaluate"
    (tmp_path / "held").write_text("u1\ta\n")
    done = subprocess.run([exe, "-r", b"in\xff", "-t", "held"], cwd=tmp_path,
                          capture_output=True, timeout=60)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (b"Error: in\\xff: the recommendation file does not exist; check the "
                           b"-r path.\n")


def test_an_interrupted_predict_to_standard_output_says_what_it_holds(model, monkeypatch,
                                                                      tmp_path):
    """`predict -s -` stopped part-way: standard output already holds records, so the message
    says so; it said "no output was replaced", which a log reader took for nothing written."""
    import destiny.predict
    from destiny.cli.predict import predict

    done, calls = destiny.predict.Predictor._done, []

    def stopped(self, *args):
        calls.append(1)
        if len(calls) == 2:  # (a batch's records are out)
            raise KeyboardInterrupt
        return done(self, *args)

    monkeypatch.setattr(destiny.predict.Predictor, "_done", stopped)
    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
        str(model / "features_output"), "-r", str(model / "ratings.txt"), "-b", "1", "-q",
        "-s", "-"])
    assert result.exit_code == 1, result.output
    assert result.output.count("\t") >= 1  # (a record went out)
    assert (  # (stderr and stdout mixed: the record may come after)
        "Error: interrupted; standard output holds what was written before it, and no other "
        "output was replaced (each is put in place only once complete). Run the command again "
        "to start afresh.\n") in result.output, result.output
    calls.clear()
    # The next command, stopped alike, starts with none streamed: to a file, nothing is out.
    # (A failure other than an interrupt would not tell: its message never names streams.)
    result = CliRunner().invoke(predict, [
        "-n", str(model / "gl.nc"), "-i", str(model / "features_input"), "-o",
        str(model / "features_output"), "-r", str(model / "ratings.txt"), "-b", "1", "-q",
        "-s", str(tmp_path / "recs.txt")])
    assert result.exit_code == 1 and len(calls) == 2, result.output
    assert result.output == ("Error: interrupted; no output was replaced (each is put in place "
                             "only once complete). Run the command again to start afresh.\n")
    assert not (tmp_path / "recs.txt").exists()


# --- run_command under mpiexec: the ranks agree on the command line, one message for all ------

_RANKS_COMMAND = """
import signal
import click
from destiny.cli.common import library_errors, run_command
from destiny.errors import DestinyError
from destiny.parallel import get_comm

@click.command()
@click.option("--fail-on", type=int, default=-1)
@click.option("--late-signal", is_flag=True)
@library_errors
def command(fail_on, late_signal):
    \"\"\"A command run on every rank.\"\"\"
    comm = get_comm()
    if comm.rank == fail_on:  # (outside any collective: the others wait for this rank)
        raise DestinyError(f"only rank {comm.rank} fails")
    if late_signal:  # (as the context closes, once the command has returned)
        click.get_current_context().call_on_close(lambda: signal.raise_signal(signal.SIGTERM))
    comm.allgather(None)

run_command(command, "command")
"""


def _ranks(tmp_path, *parts):
    """``mpiexec -n 1 python command.py ARGS : ...``, a command line per rank."""
    from tests.test_parallel import MPIEXEC, needs_mpiexec, rank_env

    if needs_mpiexec.args[0]:
        pytest.skip(needs_mpiexec.kwargs["reason"])
    script = tmp_path / "command.py"
    script.write_text(_RANKS_COMMAND)
    argv = [str(MPIEXEC)]
    for args in parts:
        argv += [*([":"] if len(argv) > 1 else []), "-n", "1", sys.executable, str(script), *args]
    return subprocess.run(argv, env=rank_env(), capture_output=True, text=True, timeout=120)


def test_under_mpiexec_the_help_is_printed_once_on_stdout(tmp_path):
    done = _ranks(tmp_path, ["--help"], ["--help"])
    assert done.returncode == 0 and done.stderr == "", done.stderr
    assert done.stdout.count("Usage: command [OPTIONS]") == 1, done.stdout


def test_under_mpiexec_the_lowest_ranks_usage_error_is_printed_once(tmp_path):
    done = _ranks(tmp_path, ["--bogus0"], ["--bogus1"], [])
    assert done.returncode == 2 and done.stdout == "", done.stdout
    assert [line for line in done.stderr.splitlines() if line.startswith("Error:")] == [
        "Error: No such option '--bogus0'."], done.stderr


def test_under_mpiexec_a_failure_of_one_rank_alone_names_it_and_stops_the_job(tmp_path):
    """Rank 1 fails outside a collective, where rank 0 waits for it: its message says which
    rank, and the job stops (it would wait for ever) with the command's exit code."""
    done = _ranks(tmp_path, ["--fail-on", "1"], ["--fail-on", "1"])
    assert done.returncode == 1, done.stderr
    assert [line for line in done.stderr.splitlines() if line.startswith("Error:")] == [
        "Error: rank 1 of 2: only rank 1 fails"], done.stderr


def test_under_mpiexec_a_signal_as_the_command_finishes_is_said_once(tmp_path):
    """mpiexec passes a SIGTERM to every rank, here once the command has returned: the job
    exits 143 as one process would, and rank 0 alone says that the work was complete."""
    done = _ranks(tmp_path, ["--late-signal"], ["--late-signal"])
    assert done.returncode == 128 + 15, done.stderr
    assert done.stderr == ("command: SIGTERM came as the command finished, after its work was "
                           "complete: its outputs are whole.\n")


# Two paths that are one file, in each command and script: an output over an input or over
# another output, and evaluate's -t naming its -r file (or --popularity naming either). Each
# argv runs in an empty directory holding in.txt (and, for train, net.json and in.nc, as empty
# files: the check comes first).
COLLISIONS = [
    (["generate-netcdf", "-i", "in.txt", "-o", "out.nc", "-d", "gl_input", "-f", "idx", "-s",
      "idx", "-c"], "given as both the feature index (-f) and the sample index (-s)"),
    (["train", "-c", "net.json", "-i", "in.nc", "-o", "in.nc", "-n", "in.nc"],
     "the network file (-n) would replace the input dataset file (-i)"),
    (["predict", "-n", "net.nc", "-i", "fi", "-o", "fo", "-r", "in.txt", "-s", "in.txt"],
     "the recommendations file (-s) would replace the input text (-r)"),
    (["evaluate", "-r", "in.txt", "-t", "in.txt"], "-r and -t name the same file (in.txt)"),
    (["evaluate", "-r", "in.txt", "-t", "held.txt", "--popularity", "held.txt"],
     "-t and --popularity name the same file (held.txt)"),
    (["evaluate", "-r", "in.txt", "-t", "held.txt", "--json-out", "held.txt"],
     "the JSON output (--json-out) would replace the held-out items (-t)"),
    (["scripts/split_holdout.py", "in.txt", "--train", "t.txt", "--heldout", "t.txt"],
     "given as both the training part (--train) and the held-out part (--heldout)"),
    (["scripts/convert_ratings.py", "in.txt", "-o", "in.txt"],
     "the converted ratings file (-o) would replace the ratings file"),
]


@pytest.mark.parametrize("argv, message", COLLISIONS)
def test_paths_that_are_one_file_exit_1_in_every_command(tmp_path, argv, message):
    """The README: bad usage (unknown or conflicting flags) exits 2, bad input 1. Whether two
    paths are one file is the file system's to tell (through links, ./, hard links), and
    every command's outputs are checked so (atomic.check_distinct: exit status 1); evaluate's
    -t naming its -r file was a usage error (2), the one collision that exited otherwise."""
    for name in ("in.txt", "held.txt", "net.json", "in.nc"):
        (tmp_path / name).write_text("u1\ta,1:\n")
    bin_dir = pathlib.Path(sys.executable).parent
    exe = ([sys.executable, str(ROOT / argv[0])] if argv[0].startswith("scripts/")
           else [str(bin_dir / argv[0])])
    before = {p.name: p.read_bytes() for p in tmp_path.iterdir()}
    done = subprocess.run([*exe, *argv[1:]], cwd=tmp_path, capture_output=True, text=True)
    assert done.returncode == 1, done.stderr
    assert message in " ".join(done.stderr.split()), done.stderr
    assert "Usage:" not in done.stderr
    assert {p.name: p.read_bytes() for p in tmp_path.iterdir()} == before  # nothing written
