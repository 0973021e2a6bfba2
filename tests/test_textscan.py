"""The numba text scanner against a plain-Python reference parser, on random records."""

from __future__ import annotations

import numpy as np
import pytest

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
                                  "123456789012345678901234", "0.000000000000000000000123"])
def test_parse_value_accepts_decimal_numbers(text):
    ok, value = parse_value(text)
    assert ok
    assert np.float32(value) == np.float32(float(text))


@pytest.mark.parametrize("text", ["-", "+", ".", "e3", "1e", "1e+", "12x", "x12", "nan", "inf",
                                  "1_0", " 1", "1 ", "0x10", "1.2.3", "--1", "1e400", "3.5e38"])
def test_parse_value_rejects_the_rest(text):
    assert parse_value(text) == (False, 0.0)


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


def test_label_table_reports_duplicate_labels():
    table = LabelTable()
    assert table.add_labels(["x", "y", "x"], np.arange(3)) == 2
