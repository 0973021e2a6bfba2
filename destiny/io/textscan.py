"""numba kernels that scan DSSTNE text records and map labels to indices.

The format (spec 1.2) is ``NAME<TAB>feat[,value]:feat[,value]...``, one sample a line.
Parsing MovieLens-20M (20 million features, about 300 MB) one token at a time in Python
costs ~15 s; these kernels walk the bytes once and look feature names up in an
open-addressing hash table that lives in NumPy arrays, so the whole file takes a few
seconds and memory stays proportional to the output arrays.

The kernels only *detect* a problem: they stop at the first bad line and return an error
code and a byte offset. ``destiny.io.text`` then turns that into a message naming the file,
line, column and offending text. Kernels take raw arrays only, and outputs are passed in.
"""

from __future__ import annotations

import numpy as np
from numba import njit

from destiny.errors import DataFormatError, netcdf_text_error, utf16_bom_error

BOM = b"\xef\xbb\xbf"


def check_text_start(path, head: bytes) -> None:
    """Refuse a file whose first bytes ``head`` are a UTF-8 byte-order mark: it would become
    part of the first line's label, silently (a sample that matches nothing, a feature
    dropped). A UTF-16 one is refused as UTF-16 text, which its bytes (never UTF-8) are, and
    a NetCDF file's first bytes as a NetCDF file (a dataset or network where text is read)."""
    if error := utf16_bom_error(path, head) or netcdf_text_error(path, head):
        raise error
    if head.startswith(BOM):
        raise DataFormatError(path, "the file starts with a UTF-8 byte-order mark (bytes "
                              "EF BB BF, written by some Windows editors), which would become "
                              "part of the first line's label. Remove it, for example with "
                              "`sed -i '1s/^\\xEF\\xBB\\xBF//' FILE`.", line=1, column=1)


def bom_line(data: bytes) -> int:
    """Where the first line of ``data`` (whole lines) that starts with a UTF-8 byte-order mark
    starts, or -1 (for ``text.bom_line_error``). A file's own start is checked as it is opened
    (`check_text_start`); a mark at a later line's start comes from joining such a file on
    (``cat a.txt b.txt``), and would become part of that line's first field, as the first one
    would."""
    if data.startswith(BOM):  # (a chunk after the first starts a line)
        return 0
    found = data.find(b"\n" + BOM)
    return found + 1 if found >= 0 else -1


# What scan_records does with a feature name the table lacks.
LOOKUP = 0  # drop it and count it (or, strict, report it)
UPDATE = 1  # add it, numbered len(table) (spec 1.3)
DEFER = 2  # list it in `pending` for resolve_pending, which numbers the names in file order

# Status codes returned by scan_records (OK = 0; NEED_ROOM asks the caller to grow the table).
OK = 0
NEED_ROOM = 1
NO_TAB = 2
EMPTY_LABEL = 3
EMPTY_FEATURE = 4
TRAILING_COLON = 5
BAD_VALUE = 6
EXTRA_FIELD = 7
SECOND_TAB = 8
CARRIAGE_RETURN = 9
BLANK_LINE = 10
UNKNOWN_FEATURE = 11
NUL_BYTE = 12

_NUL, _TAB, _LF, _CR, _COLON, _COMMA = 0, 9, 10, 13, 58, 44
_EMPTY = -1

_FNV_OFFSET = np.uint64(14695981039346656037)
_FNV_PRIME = np.uint64(1099511628211)


@njit(cache=True, inline="always")
def _hash(buf, start, end):
    h = _FNV_OFFSET
    for i in range(start, end):
        h = (h ^ np.uint64(buf[i])) * _FNV_PRIME
    return h


@njit(cache=True)
def table_find(slots, key_hash, key_start, key_len, arena, buf, start, end, h):
    """Return the key number of ``buf[start:end]``, or ``-(slot + 1)`` of the free slot."""
    mask = len(slots) - 1
    i = np.int64(h & np.uint64(mask))
    n = end - start
    while True:
        k = slots[i]
        if k == _EMPTY:
            return -(i + 1)
        if key_hash[k] == h and key_len[k] == n:
            s = key_start[k]
            same = True
            for j in range(n):
                if arena[s + j] != buf[start + j]:
                    same = False
                    break
            if same:
                return k
        i = (i + 1) & mask


@njit(cache=True, inline="always")
def _has_room(slots, key_hash, arena, state, n_bytes):
    """Whether one more key of ``n_bytes`` fits, the slots kept at most half full."""
    return (2 * (state[0] + 1) <= len(slots) and state[0] + 1 <= len(key_hash)
            and state[1] + n_bytes <= len(arena))


@njit(cache=True)
def table_insert(slots, key_hash, key_start, key_len, key_value, arena, state, buf, start, end, h,
                 free, value):
    """Append ``buf[start:end]`` as key number ``state[0]`` with ``value``; return its number.

    ``state`` holds [number of keys, bytes of the arena in use]. The caller guarantees room.
    """
    k = state[0]
    a = state[1]
    n = end - start
    for j in range(n):
        arena[a + j] = buf[start + j]
    key_hash[k] = h
    key_start[k] = a
    key_len[k] = n
    key_value[k] = value
    slots[free] = k
    state[0] = k + 1
    state[1] = a + n
    return k


@njit(cache=True)
def table_insert_labels(slots, key_hash, key_start, key_len, key_value, arena, state, buf, offsets,
                        values):
    """Insert labels ``buf[offsets[i]:offsets[i + 1]]`` with ``values[i]``.

    Returns -1, or the position of the first label that is already present.
    """
    for i in range(len(offsets) - 1):
        s, e = offsets[i], offsets[i + 1]
        h = _hash(buf, s, e)
        k = table_find(slots, key_hash, key_start, key_len, arena, buf, s, e, h)
        if k >= 0:
            return i
        table_insert(slots, key_hash, key_start, key_len, key_value, arena, state, buf, s, e, h,
                     -k - 1, values[i])
    return -1


@njit(cache=True)
def table_rehash(slots, key_hash, n_keys):
    """Fill the empty ``slots`` (all -1, power-of-two length) with keys 0..n_keys-1."""
    mask = len(slots) - 1
    for k in range(n_keys):
        i = np.int64(key_hash[k] & np.uint64(mask))
        while slots[i] != _EMPTY:
            i = (i + 1) & mask
        slots[i] = k


# The least magnitude float32 rounds to infinity: 2**128 - 2**103, half an ulp above its largest
# value (3.4028234663852886e38). A value below it is within float32's range as C's stof reads
# it: 3.4028235e38, NumPy's float32 max, is that max; so too its exact decimal, which the
# rounding of the arithmetic below can put a little above the max.
FLOAT32_OVERFLOW = 2.0**128 - 2.0**103
_FLOAT32_MAX = 2.0**128 - 2.0**104
# Within this of the limit, the arithmetic (18 digits kept, a few roundings: some 1e-15 off at
# most) cannot tell a value's side of it; `_reaches_overflow` decides on the digits.
_NEAR_OVERFLOW = FLOAT32_OVERFLOW * (1 - 1e-9)
# The limit's decimal digits (it is an integer of 39 digits).
_OVERFLOW_DIGITS = np.frombuffer(b"%d" % (2**128 - 2**103), dtype=np.uint8) - 48


@njit(cache=True)
def _parse_value(buf, start, end):
    """Parse a decimal float (``-1.5``, ``3``, ``.5``, ``2e-3``); return (ok, value).

    Stricter than C's ``stof`` on purpose: no trailing junk (``12x``), no ``nan``/``inf``.
    """
    i = start
    neg = False
    if i < end and (buf[i] == 43 or buf[i] == 45):  # + -
        neg = buf[i] == 45
        i += 1
    mant = np.int64(0)
    exp10 = 0
    digits = 0
    while i < end and 48 <= buf[i] <= 57:
        if mant < 100000000000000000:
            mant = mant * 10 + (buf[i] - 48)
        else:
            exp10 += 1
        digits += 1
        i += 1
    if i < end and buf[i] == 46:  # .
        i += 1
        while i < end and 48 <= buf[i] <= 57:
            if mant < 100000000000000000:
                mant = mant * 10 + (buf[i] - 48)
                exp10 -= 1
            digits += 1
            i += 1
    if digits == 0:
        return False, 0.0
    if i < end and (buf[i] == 101 or buf[i] == 69):  # e E
        i += 1
        eneg = False
        if i < end and (buf[i] == 43 or buf[i] == 45):
            eneg = buf[i] == 45
            i += 1
        e = 0
        edigits = 0
        while i < end and 48 <= buf[i] <= 57:
            if e < 100000:
                e = e * 10 + (buf[i] - 48)
            edigits += 1
            i += 1
        if edigits == 0:
            return False, 0.0
        exp10 += -e if eneg else e
    if i != end:
        return False, 0.0
    v = float(mant)
    if exp10 > 0 and mant != 0:  # (0e400 is 0, not 0 times an infinite power)
        v *= 10.0**exp10
    elif exp10 < 0:
        v /= 10.0**-exp10
    if neg:
        v = -v
    if not abs(v) < _NEAR_OVERFLOW:  # (infinity too)
        if _reaches_overflow(buf, start, end):
            return False, 0.0
        v = max(-_FLOAT32_MAX, min(v, _FLOAT32_MAX))  # what float32 rounds it to
    return True, v


@njit(cache=True)
def _reaches_overflow(buf, start, end):
    """Whether the decimal number ``buf[start:end]`` (one `_parse_value` reads) is
    FLOAT32_OVERFLOW or more in magnitude, decided on its digits, as C's stof decides it:
    3.4028235677973366e38, below the limit, is float32's max, though the nearest float64 is
    the limit itself."""
    i = start
    if buf[i] == 43 or buf[i] == 45:  # + -
        i += 1
    point = -1
    first = -1  # the first digit that is not 0
    m = i
    while m < end and (48 <= buf[m] <= 57 or buf[m] == 46):
        if buf[m] == 46:
            point = m
        elif first < 0 and buf[m] != 48:
            first = m
        m += 1
    if first < 0:
        return False  # zero
    digits_end = m
    if point < 0:
        point = m
    # The value is 0.D x 10**magnitude, D its digits from `first` on.
    magnitude = point - first if first < point else point - first + 1
    if m < end:  # e E, a sign, digits
        m += 1
        eneg = buf[m] == 45
        if buf[m] == 43 or buf[m] == 45:
            m += 1
        e = 0
        while m < end:
            if e < 100000:
                e = e * 10 + (buf[m] - 48)
            m += 1
        magnitude += -e if eneg else e
    n = len(_OVERFLOW_DIGITS)
    if magnitude != n:
        return magnitude > n
    k = 0
    for j in range(first, digits_end):
        if buf[j] == 46:
            continue
        d = buf[j] - 48
        if d != _OVERFLOW_DIGITS[k]:
            return d > _OVERFLOW_DIGITS[k]
        k += 1
        if k == n:
            return True  # the limit itself, or more
    return False  # a prefix of the limit's digits: less


# Bytes that end a feature's name or value, or break the format inside one (spec 1.2). A NUL
# is valid UTF-8 but would go into the index files and outputs, line-oriented text that it
# breaks (and DSSTNE's C strings end at one): stopping at it costs the scan nothing.
_ENDS_TOKEN = np.zeros(256, dtype=np.bool_)
_ENDS_TOKEN[[_NUL, _TAB, _LF, _CR, _COLON, _COMMA]] = True
_MAX_FAST_DIGITS = 18  # an int64 holds any 18-digit number, and float() of it rounds once


@njit(cache=True)
def _line_error(buf, ls, status, at):
    """Report ``status`` at ``at``, unless the line holds a CR: that outranks every other fault.

    A CRLF file has a CR on every line; naming it is what helps, whatever else the line has.
    """
    i = ls
    while i < len(buf) and buf[i] != _LF:
        if buf[i] == _CR:
            return CARRIAGE_RETURN, i
        i += 1
    return status, at


@njit(cache=True, nogil=True)
def scan_records(
    buf,
    pos,
    slots,
    key_hash,
    key_start,
    key_len,
    key_value,
    arena,
    state,
    mode,
    strict,
    label_start,
    label_end,
    row_end,
    tok_index,
    tok_value,
    pending,
    counts,
):
    """Scan the complete lines of ``buf`` from byte ``pos``.

    Writes, per line, the label's byte span and the running entry count (``row_end``), and per
    kept feature its index and value (0.0 without one). A name the table lacks is, by
    ``mode``: LOOKUP, dropped (or, with ``strict``, reported); UPDATE, added with index =
    number of keys (DSSTNE's ``len(map)`` rule, spec 1.3); DEFER, kept with index -1 and listed
    in ``pending`` as (entry, name start, name end), the table left alone. ``counts``
    accumulates [lines, entries, dropped features, lines with a dropped feature, pending].

    Returns (status, byte position): for OK the end of ``buf``; for NEED_ROOM the start of the
    line whose next new name did not fit in the table (its earlier new names are in it: the
    caller grows the table and scans again from that line); for an error the offending byte.
    Of a line with several faults the first is reported, except that a CR anywhere outranks
    the rest.

    The bytes are walked once: a feature's name is hashed as it is read, and a value that is
    a plain integer of up to 18 digits, as timestamps and ratings are, is parsed as it is read.
    Only other values are read again, by ``_parse_value`` (and a name found in the table is
    compared with its copy there).
    """
    n = len(buf)
    while pos < n:
        ls = pos
        i = ls
        while i < n:
            c = buf[i]
            if c == _TAB or c == _LF or c == _CR or c == _NUL:
                break
            i += 1
        if i == n or buf[i] == _LF:
            return (BLANK_LINE, ls) if i == ls else (NO_TAB, ls)
        if buf[i] == _CR:
            return CARRIAGE_RETURN, i
        if buf[i] == _NUL:  # in the sample's name (see _ENDS_TOKEN)
            return _line_error(buf, ls, NUL_BYTE, i)
        if i == ls:
            return _line_error(buf, ls, EMPTY_LABEL, ls)
        tab = i
        line = counts[0]
        entries = counts[1]
        dropped_here = False
        p = tab + 1
        while p < n and buf[p] != _LF:
            ts = p
            h = _FNV_OFFSET
            while p < n and not _ENDS_TOKEN[buf[p]]:
                h = (h ^ np.uint64(buf[p])) * _FNV_PRIME
                p += 1
            name_end = p
            value = 0.0
            reread = False  # a value that is not a plain integer: _parse_value reads it
            if p < n and buf[p] == _COMMA:
                vs = p + 1
                p = vs
                mant = np.int64(0)
                while p < n and p - vs < _MAX_FAST_DIGITS and 48 <= buf[p] <= 57:
                    mant = mant * 10 + (buf[p] - 48)
                    p += 1
                if p == n or buf[p] == _COLON or buf[p] == _LF:
                    value = float(mant)  # what _parse_value gives an unsigned integer
                else:
                    reread = True
                    while p < n and not _ENDS_TOKEN[buf[p]]:
                        p += 1
                    if p < n and buf[p] == _COMMA:
                        return _line_error(buf, ls, EXTRA_FIELD, p)
            if p < n and buf[p] == _TAB:
                return _line_error(buf, ls, SECOND_TAB, p)
            if p < n and buf[p] == _CR:
                return CARRIAGE_RETURN, p
            if p < n and buf[p] == _NUL:  # in a feature's name or value
                return _line_error(buf, ls, NUL_BYTE, p)
            if name_end == ts:
                return _line_error(buf, ls, EMPTY_FEATURE, ts)
            if reread:
                ok, value = _parse_value(buf, vs, p)
                if not ok:
                    return _line_error(buf, ls, BAD_VALUE, vs)
            k = table_find(slots, key_hash, key_start, key_len, arena, buf, ts, name_end, h)
            if k < 0:
                if mode == UPDATE:
                    if not _has_room(slots, key_hash, arena, state, name_end - ts):
                        return NEED_ROOM, ls  # the caller grows the table; the line restarts
                    k = table_insert(slots, key_hash, key_start, key_len, key_value, arena, state,
                                     buf, ts, name_end, h, -k - 1, state[0])
                elif mode == DEFER:
                    w = counts[4]
                    pending[w, 0] = entries
                    pending[w, 1] = ts
                    pending[w, 2] = name_end
                    counts[4] = w + 1
                elif strict:
                    return _line_error(buf, ls, UNKNOWN_FEATURE, ts)
            if k >= 0 or mode == DEFER:
                tok_index[entries] = key_value[k] if k >= 0 else -1
                tok_value[entries] = value
                entries += 1
            else:
                counts[2] += 1
                dropped_here = True
            if p == n or buf[p] == _LF:
                break
            p += 1  # past the ':'
            if p == n or buf[p] == _LF:
                return _line_error(buf, ls, TRAILING_COLON, p - 1)
        label_start[line] = ls
        label_end[line] = tab
        row_end[line] = entries
        counts[0] = line + 1
        counts[1] = entries
        if dropped_here:
            counts[3] += 1
        pos = p + 1
    return OK, n


@njit(cache=True)
def resolve_pending(slots, key_hash, key_start, key_len, key_value, arena, state, buf, pending,
                    first, count, tok_index):
    """Number the names DEFER listed, ``pending[first:count]``, in order: each takes its index
    from the table, or enters it with index = number of keys. Returns ``count``, or the first
    position that did not fit in the table (the caller grows it and goes on from there).
    """
    for i in range(first, count):
        s, e = pending[i, 1], pending[i, 2]
        h = _hash(buf, s, e)
        k = table_find(slots, key_hash, key_start, key_len, arena, buf, s, e, h)
        if k < 0:
            if not _has_room(slots, key_hash, arena, state, e - s):
                return i
            k = table_insert(slots, key_hash, key_start, key_len, key_value, arena, state, buf,
                             s, e, h, -k - 1, state[0])
        tok_index[pending[i, 0]] = key_value[k]
    return count
