"""``destiny.wording``: counts, sizes, stored values and names in messages."""

import os

import numpy as np

from destiny.wording import counted, quoted, readable, shown, sized


def test_counted():
    assert counted(1, "sample") == "1 sample"
    assert counted(0, "sample") == "0 samples"
    assert counted(12345, "sample") == "12,345 samples"
    assert counted(1, "entry", "entries") == "1 entry"
    assert counted(2, "entry", "entries") == "2 entries"


def test_sized():
    assert sized(1) == "1 byte"
    assert sized(1023) == "1,023 bytes"
    assert sized(1024) == "1.0 KiB"
    assert sized(3_565_158) == "3.4 MiB"
    assert sized(5 << 30) == "5.0 GiB"


def test_shown_gives_the_value_and_its_type():
    assert shown("abc") == "'abc' (text)"
    assert shown(np.int32(-3)) == "-3 (int32)"
    assert shown(np.array([99], dtype=np.uint32)) == "99 (uint32)"
    assert shown(np.float32(128.7)) == "128.7 (float32)"  # (not 128.6999969482422)
    assert shown(np.float32(np.nan)) == "nan (float32)"
    assert shown(np.array([1, 2], dtype=np.int16)) == "[1, 2] (int16)"


def test_shown_cuts_long_values_short():
    assert shown("x" * 100) == "'" + "x" * 56 + "... (text)"
    assert shown(np.zeros(20, dtype=np.int8)) == "[" + "0, " * 19 + "0] (int8)"
    assert shown(np.zeros(21, dtype=np.int8)) == "[" + "0, " * 18 + "0,... (int8)"
    assert shown(np.arange(100)).endswith("... (int64)")


NOT_UTF8 = os.fsdecode(b"a\xff\x80b.txt")  # as Python holds such a file name: 'a\udcff\udc80b.txt'


def test_readable_shows_the_bytes_that_are_not_utf8():
    assert readable(NOT_UTF8) == "a\\xff\\x80b.txt"
    assert readable(NOT_UTF8) == os.fsencode(NOT_UTF8).decode("utf-8", "backslashreplace")
    assert readable(f"{NOT_UTF8}: not found").encode("utf-8")  # (a lone surrogate cannot be)
    assert readable("x\ud800y") == "x\\ud800y"  # (no byte's escape: shown as Python writes it)
    assert readable("caf\u00e9 \\udcff") == "caf\u00e9 \\udcff"  # UTF-8, and text, unchanged
    # U+DC00..U+DC7F: no byte's escape (surrogateescape gives 0x80..0xff only)
    assert readable("x\udc41\udc7f") == "x\\udc41\\udc7f"


def test_quoted_is_repr_with_the_bytes_shown():
    assert repr(NOT_UTF8) == "'a\\udcff\\udc80b.txt'"
    assert quoted(NOT_UTF8) == "'a\\xff\\x80b.txt'"
    assert quoted("it's\udcff") == '"it\'s\\xff"'
    assert quoted("a\\udcff") == repr("a\\udcff")  # a backslash in the name: not an escape
    assert quoted("x\ud800") == repr("x\ud800")
    assert quoted("x\udc41\udc7f") == repr("x\udc41\udc7f")
    assert quoted("caf\u00e9\t") == repr("caf\u00e9\t")
