"""scripts/convert_ratings.py and destiny.io.ratings: MovieLens ratings to DSSTNE text."""

from __future__ import annotations

import io
import os
import random
import re
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from destiny import synthetic
from destiny.errors import NUL_REMEDY, DataFormatError
from destiny.io import ratings as ratings_mod
from destiny.io.ratings import convert_ratings
from tests import batch

ROOT = Path(__file__).resolve().parents[1]
SCRIPT = ROOT / "scripts" / "convert_ratings.py"
AWK = ROOT / "tests" / "data" / "convert_ratings.awk"
HEADER = "userId,movieId,rating,timestamp\n"


@pytest.fixture(scope="module")
def csv_path(tmp_path_factory) -> Path:
    r = synthetic.generate_ratings(users=300, items=200, mean_per_user=12, seed=3)
    path = tmp_path_factory.mktemp("ml") / "ratings.csv"
    synthetic.write_ratings_csv(path, r)
    return path


@pytest.fixture(scope="module")
def rows(csv_path) -> list[list[str]]:
    """The CSV's data rows as [user, item, rating, timestamp] strings."""
    return [line.split(",") for line in csv_path.read_text().splitlines()[1:]]


def run_script(*args) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, str(SCRIPT), *map(str, args)],
                          capture_output=True, text=True, timeout=60)


def convert(path, **options) -> str:
    out = io.StringIO()
    convert_ratings(path, out, **options)
    return out.getvalue()


def expected_text(rows, value="timestamp", min_rating=None) -> str:
    """The converter's specification, written the slow and obvious way."""
    groups: dict[str, list[str]] = {}
    for user, item, rating, stamp in rows:
        if min_rating is not None and float(rating) < min_rating:
            continue
        token = {"timestamp": f"{item},{stamp}", "rating": f"{item},{rating}", "none": item}
        groups.setdefault(user, []).append(token[value])
    return "".join(f"{user}\t{':'.join(tokens)}\n" for user, tokens in groups.items())


def write_rows(path, rows, sep, header=None) -> Path:
    lines = ([header] if header else []) + [sep.join(row) for row in rows]
    path.write_text("".join(line + "\n" for line in lines))
    return path


# --- the same output as DSSTNE's awk script ---------------------------------------------------

@pytest.mark.skipif(shutil.which("awk") is None, reason="awk is not installed")
def test_script_matches_awk_byte_for_byte(csv_path, tmp_path):
    awk = subprocess.run(["awk", "-f", str(AWK), str(csv_path)], capture_output=True,
                         check=True, timeout=60)
    out = tmp_path / "ratings.dsstne"
    result = run_script(csv_path, "-o", out)
    assert result.returncode == 0, result.stderr
    assert out.read_bytes() == awk.stdout
    assert "300 users" in result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["ratings.dsstne"]  # no temporary left


@pytest.mark.parametrize("value", ["timestamp", "rating", "none"])
def test_matches_synthetic_dsstne_writer(csv_path, rows, tmp_path, value):
    # The benchmarks write DSSTNE text directly; it must be what the converter would give.
    r = synthetic.generate_ratings(users=300, items=200, mean_per_user=12, seed=3)
    synthetic.write_ratings_dsstne(tmp_path / "direct.txt", r, value=value)
    assert convert(csv_path, value=value) == (tmp_path / "direct.txt").read_text()
    if value == "timestamp":
        assert convert(csv_path) == expected_text(rows)


def test_report(csv_path, rows):
    report = convert_ratings(csv_path, io.StringIO())
    assert report == ratings_mod.ConvertReport(users=300, ratings=len(rows),
                                               skipped_below_min=0, fmt="csv")


def test_a_reader_that_leaves_early_stops_it_as_sigpipe_does(tmp_path):
    """`convert_ratings.py ratings.csv | head`: once head leaves, the script stops silently
    with SIGPIPE's status (141), as cat would, not with a traceback or exit code 1."""
    import signal

    r = synthetic.generate_ratings(users=3000, items=500, mean_per_user=12, seed=5)
    path = tmp_path / "ratings.csv"  # ~400 KB of text: more than a pipe holds
    synthetic.write_ratings_csv(path, r)
    proc = subprocess.Popen([sys.executable, str(SCRIPT), str(path)], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE)
    assert b"\t" in proc.stdout.readline()
    proc.stdout.close()
    stderr = proc.stderr.read().decode()
    assert proc.wait(timeout=60) == -signal.SIGPIPE, stderr
    assert stderr == ""


def test_a_min_rating_that_is_not_a_number_is_a_usage_error(csv_path, tmp_path):
    done = run_script(csv_path, "--min-rating", "nan", "-o", tmp_path / "out.txt")
    assert done.returncode == 2 and "'nan' is not a finite number" in done.stderr
    assert os.listdir(tmp_path) == []


def test_help_shows_no_range_for_min_rating():
    """--min-rating has no bounds: its help ended in '[x<=None]'."""
    done = run_script("--help")
    assert done.returncode == 0, done.stderr
    assert "None" not in done.stdout and "Keep only ratings at least this high" in done.stdout


def test_stdout(csv_path):
    result = run_script(csv_path)
    assert result.returncode == 0, result.stderr
    assert result.stdout == convert(csv_path)
    assert "written to stdout" in result.stderr
    assert run_script(csv_path, "-o", "-").stdout == result.stdout


def test_summary_counts_one_user_and_one_rating_in_the_singular(tmp_path):
    """The summary said "1 users, 1 ratings"."""
    (tmp_path / "r.csv").write_text("userId,movieId,rating,timestamp\n1,10,4.0,5\n")
    result = run_script(tmp_path / "r.csv", "-o", tmp_path / "out.txt")
    assert result.returncode == 0, result.stderr
    assert result.stderr.startswith("convert_ratings: 1 user, 1 rating (csv input) written to ")


# --- inputs ------------------------------------------------------------------------------

def test_unsorted_input_groups_users(rows, tmp_path):
    shuffled = rows[:]
    random.Random(7).shuffle(shuffled)
    path = write_rows(tmp_path / "shuffled.csv", shuffled, ",", HEADER.strip())
    text = convert(path)
    assert text == expected_text(shuffled)  # first-appearance order, items in input order
    by_user = {line.split("\t")[0]: set(line.split("\t")[1].split(":"))
               for line in text.splitlines()}
    assert len(by_user) == len(text.splitlines()) == 300
    assert by_user == {u: {f"{i},{t}" for uu, i, _, t in rows if uu == u} for u in by_user}


@pytest.mark.parametrize("fmt, sep", [("udata", "\t"), ("dat", "::")])
def test_udata_and_dat_match_csv(csv_path, rows, tmp_path, fmt, sep):
    path = write_rows(tmp_path / f"ratings.{fmt}", rows, sep)
    expected = convert(csv_path)
    assert convert(path) == expected
    assert convert(path, fmt=fmt) == expected
    assert convert_ratings(path, io.StringIO()).fmt == fmt
    result = run_script(path, "--format", fmt)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected


def test_headers(rows, tmp_path):
    plain = write_rows(tmp_path / "plain.csv", rows[:50], ",")
    other = write_rows(tmp_path / "other.csv", rows[:50], ",", "user,item,rating,time")
    assert convert(plain) == convert(other) == convert(other, fmt="csv") == expected_text(rows[:50])


def test_a_user_may_hold_colons_and_commas_and_a_byte_order_mark_is_no_part_of_one(tmp_path):
    """A user is the line's name, which ends at the TAB only; a byte-order mark before the
    first row is the file's, not the first user's."""
    path = tmp_path / "u.data"
    path.write_bytes("\ufeff1\t10\t4\t100\nu:2,b\t11\t3\t101\n".encode())
    assert convert(path) == "1\t10,100\nu:2,b\t11,101\n"


def test_chunk_boundaries(rows, tmp_path, monkeypatch):
    """Chunks far smaller than the file: runs of a user and line numbers span chunks."""
    path = write_rows(tmp_path / "r.csv", rows[:500], ",", HEADER.strip())
    monkeypatch.setattr(ratings_mod, "CHUNK_CHARS", 37)
    assert convert(path) == expected_text(rows[:500])
    bad = rows[:500]
    bad[300] = [bad[300][0], "", "4.0", "100"]
    write_rows(path, bad, ",", HEADER.strip())
    with pytest.raises(DataFormatError, match="line 302: the item field is empty"):
        convert(path)


def test_a_nul_in_a_later_chunk_is_refused(rows, tmp_path, monkeypatch):
    """Chunks before the NUL's are clean (the fast path, no row checked one by one); the
    NUL's chunk is not, and the row is named."""
    bad = rows[:500]
    bad[300] = [bad[300][0], bad[300][1] + "\0", *bad[300][2:]]
    path = write_rows(tmp_path / "r.csv", bad, ",", HEADER.strip())
    monkeypatch.setattr(ratings_mod, "CHUNK_CHARS", 37)
    with pytest.raises(DataFormatError) as info:
        convert(path)
    assert (info.value.line, info.value.column) == (302, len(bad[300][0]) + len(bad[300][1]) + 1)
    assert "in its item field" in str(info.value)


def test_last_line_without_newline(tmp_path):
    path = tmp_path / "r.csv"
    path.write_text(HEADER + "1,10,4.0,100\n1,11,3.5,101\n2,10,5.0,102")
    assert convert(path) == "1\t10,100:11,101\n2\t10,102\n"


# --- options -----------------------------------------------------------------------------

@pytest.mark.parametrize("value", ["rating", "none"])
def test_value(csv_path, rows, value):
    result = run_script(csv_path, "--value", value)
    assert result.returncode == 0, result.stderr
    assert result.stdout == expected_text(rows, value=value)
    if value == "rating":  # copied verbatim: '4.0', not '4' as %g would write it
        assert ",4.0:" in result.stdout


def test_min_rating(csv_path, rows, tmp_path):
    out = tmp_path / "liked.txt"
    result = run_script(csv_path, "-o", out, "--min-rating", "4.5", "--value", "rating")
    assert result.returncode == 0, result.stderr
    assert out.read_text() == expected_text(rows, value="rating", min_rating=4.5)
    below = sum(float(r[2]) < 4.5 for r in rows)
    assert f"{below} below --min-rating" in result.stderr
    report = convert_ratings(csv_path, io.StringIO(), min_rating=4.5)
    assert (report.ratings, report.skipped_below_min) == (len(rows) - below, below)
    kept_users = {r[0] for r in rows if float(r[2]) >= 4.5}
    assert report.users == len(kept_users) < 300  # users with nothing left are omitted
    # --min-rating 0 is given too: the report says that nothing was left out
    zero = run_script(csv_path, "-o", out, "--min-rating", "0")
    assert zero.returncode == 0, zero.stderr
    assert f" {len(rows):,} ratings (csv input, 0 below --min-rating left out)" in zero.stderr


# --- errors --------------------------------------------------------------------------------

ERRORS = [
    # (name, file bytes, extra arguments, text expected in the message)
    ("field count", HEADER + "1,10,4.0,100\n1,11,3.5\n", [], "line 3: found 3 fields"),
    ("field count of a long line", HEADER + "1," + "9" * 80 + "\n", [],
     "line 2: found 2 fields in '1," + "9" * 58 + "...'; expected 4 fields"),
    ("blank line", HEADER + "1,10,4.0,100\n\n1,11,3.5,101\n", [], "line 3: found a blank line"),
    ("rating", HEADER + "1,10,4.0,100\n1,11,good,101\n", ["--min-rating", "3"],
     "line 3: the rating 'good' is not a number"),
    ("empty user", HEADER + ",10,4.0,100\n", [], "line 2: the user field is empty"),
    ("empty item", "1\t\t4\t100\n", [], "line 1: the item field is empty"),
    ("empty value", "1::10::4::\n", [], "line 1: the timestamp field is empty"),
    # (the empty field at the start or the end of a chunk, where no line end is beside it)
    ("empty user first", "\t10\t4\t100\n", [], "line 1: the user field is empty"),
    ("empty value last", "1::10::4::100\n2::10::4::", [], "line 2: the timestamp field is empty"),
    ("crlf", HEADER.replace("\n", "\r\n") + "1,10,4.0,100\r\n", [], "line 1: "),
    ("crlf later", HEADER + "1,10,4.0,100\n1,11,4.0,101\r\n", [], "line 3: "),
    ("cr only", "1,10,4.0,100\r1,11,4.0,101\r", [], "line 1: "),
    ("cr only later", HEADER + "1,10,4.0,100\n1,11,4.0,101\r1,12,3.0,102\r", [],
     "line 3: the line ends with a carriage return"),
    ("separator", "1\t10:3\t4\t100\n", [], "line 1: the item field '10:3' contains ':'"),
    ("colons", "1:::10::4::100\n", [], "line 1: the item field ':10' contains ':'"),
    ("comma in u.data", "1\t10,5\t4\t100\n", [], "line 1: the item field '10,5' contains ','"),
    ("tab in csv", HEADER + "1,10\t5,4.0,100\n", [],
     "line 2: the item field '10\\t5' contains '\\t'"),
    ("utf-8", HEADER.encode() + b"1,10,4.0,100\n1,\xe910,4.0,100\n", [],
     "line 3, column 3: byte 0xe9 is not valid UTF-8"),
    ("utf-8 after a byte-order mark", b"\xef\xbb\xbf1,\xe910,4.0,100\n", [],
     "line 1, column 3: byte 0xe9 is not valid UTF-8"),
    ("empty file", "", [], "line 1: the file is empty"),
    ("header only", HEADER, [], "line 2: the file ends after its header and holds no ratings"),
    ("none kept", HEADER + "1,10,2.0,100\n", ["--min-rating", "4"], "none of the 1 ratings"),
    ("timestamp", HEADER + "1,10,4.0,100\n1,11,3.5,yesterday\n", [],
     "line 3: the timestamp 'yesterday' is not a number within float32's range"),
    ("value rating", "1\t10\t4\t100\n1\t11\tNA\t101\n", ["--value", "rating"],
     "line 2: the rating 'NA' is not a number within float32's range"),
    ("value inf", "1::10::inf::100\n", ["--value", "rating"],
     "line 1: the rating 'inf' is not a number within float32's range"),
    ("value beyond float32", "1::10::4::-1e39\n", [],
     "line 1: the timestamp '-1e39' is not a number within float32's range"),
    ("value float32 rounds to infinity", "1::10::4::3.4028236e38\n", [],
     "line 1: the timestamp '3.4028236e38' is not a number within float32's range"),
    # Python's float() reads these; generate-netcdf's scanner refuses them (naming the text's
    # line, not this file's), so they were written.
    ("value with '_'", "1::10::4::1_000\n", [],
     "line 1: the timestamp '1_000' is not a number within float32's range (a decimal such"),
    ("value with a space", HEADER + "1,10, 4.0,100\n", ["--value", "rating"],
     "line 2: the rating ' 4.0' is not a number within float32's range"),
    ("value in other digits", "1\t10\t4\t\u0661\u0662\n", [],
     "line 1: the timestamp '\u0661\u0662' is not a number within float32's range"),
    ("rating with '_'", HEADER + "1,10,4_0,100\n", ["--min-rating", "4"],
     "line 2: the rating '4_0' is not a number (a decimal such as 4, 3.5 or 1e-3"),
    ("rating infinite", HEADER + "1,10,inf,100\n", ["--min-rating", "4"],
     "line 2: the rating 'inf' is not a number"),
    # Chunks of digits, points and separators only: their values are not read one by one.
    ("value two points", "1,10,4.0,1.2.3\n", [],
     "line 1: the timestamp '1.2.3' is not a number within float32's range"),
    ("value a point", "1\t10\t4\t.\n", [],
     "line 1: the timestamp '.' is not a number within float32's range"),
    ("value of 39 digits", "1::10::4::" + "9" * 39 + "\n", [],
     f"line 1: the timestamp '{'9' * 39}' is not a number within float32's range"),
    ("format", "1 10 4 100\n", [], "line 1: cannot tell the ratings format"),
    # A NUL is valid UTF-8; copied into the DSSTNE text, generate-netcdf refused it there.
    ("nul in item", HEADER + "1,10,4.0,100\n1,1\x001,4.0,101\n", [],
     "line 3, column 4: the line '1,1\\x001,4.0,101' holds a NUL byte (\\x00) in its item field. "
     "No MovieLens field holds one"),
    ("nul in user", "1\x00::10::4::100\n", [], "line 1, column 2: the line '1\\x00::10::4::100' "
     "holds a NUL byte (\\x00) in its user field"),
    ("nul in value", "1\t10\t4\t100\x00\n", ["--value", "timestamp"],
     "line 1, column 11: the line '1\\t10\\t4\\t100\\x00' holds a NUL byte (\\x00) in its "
     "timestamp field"),
    ("nul in a field not written", "1\t10\t\x004\t100\n", [],
     "line 1, column 6: the line '1\\t10\\t\\x004\\t100' holds a NUL byte (\\x00) in its rating"),
    ("nul in a fifth field", HEADER + "1,10,4.0,100,\x00\n", [], "line 2, column 14: the line "
     "'1,10,4.0,100,\\x00' holds a NUL byte (\\x00). No MovieLens field holds one"),
    ("nul in header", "userId,movie\x00Id,rating,timestamp\n1,10,4.0,100\n", [],
     "line 1, column 13: the line 'userId,movie\\x00Id,rating,timestamp' holds a NUL byte"),
    # (a row that the chunk's scan cannot show clean: its rows are checked one by one)
    ("nul after an empty rating", HEADER + "1,10,,100\n1,11,4.0,10\x001\n", [],
     "line 3, column 12: the line '1,11,4.0,10\\x001' holds a NUL byte (\\x00) in its timestamp"),
    ("utf-16", (HEADER + "1,10,4.0,100\n").encode("utf-16-le"), [],
     "line 1, column 2: the line 'u\\x00s\\x00e\\x00r"),
    ("utf-16 crlf", (HEADER + "1,10,4.0,100\n").replace("\n", "\r\n").encode("utf-16-le"), [],
     "line 1, column 2: "),
    ("utf-16 rows", "1,10,4.0,100\n".encode("utf-16-le"), [], "line 1, column 2: the line "
     "'1\\x00,\\x001\\x000\\x00,"),
    # UTF-16 MovieLens .dat: '::' reads as ':\0:', so no separator is found; the NUL says why.
    ("utf-16 dat", "1::1193::5::978300760\n".encode("utf-16-le"), [], "line 1, column 2: the "
     "line '1\\x00:\\x00:\\x001"),
    ("wrong format", HEADER + "1,10,4.0,100\n", ["--format", "dat"], "line 1: found 1 field"),
    # A byte-order mark's FF or FE is never UTF-8: not 'convert from latin1', which garbles it.
    ("bom utf-16le", "1::1193::5::978300760\n".encode("utf-16"), [],
     "line 1, column 1: the file starts with the bytes FF FE, a UTF-16 byte-order mark"),
    ("bom utf-16be", b"\xfe\xff" + "1,10,4.0,100\n".encode("utf-16-be"), [],
     "line 1, column 1: the file starts with the bytes FE FF, a UTF-16 byte-order mark"),
    # A dataset or network given for the ratings: not 'convert from latin1'.
    ("netcdf4", b"\x89HDF\r\n\x1a\n\x00\x00\x00\x00", [],
     ": is a NetCDF file (a dataset written by generate-netcdf, or a network written by train)"),
    # A classic NetCDF file starts with UTF-8 bytes: it was said to hold a NUL byte.
    ("netcdf classic", b"CDF\x01\x00\x00\x00\x00\x00\x00\x00\n", [],
     ": is a NetCDF file (a dataset written by generate-netcdf, or a network written by train)"),
]


def test_a_chunk_is_plain_only_where_every_field_is_a_float32():
    """_plain, which spares a chunk the checks of its values one by one, against the slow
    and obvious reading of its definition on random fields of digits and points."""
    rng = random.Random(7)

    def field():
        shape = rng.random()
        if shape < 0.05:
            return "9" * rng.randint(37, 41)
        return "".join(rng.choice("0123456789" * 3 + ".") for _ in range(rng.randint(1, 5)))

    def reference(fields):
        return all(re.fullmatch(r"[0-9]*\.?[0-9]*", f) and f != "." and "0" * 39 not in
                   re.sub("[1-9]", "0", f) for f in fields)

    seen = set()
    for _ in range(3000):
        fields = [field() for _ in range(rng.randint(1, 8))]
        text = "".join(f"{','.join(fields[i:i + 4])}\n" for i in range(0, len(fields), 4))
        plain = ratings_mod._plain(text)
        assert plain == bool(reference(fields)), text
        if plain:  # what the fast path relies on
            assert all(abs(float(f)) < ratings_mod._FLOAT32_OVERFLOW for f in fields), text
        seen.add(plain)
    assert seen == {True, False}
    assert not ratings_mod._plain("1,10,4.5,100\n2,é,4,5\n")
    assert not ratings_mod._plain("1,10,-4.5,100\n")


# The runs of test_errors, which read only the script's exit status and message, go together
# (tests/batch.py): every one in one process, the script run as ``python SCRIPT`` runs it (a
# process each took 0.1 s, 5 s for the 52).
BATCHED = batch.Batched(str(SCRIPT))


@pytest.fixture(scope="module")
def batch_runs(tmp_path_factory, request) -> dict:
    return BATCHED.run(request, tmp_path_factory, request.getfixturevalue, None, None)


def errors_runs(fixture, d) -> dict:
    """For each of ERRORS, in d/NAME: its bad.txt, converted to out.txt."""
    runs = {}
    for name, content, args, _ in ERRORS:
        (d / name).mkdir()
        src = d / name / "bad.txt"
        src.write_bytes(content if isinstance(content, bytes) else content.encode())
        runs[name] = (1, [src, "-o", d / name / "out.txt", *args])
    return runs


@BATCHED(errors_runs)
@pytest.mark.parametrize("name, content, args, message", ERRORS, ids=[e[0] for e in ERRORS])
def test_errors(batch_runs, name, content, args, message):
    d, ran = batch_runs["test_errors"]
    tmp_path = d / name
    src, out = tmp_path / "bad.txt", tmp_path / "out.txt"
    result = ran[name]
    # (as subprocess.run's text=True reads it)
    stderr = result.stderr.decode().replace("\r\n", "\n").replace("\r", "\n")
    assert result.returncode == 1
    assert stderr.startswith(f"Error: {src}"), stderr
    assert message in stderr
    if name.startswith("cr"):
        assert "dos2unix" in stderr
    if "nul" in name or name.startswith("utf-16"):
        assert stderr.endswith(f"; {NUL_REMEDY}\n")  # (generate-netcdf's remedy)
    if name.startswith("bom"):
        assert "iconv -f utf-16 -t utf-8" in stderr and "latin1" not in stderr
    if name.startswith("netcdf"):
        assert "iconv" not in stderr
    assert stderr.count("\n") == 1  # one paragraph, no traceback
    assert not out.exists() and [p.name for p in tmp_path.iterdir()] == ["bad.txt"]


def test_output_over_the_input_is_refused(csv_path, tmp_path):
    src = tmp_path / "ratings.csv"
    shutil.copy(csv_path, src)
    result = run_script(src, "-o", src)
    assert result.returncode == 1
    # (the output is named as its lock's message names it: "converted ratings file (-o)")
    assert "the converted ratings file (-o) would replace the ratings file" in result.stderr
    assert src.read_bytes() == csv_path.read_bytes()


def test_unreadable_input(tmp_path):
    result = run_script(tmp_path / "missing.csv")
    assert result.returncode == 1
    assert result.stderr.startswith("Error: ") and "cannot be read" in result.stderr
    assert result.stdout == ""


def test_library_rejects_bad_options(csv_path):
    with pytest.raises(ValueError, match="fmt"):
        convert(csv_path, fmt="tsv")
    with pytest.raises(ValueError, match="value"):
        convert(csv_path, value="stars")


def test_error_names_file_and_line(tmp_path):
    src = tmp_path / "r.dat"
    src.write_text("1::10::4::100\n2::11::4\n")
    with pytest.raises(DataFormatError) as info:
        convert(src)
    assert (info.value.path, info.value.line) == (str(src), 2)
    assert os.fspath(src) in str(info.value)


def test_a_value_float32_rounds_to_its_max_is_written(tmp_path):
    """float32's largest value, in full or as NumPy prints it, is within its range: written,
    as generate-netcdf reads it (to that max)."""
    path = tmp_path / "u.data"
    path.write_text("1\t10\t4\t3.4028234663852886e38\n1\t11\t4\t-3.4028235e38\n")
    assert convert(path) == "1\t10,3.4028234663852886e38:11,-3.4028235e38\n"


def test_a_number_is_the_scanners():
    """A value convert_ratings writes is one generate-netcdf's scanner reads, and the reverse:
    Python's float() reads more ('1_0', ' 4', '\u0663', 'inf')."""
    import numpy as np

    from destiny.io import ratings, textscan

    for text in ["4", "-3.5", "+4", ".5", "5.", "1e3", "2E-3", "-0", "1e-400", "0e99999",
                 "3.4028235e38", "1_0", " 4", "4 ", "\u0663", "inf", "-Infinity", "nan", "",
                 ".", "1e", "e3", "1.2.3", "0x10", "1e39", "--1", "4\u00a0",
                 # a little below float32's limit, though float() rounds it onto it; the limit
                 "3.4028235677973366e38", "340282356779733661637539395458142568448"]:
        raw = np.frombuffer(text.encode(), dtype=np.uint8)
        scanned = bool(textscan._parse_value(raw, 0, len(raw))[0])
        assert ratings._within_float32(text) == scanned, text


def test_a_long_rating_that_is_not_a_number_is_refused_at_once(tmp_path):
    """A run of digits followed by another character: the regular expression of a decimal
    split the run between two of its parts every way, time quadratic in its length (200,000
    digits: beyond 100 s; found by fuzzing split_holdout.py, which shares it)."""
    path = tmp_path / "ratings.csv"
    path.write_text(HEADER + "1,10," + "1" * 200_000 + "x,100\n")
    done = run_script(path, "-o", tmp_path / "out.txt", "--min-rating", "3")
    assert done.returncode == 1, done.stderr
    assert done.stderr.startswith(f"Error: {path}, line 2: the rating '111"), done.stderr
    assert "is not a number" in done.stderr and not (tmp_path / "out.txt").exists()


def test_the_float32_bound_is_the_scanners():
    """convert_ratings restates the text scanner's bound (to read CSV without numba): the two
    must agree, or it would pass a value generate-netcdf then refuses."""
    from destiny.io import ratings, textscan

    assert ratings._FLOAT32_OVERFLOW == textscan.FLOAT32_OVERFLOW


def test_an_empty_output_path_is_a_usage_error(tmp_path):
    (tmp_path / "r.csv").write_text(HEADER + "1,10,4.0,100\n")
    result = run_script(tmp_path / "r.csv", "-o", "")
    assert result.returncode == 2 and "Invalid value for '-o' / '--output': is an empty path" in \
        result.stderr, result.stderr
    assert [p.name for p in tmp_path.iterdir()] == ["r.csv"]


def test_an_output_another_run_is_writing_is_refused(tmp_path):
    """As the commands' outputs: an overlapping run (cron) fails at once instead of replacing
    the other's file as it finishes."""
    from destiny.io.atomic import exclusive, lock_path

    (tmp_path / "r.csv").write_text(HEADER + "1,10,4.0,100\n")
    out = tmp_path / "out.txt"
    with exclusive(out, "output"):
        done = run_script(tmp_path / "r.csv", "-o", out)
    assert done.returncode == 1, done.stderr
    assert done.stderr == (f"Error: {out}: another run is writing this converted "
                           f"ratings file (-o) now (it holds {lock_path(out)}); wait for it to "
                           "finish, or choose another path.\n")
    assert sorted(p.name for p in tmp_path.iterdir()) == ["r.csv"]
