"""The numba text scanner against a plain-Python reference parser, on random records."""

from __future__ import annotations

import re

import numpy as np
import pytest

import destiny.io.text
from destiny.errors import DataFormatError
from destiny.io import textscan
from destiny.io.index import LabelTable
from destiny.io.text import read_records


def reference_parse(text: str):
    """Spec 1.2 in plain Python: [(label, [(feature, value or 0.0), ...]), ...]."""
    records = []
    for line in text.split("\n")[:-1]:
        label, _, rest = line.partition("\t")
        feats = []
        for token in rest.split(":") if rest else []:
            name, _, value = token.partition(",")
            feats.append((name, float(value) if value else 0.0))
        records.append((label, feats))
    return records


def parse_value(s: str):
    buf = np.frombuffer(s.encode(), dtype=np.uint8)
    return textscan._parse_value(buf, 0, len(buf))


@pytest.mark.parametrize("text", ["0", "3", "-2", "+7", "1.5", "-0.25", ".5", "5.", "1e3",
                                  "2.5E-3", "-1e+2", "1364613781", "0.1", "3.4e38",
                                  "123456789012345678901234", "0.000000000000000000000123",
                                  "3.14159265358979323846",  # (digits past the 18 kept)
                                  # float32's max, exactly and as NumPy prints it (stof's too)
                                  "3.4028234663852886e38", "-3.4028235e38",
                                  "0e400", "-0.00E+999", "1e-400"])  # (0 and underflow to 0)
def test_parse_value_accepts_decimal_numbers(text):
    ok, value = parse_value(text)
    assert ok
    assert np.float32(value) == np.float32(float(text))


@pytest.mark.parametrize("text", ["-", "+", ".", "e3", "1e", "1e+", "12x", "x12", "nan", "inf",
                                  "1_0", " 1", "1 ", "0x10", "1.2.3", "--1", "1e400", "3.5e38",
                                  "3.4028236e38",  # (float32 rounds it to infinity)
                                  "1e18446744073709551616"])  # (an exponent of 2**64, not 0)
def test_parse_value_rejects_the_rest(text):
    assert parse_value(text) == (False, 0.0)


LIMIT = 2**128 - 2**103  # float32 rounds this and above to infinity (a tie, to even)


@pytest.mark.parametrize("text,within", [
    ("3.4028235677973366e38", True),  # (float64's nearest is the limit: it is a little below)
    (f"{LIMIT - 1}", True), (f"-{LIMIT - 1}.999", True), (f"0.{LIMIT - 1}e39", True),
    (f"{LIMIT - 1}9e-1", True),
    (f"{LIMIT}", False), (f"-{LIMIT}.000", False), (f"0.000{LIMIT}E+42", False),
    (f"{LIMIT + 1}", False), ("3.4028235677973367e38", False)])
def test_parse_value_decides_float32s_limit_on_the_digits(text, within):
    """As C's stof does: near the limit the float64 arithmetic (18 digits kept) put values on
    the wrong side of it, the limit itself read as float32's max and one below it refused."""
    ok, value = parse_value(text)
    assert ok == within
    if ok:
        assert abs(np.float32(value)) == np.finfo(np.float32).max


def _random_text(rng, rows, vocab, with_values):
    alphabet = list("abcxyz0123456789 _-.éü漢")
    names = ["".join(rng.choice(alphabet, size=rng.integers(1, 6))).strip() or "q"
             for _ in range(vocab)]
    names = list(dict.fromkeys(n for n in names if n))
    formats = ["%d", "%.3f", "%g", "%e", "%.1f"]
    lines = []
    for r in range(rows):
        k = rng.integers(0, 12)
        toks = []
        for _ in range(k):
            name = names[rng.integers(len(names))]
            if with_values and rng.random() < 0.8:
                v = rng.normal(0, 10.0 ** rng.integers(-3, 6))
                toks.append(f"{name},{formats[rng.integers(len(formats))] % v}")
            elif with_values and rng.random() < 0.5:
                toks.append(f"{name},")  # an empty value means no value
            else:
                toks.append(name)
        lines.append(f"sample {r}\t" + ":".join(toks))
    return "\n".join(lines) + "\n"


@pytest.mark.parametrize("seed", range(4))
def test_scanner_matches_reference(tmp_path, seed):
    rng = np.random.default_rng(seed)
    text = _random_text(rng, rows=300, vocab=200, with_values=bool(seed % 2))
    path = tmp_path / "in.txt"
    path.write_text(text, encoding="utf-8")
    table = LabelTable(capacity=4)  # forces several rounds of growth
    records = read_records([str(path)], table, update=True, keep_values=True)

    expected = reference_parse(text)
    index: dict[str, int] = {}
    for _, feats in expected:
        for name, _ in feats:
            index.setdefault(name, len(index))
    assert records.labels == [label for label, _ in expected]
    assert table.to_dict() == index
    assert records.indptr.tolist() == np.cumsum([0] + [len(f) for _, f in expected]).tolist()
    flat = [f for _, feats in expected for f in feats]
    assert records.indices.tolist() == [index[n] for n, _ in flat]
    np.testing.assert_allclose(records.values, np.float32([v for _, v in flat]), rtol=2e-7)


def test_fixed_table_drops_and_counts_unknown(tmp_path):
    path = tmp_path / "in.txt"
    path.write_text("u1\ta:b:zz\nu2\tyy\nu3\tb\n")
    table = LabelTable()
    table.add_labels(["a", "b"], np.array([5, 9]))
    records = read_records([str(path)], table, update=False)
    assert records.indices.tolist() == [5, 9, 9]
    assert records.indptr.tolist() == [0, 2, 2, 3]
    assert (records.dropped, records.lines_with_drops) == (2, 2)
    assert len(table) == 2


def test_drops_and_bytes_are_counted_over_every_chunk(tmp_path, monkeypatch):
    """Each line its own chunk: the counts of unknown features and of the lines that lost one
    sum over the chunks, and progress hears of every byte."""
    path = tmp_path / "in.txt"
    path.write_text("u1\ta:b:zz\nu2\tyy\nu3\tb\nu4\ta\n")
    monkeypatch.setattr(destiny.io.text, "CHUNK_BYTES", 4)
    table = LabelTable()
    table.add_labels(["a", "b"], np.array([5, 9]))
    consumed = []
    records = read_records([str(path)], table, update=False, progress=consumed.append)
    assert records.indices.tolist() == [5, 9, 9, 5]
    assert (records.dropped, records.lines_with_drops) == (2, 2)
    assert consumed == [10, 6, 5, 5]


def test_only_the_files_first_chunk_is_checked_as_the_files_start(tmp_path, monkeypatch):
    """A later chunk starting with a byte-order mark is refused as a file joined on at that
    line, as in a single chunk, not as the file's own start."""
    path = tmp_path / "in.txt"
    path.write_text("u1\ta\n\ufeffu2\tb\n", encoding="utf-8")
    messages = []
    for chunk_bytes in (1 << 20, 4):
        monkeypatch.setattr(destiny.io.text, "CHUNK_BYTES", chunk_bytes)
        with pytest.raises(DataFormatError, match="line 2, column 1: ") as e:
            read_records([str(path)], LabelTable(), update=True)
        messages.append(str(e.value))
    assert messages[0] == messages[1] and "joined on" in messages[0]


def test_label_table_reports_duplicate_labels():
    table = LabelTable()
    assert table.add_labels(["x", "y", "x"], np.arange(3)) == 2


_DECIMAL = re.compile(rb"[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?")


def reference_fault(data: bytes, known: set | None) -> tuple[int, int]:
    """(status, byte) of the first fault in ``data`` by the scanner's rules, or (OK, len).

    A line's faults are taken in byte order, except that a CR anywhere in it outranks the
    rest (and a blank line, a missing TAB and an empty label come before its features).
    ``known``: the feature names a strict scan accepts (None: not strict).
    """
    pos = 0
    while pos < len(data):
        end = data.find(b"\n", pos)
        end = len(data) if end < 0 else end
        line = data[pos:end]
        if not line:
            return textscan.BLANK_LINE, pos
        if b"\r" in line:
            return textscan.CARRIAGE_RETURN, pos + line.index(b"\r")
        if b"\0" in line and (b"\t" not in line or line.index(b"\0") < line.index(b"\t")):
            return textscan.NUL_BYTE, pos + line.index(b"\0")  # in the sample's name
        if b"\t" not in line:
            return textscan.NO_TAB, pos
        if line.index(b"\t") == 0:
            return textscan.EMPTY_LABEL, pos
        p = pos + line.index(b"\t") + 1
        while p < end:
            te = data.find(b":", p, end)
            te = end if te < 0 else te
            token = data[p:te]
            for j, c in enumerate(token):
                if c == 9:
                    return textscan.SECOND_TAB, p + j
                if c == 0:
                    return textscan.NUL_BYTE, p + j
                if c == 44 and token.count(b",", 0, j) == 1:
                    return textscan.EXTRA_FIELD, p + j
            name, _, value = token.partition(b",")
            if not name:
                return textscan.EMPTY_FEATURE, p
            if value and not (_DECIMAL.fullmatch(value)
                              and abs(float(value)) < 2.0**128 - 2.0**103):  # float32 finite
                return textscan.BAD_VALUE, p + len(name) + 1
            if known is not None and name not in known:
                return textscan.UNKNOWN_FEATURE, p
            if te == end:
                break
            p = te + 1
            if p == end:
                return textscan.TRAILING_COLON, te
        pos = end + 1
    return textscan.OK, len(data)


def _damaged_text(rng) -> bytes:
    """A few records (names, integers, decimals, empty values), then up to two bytes broken."""
    lines = []
    for _ in range(rng.integers(1, 5)):
        toks = []
        for _ in range(rng.integers(0, 6)):
            name = bytes(rng.choice(list(b"abxy12"), size=rng.integers(0, 4)).tolist())
            r = rng.random()
            if r < 0.4:  # integers of up to 21 digits: the scanner's fast path takes 18
                digits = "".join(map(str, rng.integers(0, 10, rng.integers(1, 22))))
                toks.append(name + b"," + digits.encode())
            elif r < 0.6:
                toks.append(name + b",%g" % rng.normal(0, 100))
            elif r < 0.7:
                toks.append(name + b",")
            else:
                toks.append(name)
        lines.append(bytes(rng.choice(list(b"uv1"), size=rng.integers(0, 3)).tolist()) + b"\t"
                     + b":".join(toks))
    data = bytearray(b"\n".join(lines) + b"\n")
    for _ in range(rng.integers(0, 3)):
        k = int(rng.integers(0, len(data)))
        c = int(rng.choice(list(b"\t\n\r\0:,a1-+.eE")))
        r = rng.random()
        if r < 0.4:
            data.insert(k, c)
        elif r < 0.7:
            data[k] = c
        else:
            del data[k]
    return bytes(data)


def _scan(data: bytes, table: LabelTable, mode: int, strict: bool):
    """scan_records over ``data`` (the table grown as asked; DEFER's names then numbered):
    (status, position, values, indices)."""
    buf = np.frombuffer(data, dtype=np.uint8)
    most = len(data) // 2 + 1
    out = [np.zeros(most, np.int64) for _ in range(3)]
    tok = np.zeros(most, np.int32), np.zeros(most, np.float32)
    pending = np.zeros((most, 3), np.int64)
    counts = np.zeros(5, np.int64)
    pos = 0
    while True:
        status, pos = textscan.scan_records(buf, pos, *table.scan_args(), mode, strict,
                                            *out, *tok, pending, counts)
        if status != textscan.NEED_ROOM:
            break
        table.reserve(len(data), len(data))
    done, n = 0, int(counts[4])
    while done < n:
        done = textscan.resolve_pending(*table.scan_args(), buf, pending, done, n, tok[0])
        if done < n:
            table.reserve(1, 1)  # one key at a time: every growth path is taken
    return status, pos, tok[1][:counts[1]].tolist(), tok[0][:counts[1]].tolist()


@pytest.mark.parametrize("seed", range(3))
def test_scanner_reports_the_first_fault(seed):
    rng = np.random.default_rng(seed)
    known = [b"a", b"b1", b"x", b"yy"]
    statuses = set()
    for _ in range(700):
        data = _damaged_text(rng)
        if not data:
            continue
        expected = reference_fault(data, None)
        statuses.add(expected[0])
        added = LabelTable(capacity=2)
        status, pos, values, indices = _scan(data, added, textscan.UPDATE, False)
        assert (status, pos) == expected, data
        deferred = LabelTable(capacity=2)
        assert _scan(data, deferred, textscan.DEFER, False)[:2] == expected, data
        if status == textscan.OK:  # long integers too, past the fast path's 18 digits
            parsed = reference_parse(data.decode() + ("" if data.endswith(b"\n") else "\n"))
            assert values == [float(np.float32(v)) for _, feats in parsed for _, v in feats]
            # DEFER then resolve_pending numbers the names as UPDATE does
            assert _scan(data, deferred, textscan.DEFER, False)[2:] == (values, indices)
            assert deferred.to_dict() == added.to_dict()
        fixed = LabelTable()
        fixed.add_labels([k.decode() for k in known], np.arange(len(known)))
        assert (_scan(data, fixed, textscan.LOOKUP, True)[:2]
                == reference_fault(data, set(known))), data
    assert len(statuses) >= 9  # the damage reaches most kinds of fault
    assert textscan.NUL_BYTE in statuses


def _same_records(a, b):
    assert a.labels == b.labels
    assert a.indptr.tolist() == b.indptr.tolist()
    assert a.indices.tolist() == b.indices.tolist()
    assert a.values.tolist() == b.values.tolist()
    assert (a.dropped, a.lines_with_drops, a.sources) == (b.dropped, b.lines_with_drops, b.sources)


@pytest.mark.parametrize("threads", [2, 3])
def test_threads_read_as_one_thread(tmp_path, monkeypatch, threads):
    """Chunks scanned on threads at once give one thread's records, in file order, and (with
    a new index) one thread's numbering, new names appearing in every round of chunks."""
    rng = np.random.default_rng(5)
    paths = []
    for i, vocab in enumerate((40, 300)):  # the second file brings names the first lacks
        paths.append(str(tmp_path / f"in{i}.txt"))
        with open(paths[-1], "w", encoding="utf-8") as f:
            f.write(_random_text(rng, rows=400, vocab=vocab, with_values=True))
    monkeypatch.setattr(destiny.io.text, "CHUNK_BYTES", 300)
    monkeypatch.setattr(destiny.io.text, "get_num_threads", lambda: 1)
    one_table = LabelTable(capacity=2)
    one = read_records(paths, one_table, update=True)
    names = one_table.labels()
    fixed = LabelTable()
    fixed.add_labels(names[::2], np.arange(0, len(names), 2))  # half the names unknown
    one_fixed = read_records(paths, fixed, update=False)
    assert one_fixed.dropped > 0

    monkeypatch.setattr(destiny.io.text, "get_num_threads", lambda: threads)
    table = LabelTable(capacity=2)  # grown between rounds
    _same_records(read_records(paths, table, update=True), one)
    assert table.to_dict() == one_table.to_dict()
    _same_records(read_records(paths, fixed, update=False), one_fixed)
    assert len(fixed) == len(names[::2])


def test_index_fast_path_agrees_with_the_line_by_line_parser(tmp_path):
    """read_index splits a well-formed file at every TAB and LF at once (checking one TAB per
    line on the bytes) and leaves anything else to the line-by-line parser, whose errors name
    the line: on random, randomly damaged index files both give the same labels or error."""
    from destiny.io import index

    def checked(path, text):
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        try:
            labels, values = index._parse_checked(path, lines)
            return labels, values.tolist()
        except DataFormatError as e:
            return str(e)

    rng = np.random.default_rng(12)
    pieces = ["a", "b", "7", "é", "猫", " ", "\t", "\n", "\r", ":", "0", "x"]
    path = tmp_path / "index"
    tricky = ["7\t1\t2\n3\n", "7\t1\n\t2\n", "7\t\n1\t2\n", "\n", "", "a\t1", "a\t1\n\n",
              "a\t1\t\n"]  # a TAB moved to another line keeps the count of TABs

    def random_index():
        return "".join(f"{''.join(rng.choice(pieces[:6], rng.integers(1, 4)))}\t"
                       f"{rng.integers(0, 10_000)}\n" for _ in range(rng.integers(0, 6)))

    for case in range(1000 + len(tricky)):
        text = tricky[case] if case < len(tricky) else random_index()
        for _ in range(rng.integers(0, 3) if case >= len(tricky) else 0):  # damage a character
            i = int(rng.integers(0, len(text) + 1))
            text = (text[:i] + str(rng.choice(pieces)) + text[i:] if rng.random() < 0.5
                    else text[:i] + text[i + 1:])
        path.write_bytes(text.encode())
        try:
            labels, values = index.read_index(path)
            got = (labels, values.tolist())
        except DataFormatError as e:
            got = str(e)
        expected = checked(path, text)
        if isinstance(expected, tuple) and len(set(expected[1])) != len(expected[1]):
            assert isinstance(got, str) and "is given to both" in got  # duplicate index
        else:
            assert got == expected, repr(text)


def test_an_index_with_a_byte_order_mark_is_refused(tmp_path):
    """It became part of the first label: a sample index held both '\\ufeffu1' and 'u1', a
    feature index dropped its first feature as unknown."""
    from destiny.errors import DataFormatError
    from destiny.io import index

    path = tmp_path / "features"
    path.write_bytes(b"\xef\xbb\xbfa\t0\nb\t1\n")
    with pytest.raises(DataFormatError, match=r"features, line 1, column 1: the file starts "
                                              r"with a UTF-8 byte-order mark"):
        index.read_index(path)
    path.write_bytes("a\t0\n".encode("utf-16"))
    with pytest.raises(DataFormatError, match=r"line 1, column 1: the file starts with the bytes "
                                              r"FF FE, a UTF-16 byte-order mark"):
        index.read_index(path)
    # one joined on (`cat a b`): its first label became '\ufeffc', a feature that no data
    # line names (the other one, 'c', was then unknown)
    path.write_bytes(b"a\t0\nb\t1\n\xef\xbb\xbfc\t2\n")
    with pytest.raises(DataFormatError, match=r"features, line 3, column 1: the line "
                                              r"'\\ufeffc\\t2' starts with a UTF-8 byte-order "
                                              r"mark .* part of its label: "):
        index.read_index(path)


def test_an_index_line_may_end_with_a_tab_and_hold_the_largest_32_bit_index(tmp_path):
    """Spec 1.3: ``label<TAB>index`` with a trailing TAB tolerated, as DSSTNE's reader does;
    indices are 32-bit (int32 here), so 2**31 - 1 is the largest one read and 2**31 is refused
    (it would wrap onto another feature)."""
    from destiny.errors import DataFormatError
    from destiny.io import index

    path = tmp_path / "index"
    path.write_bytes(b"a\t0\t\nb\t2147483647\n")
    labels, values = index.read_index(path)
    assert labels == ["a", "b"] and values.tolist() == [0, 2**31 - 1]
    path.write_bytes(b"a\t0\nb\t2147483648\n")
    with pytest.raises(DataFormatError, match=r"line 2: the index 2147483648 of 'b' is too "
                                              r"large"):
        index.read_index(path)


def test_the_index_digest_covers_the_entries_below_n_as_written(tmp_path):
    """A dataset records the digest of its feature index's entries numbered below n (the
    index's size then): the sha256 of their lines as write_index writes them, sorted by index.
    An index grown since by -m (entries n and up) has the same digest below n."""
    import hashlib

    from destiny.io import index

    expected = hashlib.sha256(b"a\t0\nb\t1\n").hexdigest()[:32]
    assert index.index_digest(["b", "a"], np.array([1, 0]), 2) == expected
    assert index.index_digest(["b", "a", "c"], np.array([1, 0, 2]), 2) == expected
    path = tmp_path / "features"
    index.write_index(path, ["b", "a", "c"], np.array([1, 0, 2]))
    assert path.read_bytes() == b"a\t0\nb\t1\nc\t2\n"


def test_the_rows_digest_tells_where_one_label_ends():
    from destiny.io.index import rows_digest

    assert rows_digest(["ab", "c"]) != rows_digest(["a", "bc"])
    assert rows_digest(["a", "b"]) == rows_digest(["a", "b"]) != rows_digest(["b", "a"])


def test_an_index_giving_one_index_to_two_labels_is_refused_even_with_two_lines(tmp_path):
    """Two labels on one index would merge two features; the smallest such file, two lines."""
    from destiny.errors import DataFormatError
    from destiny.io import index

    path = tmp_path / "index"
    path.write_bytes(b"a\t0\nb\t0\n")
    with pytest.raises(DataFormatError, match=r"line 2: index 0 is given to both 'a' \(line 1\) "
                                              r"and 'b'"):
        index.read_index(path)


def test_a_value_that_float32_rounds_to_its_max_is_read_and_one_beyond_is_named(tmp_path):
    """float32's largest value written in full (3.4028234663852886e38, Python's repr of it) was
    refused as 'not a number': the parse's arithmetic put it a little above the max. It and
    NumPy's 3.4028235e38 are read as that max, as C's stof reads them (a value is within
    float32's range if float32 rounds it to a finite number); 3.4028236e38 rounds to infinity."""
    from destiny.errors import DataFormatError

    path = tmp_path / "in.txt"
    path.write_text("u1\ta,3.4028234663852886e38:b,-3.4028235e38:c,1\n")
    records = read_records([str(path)], LabelTable(), update=True)
    big = np.finfo(np.float32).max
    assert records.values.tolist() == [big, -big, 1.0]
    path.write_text("u1\ta,3.4028236e38\n")
    with pytest.raises(DataFormatError, match=r"column 6: the value '3.4028236e38' .* is beyond "
                                              r"float32's range"):
        read_records([str(path)], LabelTable(), update=True)
