"""Index files (spec 1.3): ``label<TAB>index`` lines mapping names to integer ids.

``generate-netcdf`` reads and writes them for features (``-f``) and samples (``-s``);
``predict`` reads them to map its input. ``LabelTable`` keeps the mapping in NumPy arrays
(an open-addressing hash table over UTF-8 bytes, see ``textscan``) so that the numba text
scanner can look names up without touching Python objects.
"""

from __future__ import annotations

import hashlib
from collections.abc import Iterator

import numpy as np

from destiny.errors import DataFormatError, open_files_failure
from destiny.io import textscan
from destiny.limits import MAX_INDEX
from destiny.wording import digits_abridged


class LabelTable:
    """A growable mapping from labels (str) to non-negative integer indices.

    New labels get ``index = len(table)`` (DSSTNE's rule, spec 1.3), which is why a table
    loaded from a file whose indices are not exactly 0..n-1 cannot safely grow: see
    ``check_appendable``.
    """

    def __init__(self, capacity: int = 1024):
        cap = 1 << max(4, int(2 * capacity - 1).bit_length())
        self.slots = np.full(cap, -1, dtype=np.int64)
        keys = cap // 2
        self.key_hash = np.zeros(keys, dtype=np.uint64)
        self.key_start = np.zeros(keys, dtype=np.int64)
        self.key_len = np.zeros(keys, dtype=np.int64)
        self.key_value = np.zeros(keys, dtype=np.int64)
        self.arena = np.zeros(max(1024, 16 * keys), dtype=np.uint8)
        self.state = np.zeros(2, dtype=np.int64)  # [number of keys, arena bytes used]
        self.loaded = 0  # how many entries came from an index file

    def __len__(self) -> int:
        return int(self.state[0])

    def reserve(self, keys: int, arena_bytes: int) -> None:
        """Make room for ``keys`` more keys of ``arena_bytes`` more bytes, at load <= 1/2."""
        n, used = int(self.state[0]), int(self.state[1])
        if n + keys > len(self.key_hash):
            size = max(2 * len(self.key_hash), n + keys)
            for name in ("key_hash", "key_start", "key_len", "key_value"):
                old = getattr(self, name)
                new = np.zeros(size, dtype=old.dtype)
                new[:n] = old[:n]
                setattr(self, name, new)
        if 2 * (n + keys) > len(self.slots):
            cap = 1 << int(2 * (n + keys) - 1).bit_length()
            self.slots = np.full(max(cap, 2 * len(self.slots)), -1, dtype=np.int64)
            textscan.table_rehash(self.slots, self.key_hash, n)
        if used + arena_bytes > len(self.arena):
            new = np.zeros(max(2 * len(self.arena), used + arena_bytes), dtype=np.uint8)
            new[:used] = self.arena[:used]
            self.arena = new

    def scan_args(self):
        """The table's arrays in the order the textscan kernels take them."""
        return (self.slots, self.key_hash, self.key_start, self.key_len, self.key_value,
                self.arena, self.state)

    def add_labels(self, labels: list[str], values: np.ndarray) -> int:
        """Insert ``labels`` with ``values``; return -1, or the position of a label already
        present."""
        encoded = [s.encode("utf-8") for s in labels]
        offsets = np.zeros(len(encoded) + 1, dtype=np.int64)
        np.cumsum([len(b) for b in encoded], out=offsets[1:])
        buf = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        self.reserve(len(encoded), len(buf))
        return int(textscan.table_insert_labels(*self.scan_args(), buf, offsets,
                                                np.asarray(values, dtype=np.int64)))

    def labels(self) -> list[str]:
        """All labels, in insertion order."""
        n = len(self)
        arena = self.arena.tobytes()
        start, length = self.key_start[:n].tolist(), self.key_len[:n].tolist()
        return [arena[s:s + m].decode("utf-8") for s, m in zip(start, length, strict=True)]

    def values(self) -> np.ndarray:
        """All indices, in insertion order."""
        return self.key_value[: len(self)].copy()

    def to_dict(self) -> dict[str, int]:
        return dict(zip(self.labels(), self.values().tolist(), strict=True))


def read_index(path) -> tuple[list[str], np.ndarray]:
    """Read an index file; return its labels and indices in file order.

    Every line must be ``label<TAB>index`` with a non-empty label and a non-negative integer
    index (a trailing TAB is tolerated, as in DSSTNE). Labels and indices must be unique:
    two labels on one index would merge two features silently.
    """
    try:
        with open(path, "rb") as f:
            data = f.read()
    except OSError as e:
        raise (open_files_failure(e, path)
               or DataFormatError(path, f"cannot read the index file ({e.strerror}).")) from None
    textscan.check_text_start(path, data)
    try:
        text = data.decode("utf-8")
    except UnicodeDecodeError as e:
        line = data.count(b"\n", 0, e.start) + 1
        raise DataFormatError(
            path, f"the bytes {data[e.start:e.end]!r} are not UTF-8. Index files are written by "
            "generate-netcdf as UTF-8 text; regenerate it with -c.", line=line) from None
    # A NUL is valid UTF-8, so the decoder lets it by; text.read_records refuses one in a
    # label, so an index holding one was not written by generate-netcdf. (bytes.find is a
    # memchr: a small fraction of the parse.)
    nul = data.find(b"\0")
    if nul >= 0:
        start = data.rfind(b"\n", 0, nul) + 1
        end = data.find(b"\n", nul)
        line = data[start:len(data) if end < 0 else end].decode("utf-8")
        raise DataFormatError(
            path, f"found {_show(line)}, which holds a NUL byte (\\x00): no label can hold one "
            "(it breaks the tools that read text line by line); this may not be an index file, "
            "or it was edited by hand. Regenerate it with -c.",
            line=data.count(b"\n", 0, start) + 1,
            column=len(data[start:nul].decode("utf-8")) + 1)
    if (bom := textscan.bom_line(data)) >= 0:  # (its start was checked: a file joined on)
        from destiny.io.text import bom_line_error  # (text imports this module)

        raise bom_line_error(path, data, bom, 1, name="label")
    labels, values = _parse_clean(data, text) if "\r" not in text else (None, None)
    if labels is not None and len(values) and values.max() > MAX_INDEX:
        labels = None  # the checked parse names the line
    if labels is None:
        lines = text.split("\n")
        if lines and lines[-1] == "":
            lines.pop()
        labels, values = _parse_checked(path, lines)
    ordered = np.sort(values)  # (np.unique is several times slower than a sort here)
    if len(values) > 1 and (ordered[1:] == ordered[:-1]).any():
        first = {}
        for pos, value in enumerate(values.tolist()):
            if value in first:
                raise DataFormatError(
                    path, f"index {value} is given to both {labels[first[value]]!r} (line "
                    f"{first[value] + 1}) and {labels[pos]!r}; two labels on one index would "
                    "merge them. Regenerate the index with -c.", line=pos + 1)
            first[value] = pos
    return labels, values


def _parse_clean(data: bytes, text: str):
    """The fast path: (labels, indices) when every line is ``label<TAB>digits``, else
    (None, None). One TAB in each line is checked on the bytes, so that the text can be split
    at every TAB and LF at once (a list per line took most of the time of a large index)."""
    if not text:
        return [], np.zeros(0, dtype=np.int64)
    final_newline = text.endswith("\n")
    body = text[:-1] if final_newline else text
    if not body:
        return None, None  # one blank line
    buf = np.frombuffer(data, dtype=np.uint8)[:len(data) - final_newline]
    ends = np.append(np.flatnonzero(buf == 10), len(buf))
    starts = np.concatenate(([0], ends[:-1] + 1))
    tabs = np.flatnonzero(buf == 9)
    if len(tabs) != len(ends) or not ((starts <= tabs) & (tabs < ends)).all():
        return None, None  # a trailing TAB, or a malformed line: the checked path decides
    fields = body.replace("\n", "\t").split("\t")
    labels, numbers = fields[0::2], fields[1::2]
    digits = "".join(numbers)
    if "" in labels or "" in numbers or not (digits.isascii() and digits.isdigit()):
        return None, None
    if len(set(labels)) != len(labels):
        return None, None
    try:
        return labels, np.array(numbers, dtype=np.int64)
    except (OverflowError, ValueError):  # beyond int64 (ValueError: Python's int() refuses
        return None, None  # 4,300 digits or more): the checked parse names the line


def _parse_checked(path, lines: list[str]):
    """Line by line, raising a DataFormatError that names the first bad line."""
    labels: list[str] = []
    indices: list[int] = []
    seen_label: dict[str, int] = {}
    expected = ("expected 'label<TAB>index' lines, as written by generate-netcdf; this may not "
                "be an index file, or it was edited by hand. Regenerate it with -c")
    for number, line in enumerate(lines, 1):
        fields = line.split("\t")
        if len(fields) == 3 and fields[2] == "":
            fields.pop()
        if "\r" in line:
            raise DataFormatError(path, f"the line ends with a carriage return (Windows line "
                                  f"ends); {expected}, or convert it with dos2unix.", line=number)
        if (len(fields) != 2 or fields[0] == "" or not fields[1].isascii()
                or not fields[1].isdigit()):
            raise DataFormatError(path, f"found {_show(line)}; {expected}.", line=number)
        label, digits = fields[0], fields[1]
        # (int() refuses 4,300 digits or more; 20 are beyond MAX_INDEX already)
        significant = digits.lstrip("0")
        index = int(significant or "0") if len(significant) <= 20 else MAX_INDEX + 1
        if index > MAX_INDEX:
            if len(digits) > 20:
                digits = digits_abridged(digits)
            raise DataFormatError(path, f"the index {digits} of {label!r} is too large: "
                                  f"indices are 32-bit numbers (at most {MAX_INDEX:,}), and a "
                                  "larger one would wrap around onto another feature. Renumber "
                                  "the index to 0..n-1, or rebuild it with -c.", line=number)
        if label in seen_label:
            raise DataFormatError(path, f"the label {label!r} appears again (first on line "
                                  f"{seen_label[label]}); each label must appear once. "
                                  "Regenerate the index with -c.", line=number)
        seen_label[label] = number
        labels.append(label)
        indices.append(index)
    return labels, np.array(indices, dtype=np.int64)


def load_table(path) -> LabelTable:
    """Read an index file into a ``LabelTable``."""
    return table_of(*read_index(path))


def table_of(labels: list[str], values: np.ndarray) -> LabelTable:
    """The ``LabelTable`` of an index file's labels and indices (``read_index``'s answer)."""
    table = LabelTable(capacity=len(labels) + 1024)
    table.add_labels(labels, values)
    table.loaded = len(labels)
    return table


def check_appendable(path, labels: list[str], values: np.ndarray, loaded: int, what: str,
                     remedy: str = "Renumber the index file to 0..n-1.") -> None:
    """Refuse an index grown past its ``loaded`` entries if a new index collides with a
    loaded one; ``labels`` and ``values`` are the loaded entries followed by the new ones.

    DSSTNE gives a new label ``len(map)`` (spec 1.3, quirk 10.7); when the loaded index is not
    0..n-1 that number can already belong to another label, which would silently merge them.
    One check for the feature index (-m, -c) and the sample index, ``what`` naming the kind.
    """
    values = np.asarray(values)
    old, new = values[:loaded], values[loaded:]
    if len(new) == 0 or old.max(initial=-1) < loaded:  # (0..n-1, as written: no clash)
        return
    clash = np.intersect1d(old, new)
    if len(clash):
        v = int(clash[0])  # (the smallest: that of the first new entry to collide)
        a = labels[int(np.flatnonzero(old == v)[0])]
        b = labels[loaded + int(np.flatnonzero(new == v)[0])]
        raise DataFormatError(
            path, f"its indices are not 0..{loaded - 1}, so the new {what} {b!r} would get "
            f"index {v}, which already belongs to {a!r} (DSSTNE numbers new entries by the size "
            f"of the index). {remedy}")


def write_index(path, labels: list[str], values: np.ndarray) -> None:
    """Write ``label<TAB>index`` lines sorted by index (DSSTNE's order is unspecified)."""
    with open(path, "w", encoding="utf-8", newline="\n") as f:
        f.writelines(_lines(labels, values))


def _lines(labels: list[str], values: np.ndarray, below: int | None = None) -> Iterator[str]:
    """The index file's ``label<TAB>index`` lines, sorted by index: of every entry, or of
    those numbered below ``below`` (made one at a time: a sample index may hold millions)."""
    values = np.asarray(values)
    order = np.argsort(values, kind="stable")
    if below is not None:
        order = order[values[order] < below]
    vals = values.tolist()
    return (f"{labels[i]}\t{vals[i]}\n" for i in order.tolist())


def _show(line: str, limit: int = 60) -> str:
    shown = line if len(line) <= limit else line[:limit] + "..."
    return repr(shown)


def rows_digest(labels: list[str]) -> str:
    """A digest of a dataset's sample names in row order. Two datasets line up row for row
    (an example's input and its targets) only if they hold the same samples in the same
    order: generate-netcdf records it, and train compares those of its datasets."""
    return hashlib.sha256("\n".join(labels).encode("utf-8")).hexdigest()[:32]


def index_digest(labels: list[str], values: np.ndarray, below: int) -> str:
    """A digest of an index's entries numbered below ``below``: of the lines ``write_index``
    writes for them.

    A dataset written by generate-netcdf records its feature index's size n and the digest of
    its entries below n (all of them, for an index numbered 0..n-1), the network trained on it
    records both, and predict compares them with the indexes it is given: an index rebuilt
    with -c numbers the items anew, and predict would otherwise label the network's units with
    the wrong items without a word. Growth (-m) numbers new entries from the index's size up,
    so an index grown since still has the same entries below n.
    """
    text = "".join(_lines(labels, values, below))
    return hashlib.sha256(text.encode("utf-8")).hexdigest()[:32]
