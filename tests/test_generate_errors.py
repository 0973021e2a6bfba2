"""``generate-netcdf`` on bad input: exit code 1, one actionable message, nothing written.

Every test runs the click command in a scratch directory that already holds the outputs of
an earlier good run (``out.nc``, ``features.idx``, ``samples.idx``), so a failing run that
wrote or replaced anything, or left a ``.name.XXXX.tmp`` file behind, shows up as a change
in the directory snapshot.
"""

from __future__ import annotations

import os
import subprocess
import sys
import threading

import pytest
from click.testing import CliRunner

import destiny.io.text
from destiny.cli.generate_netcdf import generate_netcdf

from . import without_root

# The outputs of every run unless a test overrides them; the input is given per test.
OUTPUTS = ["-o", "out.nc", "-d", "ds", "-f", "features.idx", "-s", "samples.idx"]

# The earlier good run: features g_a, g_b, g_c (0..2) and samples g1, g2 (0..1).
GOOD = "g1\tg_a:g_b\ng2\tg_b,2:g_c\n"


def invoke(args: list[str]):
    return CliRunner().invoke(generate_netcdf, args)


def snapshot(directory=".") -> dict[str, bytes | None]:
    """Every file (with its bytes), folder (None) and link (where it points) under
    ``directory``, hidden ones included."""
    seen: dict[str, bytes | None] = {}
    for root, dirs, files in os.walk(directory):
        for d in dirs:
            seen[os.path.relpath(os.path.join(root, d), directory) + "/"] = None
        for f in files:
            path = os.path.join(root, f)
            if os.path.islink(path):
                seen[os.path.relpath(path, directory)] = f"-> {os.readlink(path)}".encode()
                continue
            with open(path, "rb") as fh:
                seen[os.path.relpath(path, directory)] = fh.read()
    return seen


def write(name: str, data: str | bytes) -> str:
    with open(name, "wb") as f:
        f.write(data.encode() if isinstance(data, str) else data)
    return name


@pytest.fixture(autouse=True)
def work(tmp_path, monkeypatch):
    """A scratch directory (the current one) holding the outputs of a good earlier run."""
    monkeypatch.chdir(tmp_path)
    write("good.txt", GOOD)
    result = invoke(["-i", "good.txt", *OUTPUTS, "-c", "-q"])
    assert result.exit_code == 0, result.output
    return tmp_path


def fails(args: list[str], *, code: int = 1) -> str:
    """Run with ``args``; check the exit code and that nothing changed; return the message."""
    before = snapshot()
    result = invoke(args)
    assert result.exit_code == code, result.output
    assert snapshot() == before, "a failing run changed the directory"
    assert result.stdout == ""
    message = result.stderr
    if code == 1:
        # One message, one line: "Error: <where>: <what was found, expected, what to do>".
        assert message.startswith("Error: ") and message.count("\n") == 1, message
    return message


def fails_on(data: str | bytes, *flags: str, name: str = "in.txt") -> str:
    write(name, data)
    return fails(["-i", name, *OUTPUTS, *flags])


# --- text records --------------------------------------------------------------------------

FORMAT_HINT = "NAME<TAB>feature[,value]:feature[,value]..."

# (id, input, line, column, texts the message must contain)
RECORD_ERRORS = [
    ("no-tab", "u1\ta\nu2 b:c\n", 2, 1, ["'u2 b:c'", "no TAB", FORMAT_HINT]),
    ("empty-feature-double-colon", "u1\ta::b\n", 1, 6, [r"'u1\ta::b'", "empty feature name"]),
    ("empty-feature-name-before-comma", "u1\t,5:b\n", 1, 4,
     [r"'u1\t,5:b'", "empty feature name", "',5'"]),
    ("value-not-a-number", "u1\ta,abc\n", 1, 6, ["'abc'", "not a number", "decimal number"]),
    ("value-leading-numeric", "u1\ta:b,12x\n", 1, 8, ["'12x'", "not a number"]),
    ("two-commas", "u1\tb:a,1,2\n", 1, 9, ["'a,1,2'", "more than one ','"]),
    # The quoted feature must come from the offending line, not the one before it.
    ("two-commas-first-feature", "u0\tx:y\nu1\ta,1,2\n", 2, 7, ["'a,1,2'", "more than one ','"]),
    ("blank-line-middle", "u1\ta\n\nu2\tb\n", 2, 1, ["blank"]),
    ("blank-line-end", "u1\ta\nu2\tb\n\n", 3, 1, ["blank"]),
    ("crlf", "u1\ta\r\nu2\tb\r\n", 1, 5, [r"'u1\ta\r'", "carriage return", "dos2unix"]),
    ("trailing-colon", "u1\ta\nu2\ta:b:\n", 2, 7, [r"'u2\ta:b:'", "ends with ':'"]),
    ("second-tab", "u1\ta\tb\n", 1, 5, [r"'u1\ta\tb'", "second TAB"]),
    # (a CR outranks every other fault of its line: TAB-separated text with CRLF line ends)
    ("second-tab-crlf", "u1\ta\tb\r\n", 1, 7, [r"'u1\ta\tb\r'", "carriage return"]),
    # MovieLens ratings given as DSSTNE text (the conversion skipped): said only "no TAB"
    # or "a second TAB", and how to make DSSTNE text nowhere.
    ("ratings-csv", "userId,movieId,rating,timestamp\n1,31,2.5,1260759144\n", 1, 1,
     ["no TAB", "looks like MovieLens ratings", "scripts/convert_ratings.py"]),
    ("ratings-csv-no-header", "1,31,2.5,1260759144\n", 1, 1,
     ["no TAB", "looks like MovieLens ratings", "scripts/convert_ratings.py"]),
    ("ratings-u-data", "196\t242\t3\t881250949\n", 1, 8,
     ["second TAB", "looks like MovieLens ratings", "scripts/convert_ratings.py"]),
    ("ratings-dat", "1::1193::5::978300760\n", 1, 1,
     ["no TAB", "looks like MovieLens ratings", "scripts/convert_ratings.py"]),
    ("empty-sample-name", "u1\ta\n\ta:b\n", 2, 1, [r"'\ta:b'", "sample name is empty"]),
    # The column counts characters, not bytes ('é' is two).
    ("value-after-non-ascii", "\u00fc1\tcaf\u00e9,x\n", 1, 9, ["'x'", "not a number"]),
    ("not-utf8", b"u1\ta\nu2\ta:b\xff\n", 2, 7, [r"b'\xff'", "not valid UTF-8", "iconv"]),
    ("not-utf8-in-name", b"u1\ta\nu\xff2\ta\n", 2, 2, [r"b'\xff'", "not valid UTF-8"]),
    # A NUL is valid UTF-8, but labels go into the index files and outputs, line-oriented text
    ("nul-in-sample-name", b"u1\ta\nu\x002\ta\n", 2, 2,
     [r"the line 'u\x002\ta' holds a NUL byte (\x00) in its sample name", "tr -d"]),
    ("nul-in-feature-name", b"u1\ta:b\x00c\n", 1, 7,
     [r"the feature 'b\x00c' in the line 'u1\ta:b\x00c' holds a NUL byte (\x00)", "tr -d"]),
    ("nul-starts-a-feature", b"u1\ta:\x00c,1\n", 1, 6, [r"the feature '\x00c,1'", "NUL byte"]),
    ("nul-in-value", b"u1\ta,12\x00\n", 1, 8, [r"the feature 'a,12\x00'", "NUL byte"]),
    ("nul-utf16", "u1\ta\n".encode("utf-16-le"), 1, 2,
     ["NUL byte (\\x00) in its sample name", "UTF-16", "iconv -f utf-16 -t utf-8"]),
    # (its CRLF line ends too: the NUL, not the CR, says what to convert from)
    ("nul-utf16-crlf", "u1\ta:b\r\n".encode("utf-16-le"), 1, 2,
     ["NUL byte (\\x00) in its sample name", "UTF-16", "iconv -f utf-16 -t utf-8"]),
    ("nul-then-cr", b"u1\ta:b\x00c\r\n", 1, 7, [r"the feature 'b\x00c\r'", "NUL byte"]),
]


def _case_id(case):
    return case.id if hasattr(case, "id") else case[0]


@pytest.mark.parametrize("mode", [["-c"], ["-m"], []], ids=["create", "merge", "reuse"])
@pytest.mark.parametrize("case_id,data,line,column,texts", RECORD_ERRORS,
                         ids=[_case_id(c) for c in RECORD_ERRORS])
def test_bad_record(case_id, data, line, column, texts, mode):
    message = fails_on(data, *mode)
    assert message.startswith(f"Error: in.txt, line {line}, column {column}: "), message
    for text in texts:
        assert text in message


def test_only_ratings_lines_are_called_ratings():
    for data in ("u2 b:c\n", "1,5\n", "u1\ta\tb\n", "1\t2\t3\n", "1,2,3,4,5\n", "1\t2\t3\t4x\n",
                 "1,31,2.5\n"):  # (three fields: convert_ratings refuses the row)
        assert "MovieLens" not in fails_on(data, "-c"), data


def test_a_long_line_is_quoted_cut_to_80_characters():
    message = fails_on("u" * 100 + " a:b\n", "-c")
    assert f"the line {'u' * 77 + '...'!r} has no TAB" in message, message
    message = fails_on("u" * 76 + " a:b\n", "-c")  # 80 characters: quoted whole
    assert f"the line {'u' * 76 + ' a:b'!r} has no TAB" in message, message


@pytest.mark.parametrize("value", ["abc", "12x", "1e", "nan", "inf", "--1", "1.2.3"])
def test_indicator_values_are_still_checked(value):
    message = fails_on(f"u1\ta:b,{value}\n", "-c")  # indicator is the default type
    assert message.startswith("Error: in.txt, line 1, column 8: "), message
    assert f"the value {value!r}" in message


@pytest.mark.parametrize("value", ["abc", "12x",
                                   "\u0661e40"])  # (an Arabic-Indic 1: not beyond the range)
def test_analog_value_not_a_number(value):
    message = fails_on(f"u1\ta,{value}\n", "-c", "-t", "analog")
    assert message.startswith("Error: in.txt, line 1, column 6: "), message
    assert f"the value {value!r} in the line 'u1\\ta,{value}' is not a number" in message, message


@pytest.mark.parametrize("value", ["1e40", "-4e38", "1e400",
                                   str(2**128 - 2**103)])  # (the limit itself: float32's tie)
def test_analog_value_beyond_float32(value):
    message = fails_on(f"u1\ta,{value}\n", "-c", "-t", "analog")
    assert message.startswith(f"Error: in.txt, line 1, column 6: the value {value!r} in "), message
    assert "is beyond float32's range (about 3.4e38)" in message


CUT_SHORT = "It is the file's last line, and the file does not end with a newline"


@pytest.mark.parametrize("data,cut", [
    ("u1\ta\nu2\ta:b:", True),  # cut after a ':'
    ("u1\ta\nu2\ta:b:\n", False),  # whole: the fault is the line's own
    ("u1\ta\nu2\tb\n\n", False),  # a blank last line: it ends with its newline
    ("u1\ta:\nu2\ta:b", False),  # the fault is not in the last line
    ("u1\ta:b:", True),  # the file's only line
    ("u1\ta\nu2\ta:caf\u00e9".encode()[:-1], True),  # a two-byte character cut in half
])
def test_a_fault_in_a_last_line_without_a_newline_says_the_file_may_be_cut_short(data, cut):
    """A copy that did not finish ends in a line cut anywhere: its fault's remedy (remove the
    trailing colon, convert from latin1) would not mend the file."""
    message = fails_on(data, "-c")
    assert (CUT_SHORT in message) == cut, message
    if cut:
        assert message.endswith("if the file was cut short (a copy or a write that did not "
                                "finish), make it again.\n"), message


@pytest.mark.skipif(not hasattr(os, "mkfifo"), reason="no named pipes")
def test_a_fault_in_a_named_pipes_last_line_is_reported_without_reading_it_again(work):
    """The cut-short check opened the input again to read its end: a named pipe's open waits
    for a writer, and the one that fed it had gone, so generate-netcdf hung for ever."""
    os.mkfifo("in.fifo")

    def feed():
        with open("in.fifo", "w") as f:  # (waits for the command to open it)
            f.write("u1\ta\nu2\ta:b:")

    threading.Thread(target=feed, daemon=True).start()
    result = subprocess.run(
        [sys.executable, "-c", "from destiny.cli.generate_netcdf import main; main()",
         "-i", "in.fifo", "-o", "new.nc", "-d", "ds", "-f", "new.idx", "-s", "new_s.idx", "-c"],
        capture_output=True, text=True, timeout=60)
    assert result.returncode == 1, result.stderr
    assert "empty feature" in result.stderr and CUT_SHORT not in result.stderr, result.stderr


def test_duplicate_sample_names_both_lines():
    message = fails_on("u1\ta\nu2\tb\nu1\tc\n", "-c")
    assert message.startswith("Error: in.txt, line 3: "), message
    assert "'u1'" in message and "first on line 1" in message


def test_a_sample_repeated_in_the_next_file_of_a_directory_names_each_file_and_line():
    os.mkdir("parts")
    write("parts/a.txt", "u1\ta\nu2\tb\n")
    write("parts/b.txt", "u2\tc\nu3\td\n")
    message = fails(["-i", "parts", *OUTPUTS, "-c"])
    assert message.startswith(f"Error: {os.path.join('parts', 'b.txt')}, line 1: the sample "
                              f"'u2' appears again (first on line 2 of "
                              f"{os.path.join('parts', 'a.txt')})"), message


def test_byte_order_mark():
    """Some Windows editors start UTF-8 text with EF BB BF; read as text it would become part
    of the first sample's name ('\ufeff1'), which then matches nothing downstream."""
    message = fails_on(b"\xef\xbb\xbf1\t2:4\n", "-c")
    assert message.startswith("Error: in.txt, line 1, column 1: the file starts with a UTF-8 "
                              "byte-order mark"), message
    assert "sed -i" in message


@pytest.mark.parametrize("chunk_bytes", [1 << 20, 8], ids=["inside-a-chunk", "starting-a-chunk"])
def test_byte_order_mark_of_a_file_joined_on(monkeypatch, chunk_bytes):
    """`cat a.txt b.txt` where b.txt starts with a mark puts it at the start of a later line,
    where only the file's start was checked: it became part of that sample's name."""
    monkeypatch.setattr(destiny.io.text, "CHUNK_BYTES", chunk_bytes)
    message = fails_on(b"u1\tfa:fb\n\xef\xbb\xbfu2\tfc\n", "-c")
    assert message.startswith("Error: in.txt, line 2, column 1: the line '\\ufeffu2\\tfc' starts "
                              "with a UTF-8 byte-order mark"), message
    assert "joined on" in message and "sed -i 's/^" in message


def test_a_fault_before_a_joined_byte_order_mark_is_the_one_named():
    message = fails_on(b"u1 fa\n\xef\xbb\xbfu2\tfc\n", "-c")
    assert message.startswith("Error: in.txt, line 1, column "), message
    assert "has no TAB" in message


def test_utf16_byte_order_mark():
    """FF FE is never UTF-8: the message said so and suggested `iconv -f latin1`, which
    garbles UTF-16 text."""
    message = fails_on("1\t2:4\n".encode("utf-16"), "-c")
    assert message.startswith("Error: in.txt, line 1, column 1: the file starts with the bytes "
                              "FF FE, a UTF-16 byte-order mark"), message
    assert "iconv -f utf-16 -t utf-8" in message and "latin1" not in message


@pytest.mark.parametrize("flag,mode", [("-i", ["-c"]), ("-f", []), ("-f", ["-m"]),
                                       ("-s", ["-c"])],
                         ids=["input", "feature-index", "merged-index", "sample-index"])
def test_a_netcdf_file_where_text_is_read(flag, mode):
    """A dataset (or network) given for the text or an index, the flags swapped: the message
    said its first byte was not UTF-8 and to convert the file from latin1 with iconv (or, for
    an index, to regenerate it with -c, which would have replaced the dataset)."""
    with open("out.nc", "rb") as f:
        write("other.nc", f.read())
    write("in.txt", "u1\tg_a:g_b\n")
    args = {"-i": "in.txt", "-o": "new.nc", "-d": "ds", "-f": "features.idx",
            "-s": "samples.idx"}
    args[flag] = "other.nc"
    message = fails([a for pair in args.items() for a in pair] + mode)
    assert message.startswith("Error: other.nc: is a NetCDF file (a dataset written by "
                              "generate-netcdf, or a network written by train), not text; check "
                              "that the file flags are not swapped"), message
    assert "iconv" not in message and "-c" not in message


def test_create_does_not_replace_a_netcdf_file_given_as_the_feature_index():
    """-c does not read -f: given a dataset or a trained network there (-f and -o swapped), it
    replaced that file with the new index, silently."""
    with open("out.nc", "rb") as f:
        write("gl.nc", f.read())
    write("in.txt", "u1\tg_a:g_b\n")
    message = fails(["-i", "in.txt", "-o", "new.idx", "-d", "ds", "-f", "gl.nc",
                     "-s", "samples.idx", "-c"])
    assert message.startswith("Error: gl.nc: is a NetCDF file (a dataset written by "
                              "generate-netcdf, or a network written by train), and -c would "
                              "replace it with the new feature index"), message
    assert "-f and -o are not swapped" in message


def test_empty_file():
    message = fails_on("", "-c")
    assert message.startswith("Error: in.txt: ") and "no records" in message


# --- line numbers in big files and directories ---------------------------------------------

def _lines(n: int, start: int = 0) -> str:
    return "".join(f"u{i}\tf{i % 7}:f{i % 11},{i}\n" for i in range(start, start + n))


@pytest.mark.parametrize("mode", [["-c"], []], ids=["create", "reuse"])
@pytest.mark.parametrize("chunk_bytes", [None, 1000], ids=["one-chunk", "many-chunks"])
def test_error_deep_in_file(chunk_bytes, mode, monkeypatch):
    if chunk_bytes:  # file read in many chunks: line numbers must carry across them
        monkeypatch.setattr(destiny.io.text, "CHUNK_BYTES", chunk_bytes)
    # Reusing an index, the chunks are scanned on threads at once; a fault in a later
    # chunk (line 5101) must not be reported before the first one.
    monkeypatch.setattr(destiny.io.text, "get_num_threads", lambda: 3)
    message = fails_on(_lines(4999) + "u4999\tf1::f2\n" + _lines(100, 5000) + "u5100\tf1,x\n"
                       + _lines(100, 5101), *mode)
    assert message.startswith("Error: in.txt, line 5000, column 10: "), message
    assert r"'u4999\tf1::f2'" in message


@pytest.mark.parametrize("chunk_bytes", [None, 1000], ids=["one-chunk", "many-chunks"])
def test_duplicate_deep_in_file(chunk_bytes, monkeypatch):
    if chunk_bytes:
        monkeypatch.setattr(destiny.io.text, "CHUNK_BYTES", chunk_bytes)
    message = fails_on(_lines(6000) + "u17\tf1\n", "-c")
    assert message.startswith("Error: in.txt, line 6001: "), message
    assert "'u17'" in message and "(first on line 18)" in message  # (of this file: unnamed)


def test_error_in_second_file_of_directory():
    os.mkdir("indir")
    write("indir/a.txt", _lines(10))
    write("indir/b.txt", _lines(2, 10) + "u12\tb:a,1,2\n")
    message = fails(["-i", "indir", *OUTPUTS, "-c"])
    path = os.path.join("indir", "b.txt")
    assert message.startswith(f"Error: {path}, line 3, column 10: "), message
    assert "'a,1,2'" in message
    assert "a.txt" not in message


def test_duplicate_sample_across_files_names_both_files():
    os.mkdir("indir")
    write("indir/a.txt", _lines(10))
    write("indir/b.txt", _lines(2, 10) + "u4\tf1\n")
    message = fails(["-i", "indir", *OUTPUTS, "-c"])
    assert message.startswith(f"Error: {os.path.join('indir', 'b.txt')}, line 3: "), message
    assert f"first on line 5 of {os.path.join('indir', 'a.txt')}" in message


def test_a_dangling_link_in_a_directory_is_named_not_skipped():
    """A link to a part that is gone was skipped silently: its records were missing."""
    os.mkdir("indir")
    write("indir/a.txt", _lines(10))
    os.symlink("/nowhere/part-00001", "indir/b.txt")
    message = fails(["-i", "indir", *OUTPUTS, "-c"])
    assert message.startswith(f"Error: {os.path.join('indir', 'b.txt')}: is a symbolic link to "
                              "a file that does not exist (/nowhere/part-00001)"), message


# --- inputs that are missing or unreadable -------------------------------------------------

def test_missing_input_file():
    message = fails(["-i", "nope.txt", *OUTPUTS, "-c"])
    assert message.startswith("Error: nope.txt: ") and "does not exist" in message
    assert "-i" in message


def test_unreadable_input_file():
    """An input whose mode refuses its reader. Under root (as CI runs) the command runs
    without root's file access overrides (tests/without_root.py): the mode refuses it too."""
    write("in.txt", "u1\ta\n")
    before = snapshot()  # (taken while the input can be read)
    os.chmod("in.txt", 0)
    try:
        result = without_root.run("generate-netcdf", "-i", "in.txt", *OUTPUTS, "-c")
    finally:
        os.chmod("in.txt", 0o644)
    assert result.returncode == 1, result.stderr
    assert snapshot() == before, "a failing run changed the directory"
    assert result.stdout == ""
    assert result.stderr == ("Error: in.txt: the input file cannot be read (permission denied); "
                             "check its permissions.\n"), result.stderr


def test_unreadable_input_file_simulated(monkeypatch):
    """The same check in-process (CliRunner): the input reports as not readable."""
    real_access = os.access

    def access(path, mode, **kwargs):
        if os.fspath(path) == "in.txt" and mode & os.R_OK:
            return False
        return real_access(path, mode, **kwargs)

    monkeypatch.setattr(os, "access", access)
    write("in.txt", "u1\ta\n")
    message = fails(["-i", "in.txt", *OUTPUTS, "-c"])
    assert message.startswith("Error: in.txt: ") and "permission" in message


def test_input_directory_without_files():
    os.makedirs("indir/sub")  # a folder inside is not a file
    write("indir/_SUCCESS", "")
    message = fails(["-i", "indir", *OUTPUTS, "-c"])
    assert message.startswith("Error: indir: ") and "no files" in message
    assert "names starting with '.' or '_' are skipped" in message


def test_the_files_hadoop_and_spark_write_beside_the_data_are_skipped():
    """A Spark job's output directory as -i: _SUCCESS and the .crc checksums are not read
    (they used to fail the run on their first line), the part files are."""
    from destiny.io.dataset import read_dataset

    os.mkdir("indir")
    write("indir/part-00000", "u1\ta:b\n")
    write("indir/part-00001", "u2\tb:c\n")
    write("indir/.part-00000.crc", b"\x00\x01crc")
    write("indir/_SUCCESS", "")
    result = invoke(["-i", "indir", *OUTPUTS, "-c"])
    assert result.exit_code == 0, result.output
    assert read_dataset("out.nc").indptr.tolist() == [0, 2, 4]


# --- index files ---------------------------------------------------------------------------

# (id, index file contents, line, texts the message must contain)
INDEX_ERRORS = [
    ("no-tab", "a\t0\nb 1\n", 2, ["'b 1'", "label<TAB>index", "-c"]),
    ("not-an-integer", "a\t0\nb\tx\n", 2, [r"'b\tx'", "label<TAB>index"]),
    ("negative", "a\t0\nb\t-1\n", 2, [r"'b\t-1'"]),
    # Digits of other scripts, which int() reads: indices are ASCII (the second file is read
    # line by line, its first line ending with a TAB)
    ("arabic-indic-digit", "a\t0\nb\t\u0661\n", 2, ["'b\\t\u0661'", "label<TAB>index"]),
    ("arabic-indic-digit-line-by-line", "a\t0\t\nb\t\u0661\n", 2, ["'b\\t\u0661'"]),
    ("empty-label", "a\t0\n\t1\n", 2, [r"'\t1'"]),
    ("duplicate-label", "a\t0\nb\t1\na\t2\n", 3, ["'a'", "first on line 1"]),
    ("duplicate-index", "a\t0\nb\t1\nc\t1\n", 3, ["index 1", "'b' (line 2)", "'c'"]),
    ("crlf", "a\t0\r\nb\t1\r\n", 1, ["carriage return"]),
    ("not-utf8", b"a\t0\n\xff\t1\n", 2, [r"b'\xff'", "not UTF-8"]),
    # 2^32 wrapped around to 0 and merged 'b' with 'a' silently
    ("beyond-32-bit", "a\t0\nb\t4294967296\nc\t1\n", 2, ["4294967296 of 'b' is too large"]),
    ("beyond-64-bit", "a\t0\nb\t99999999999999999999999\n", 2, ["too large"]),
    ("beyond-int32", "b\t2147483648\n", 1, ["at most 2,147,483,647"]),
    # 4,300 digits or more: Python's int() raised ValueError (a traceback), on either path
    ("thousands-of-digits", "a\t0\nb\t" + "9" * 5000 + "\n", 2,
     ["index 999999... (5,000 digits) of 'b' is too large"]),
    ("thousands-of-digits-line-by-line", "a\t0\t\nb\t" + "9" * 5000 + "\n", 2,
     ["(5,000 digits) of 'b' is too large"]),
]


@pytest.mark.parametrize("mode", [[], ["-m"]], ids=["reuse", "merge"])
@pytest.mark.parametrize("case_id,data,line,texts", INDEX_ERRORS,
                         ids=[c[0] for c in INDEX_ERRORS])
def test_bad_feature_index(case_id, data, line, texts, mode):
    write("bad.idx", data)
    write("in.txt", "u1\ta:b\n")
    args = ["-i", "in.txt", *OUTPUTS, *mode]
    args[args.index("features.idx")] = "bad.idx"
    message = fails(args)
    assert message.startswith(f"Error: bad.idx, line {line}: "), message
    for text in texts:
        assert text in message


@pytest.mark.parametrize("case_id,data,line,texts", INDEX_ERRORS[:3],
                         ids=[c[0] for c in INDEX_ERRORS[:3]])
def test_bad_sample_index(case_id, data, line, texts):
    write("bad.idx", data)
    write("in.txt", "u1\tg_a\n")
    args = ["-i", "in.txt", *OUTPUTS, "-c"]
    args[args.index("samples.idx")] = "bad.idx"
    message = fails(args)
    assert message.startswith(f"Error: bad.idx, line {line}: "), message
    for text in texts:
        assert text in message


@pytest.mark.parametrize("flag,mode", [("features.idx", []), ("samples.idx", ["-c"])],
                         ids=["feature-index", "sample-index"])
def test_index_with_a_nul(flag, mode):
    """A label holding a NUL: generate-netcdf refuses to write one (test_bad_record), so an
    index that holds one was not written by it."""
    write("bad.idx", "a\t0\n\u00e9b\x00c\t1\n".encode())  # (the column counts characters)
    write("in.txt", "u1\ta:b\n")
    args = ["-i", "in.txt", *OUTPUTS, *mode]
    args[args.index(flag)] = "bad.idx"
    message = fails(args)
    assert message.startswith("Error: bad.idx, line 2, column 3: found '\u00e9b\\x00c\\t1', "
                              r"which "
                              r"holds a NUL byte (\x00)"), message
    assert "Regenerate it with -c" in message


@pytest.mark.parametrize("flag,mode,what", [("features.idx", ["-m"], "feature"),
                                             ("samples.idx", ["-c"], "sample")],
                         ids=["feature-index", "sample-index"])
def test_a_new_entry_colliding_with_a_loaded_one(flag, mode, what):
    """An index numbered with a gap grows only while no new number is taken: DSSTNE numbers a
    new entry by the size of the index (spec 1.3), here 2, which 'c' holds already; it would
    merge 'new' with 'c' silently (quirk 10.7)."""
    write("gap.idx", "a\t0\nc\t2\n")
    write("in.txt", "a\ta:c\nnew\tnew\n")
    args = ["-i", "in.txt", *OUTPUTS, *mode]
    args[args.index(flag)] = "gap.idx"
    message = fails(args)
    assert message.startswith(f"Error: gap.idx: its indices are not 0..1, so the new {what} "
                              "'new' would get index 2, which already belongs to 'c' (DSSTNE "
                              "numbers new entries by the size of the index). Renumber the "
                              "index file to 0..n-1"), message
    assert ("rebuild it with -c" in message) == (what == "feature"), message


def test_bad_feature_index_is_ignored_with_create():
    write("bad.idx", "not an index\n")
    write("in.txt", "u1\ta:b\n")
    result = invoke(["-i", "in.txt", "-o", "new.nc", "-d", "ds", "-f", "bad.idx",
                     "-s", "samples.idx", "-c"])
    assert result.exit_code == 0, result.output
    with open("bad.idx") as f:
        assert f.read() == "a\t0\nb\t1\n"


def test_an_index_beyond_the_width_of_the_entries_is_refused():
    """The width is the feature index's entries rounded up to 128 (spec 1.5): an index of two
    entries numbered 0 and 128 would put 'b' one past the dataset's last column."""
    write("features.idx", "a\t0\nb\t128\n")
    message = fails_on("u1\ta:b\n")
    assert message.startswith("Error: features.idx: holds index 128, but it has only 2 entries, "
                              "so the dataset width is 128"), message


@pytest.mark.parametrize("mode", [[], ["-m"]], ids=["reuse", "merge"])
def test_missing_feature_index(mode):
    write("in.txt", "u1\ta:b\n")
    args = ["-i", "in.txt", *OUTPUTS, *mode]
    args[args.index("features.idx")] = "missing.idx"
    message = fails(args)
    assert message.startswith("Error: missing.idx: ") and "does not exist" in message
    assert "-c" in message


# --- outputs -------------------------------------------------------------------------------

@pytest.mark.parametrize("flag", ["-o", "-f", "-s"])
def test_output_directory_missing(flag):
    write("in.txt", "u1\ta:b\n")
    args = ["-i", "in.txt", *OUTPUTS, "-c"]
    target = os.path.join("nodir", "file")
    args[args.index(flag) + 1] = target
    message = fails(args)
    assert message.startswith(f"Error: {target}: "), message
    assert "nodir" in message and "does not exist" in message and "mkdir" in message


def test_output_is_a_directory():
    os.mkdir("out_dir.nc")
    write("in.txt", "u1\ta:b\n")
    args = ["-i", "in.txt", *OUTPUTS, "-c"]
    args[args.index("out.nc")] = "out_dir.nc"
    message = fails(args)
    assert message.startswith("Error: out_dir.nc: ") and "is a directory" in message


@pytest.mark.parametrize("flags,message", [
    (["-o", "in.txt"], "in.txt: the output NetCDF file (-o) would replace the input text (-i)"),
    (["-f", "./in.txt"], "./in.txt: the feature index (-f) would replace the input text (-i, "
                         "as in.txt)"),
    (["-s", "features.idx"], "features.idx: given as both the feature index (-f) and the "
                             "sample index (-s)"),
    (["-o", "link.idx"], "features.idx: given as both the output NetCDF file (-o, as link.idx) "
                         "and the feature index (-f)"),
    (["-o", "hard.txt"], "hard.txt: the output NetCDF file (-o) would replace the input text "
                         "(-i, as in.txt)"),
])
def test_an_output_on_an_input_or_another_output(flags, message):
    """Each would have replaced a file this run reads or writes (the input turned into a
    NetCDF file, one index lost), and exited 0; so would a hard link of the input."""
    write("in.txt", "u1\ta:b\n")
    os.symlink("features.idx", "link.idx")
    os.link("in.txt", "hard.txt")
    args = ["-i", "in.txt", *OUTPUTS, "-c"]
    for flag, value in zip(flags[::2], flags[1::2], strict=True):
        args[args.index(flag) + 1] = value
    assert message in fails(args)


def test_an_output_inside_an_input_directory():
    """Every file of an input directory is read: an output written there would be read as
    text by the next run."""
    os.mkdir("texts")
    write(os.path.join("texts", "a.txt"), "u1\ta:b\n")
    args = ["-i", "texts", *OUTPUTS, "-c"]
    args[args.index("samples.idx")] = os.path.join("texts", "samples.idx")
    message = fails(args)
    assert message.startswith("Error: texts/samples.idx: the sample index (-s) would be "
                              "written into texts, the input text (-i)"), message


def test_an_output_below_an_input_directory_is_written():
    """Its subdirectories are not read (spec 1.1): an output there is no input of a later run."""
    os.makedirs(os.path.join("texts", "nc"))
    write(os.path.join("texts", "a.txt"), "u1\ta:b\n")
    args = ["-i", "texts", *OUTPUTS, "-c"]
    args[args.index("samples.idx")] = os.path.join("texts", "nc", "samples.idx")
    result = CliRunner().invoke(generate_netcdf, args)
    assert result.exit_code == 0, result.output
    assert open(os.path.join("texts", "nc", "samples.idx")).read() == "u1\t0\n"


def test_empty_dataset_name():
    write("in.txt", "u1\ta:b\n")
    args = ["-i", "in.txt", *OUTPUTS, "-c"]
    args[args.index("ds")] = ""
    message = fails(args)
    assert "-d" in message and "empty" in message


# --- features missing from a reused index --------------------------------------------------

def test_strict_unknown_feature():
    message = fails_on("u1\tg_a\nu2\tg_b:zz,5:g_c\n", "--strict")
    assert message.startswith("Error: in.txt, line 2, column 8: "), message
    assert "the feature 'zz' is not" in message and "--strict" in message and "-m" in message


def test_all_features_unknown():
    message = fails_on("u1\tx:y\nu2\tz,3\n")
    assert message.startswith("Error: in.txt: "), message
    assert "empty" in message and "-f" in message


@pytest.mark.parametrize("mode", ["-c", "-m"])
def test_no_features_at_all(mode):
    """With -c or -m every feature read goes into the index: an empty dataset means the input
    lists none, and the message says what a line holds, not to check -f."""
    message = fails_on("u1\t\nu2\t\n", mode)
    assert message.startswith("Error: in.txt: no sample lists a feature"), message
    assert "NAME<TAB>feature" in message and "-f" not in message


@pytest.mark.parametrize("quiet", [[], ["-q"]], ids=["", "quiet"])
def test_unknown_features_dropped(quiet):
    """Not an error: the unknown feature is dropped and counted on stderr, -q or not (the
    data lost is no progress or summary); outputs are written."""
    write("in.txt", "u1\tg_a:zz:yy\nu2\tg_b\n")
    before = snapshot()
    result = invoke(["-i", "in.txt", *OUTPUTS, *quiet])
    assert result.exit_code == 0, result.output
    assert result.stdout == ""
    assert "dropped 2 features that are not in features.idx, from 1 line " in result.stderr
    if quiet:  # (the dropped line alone)
        assert result.stderr.startswith("generate-netcdf: dropped") and "wrote" not in \
            result.stderr, result.stderr
    after = snapshot()
    assert after["features.idx"] == before["features.idx"]  # reused, not rewritten
    assert after["out.nc"] != before["out.nc"]
    assert after["samples.idx"] == before["samples.idx"] + b"u1\t2\nu2\t3\n"
    assert not [name for name in after if name.endswith(".tmp")]


def test_repeated_features_are_kept_and_counted():
    """A feature listed twice in a sample is kept twice (DSSTNE quirk 10.5), and now counted
    on stderr: duplicate ratings upstream are the usual cause."""
    write("in.txt", "u1\ta:b:a:a\nu2\tc:d\nu3\tc:c\n")
    result = invoke(["-i", "in.txt", *OUTPUTS, "-c"])
    assert result.exit_code == 0, result.output
    assert "2 samples list a feature more than once (3 repeats)" in result.stderr
    clean = invoke(["-i", "good.txt", *OUTPUTS, "-c"])
    assert clean.exit_code == 0 and "more than once" not in clean.stderr


def test_labels_with_spaces_at_their_ends_are_kept_and_noted():
    """'b ' and 'b' are two features, as in DSSTNE (a refusal would break its files), but
    silently so, where a stray space in the raw data is the usual cause: now a note names
    them, new labels only (an index's loaded labels were noted when they were added)."""
    write("in.txt", "u1\ta:b :c\n u2\tb: d: e:f \nu3\tb\n")
    result = invoke(["-i", "in.txt", *OUTPUTS, "-c"])
    assert result.exit_code == 0, result.output
    assert ("4 new feature labels have spaces at the start or end ('b ', ' d', ' e', ...); "
            "labels are kept as written, as in DSSTNE, so 'a ' and 'a' are two features. "
            "Remove the spaces upstream") in result.stderr, result.stderr
    assert "1 new sample label has spaces at the start or end (' u2')" in result.stderr
    again = invoke(["-i", "in.txt", *OUTPUTS, "-m"])  # (nothing new)
    assert again.exit_code == 0 and "spaces at" not in again.stderr, again.stderr
    clean = invoke(["-i", "good.txt", *OUTPUTS, "-c"])
    assert clean.exit_code == 0 and "spaces at" not in clean.stderr


def test_the_library_refuses_create_and_merge_together():
    from destiny.errors import DestinyError
    from destiny.generate import generate_netcdf as convert

    write("in.txt", "u1\ta\n")
    before = snapshot()
    with pytest.raises(DestinyError, match=r"^-c \(create a new feature index\) and -m"):
        convert(input_path="in.txt", output="out.nc", dataset_name="ds",
                feature_index="features.idx", sample_index="samples.idx", create=True, merge=True)
    assert snapshot() == before


# --- usage errors (exit code 2) ------------------------------------------------------------

@pytest.mark.parametrize("extra,text", [
    (["-c", "-m"], "contradict"),
    (["-t", "foo"], "'foo'"),
], ids=["create-and-merge", "bad-type"])
def test_usage_error(extra, text):
    write("in.txt", "u1\ta:b\n")
    message = fails(["-i", "in.txt", *OUTPUTS, *extra], code=2)
    assert text in message


@pytest.mark.parametrize("flag", ["-i", "-o", "-d", "-f", "-s"])
def test_missing_required_flag(flag):
    write("in.txt", "u1\ta:b\n")
    args = ["-i", "in.txt", *OUTPUTS, "-c"]
    at = args.index(flag)
    del args[at:at + 2]
    message = fails(args, code=2)
    assert "Missing option" in message and flag in message
