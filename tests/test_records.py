"""The record writer (``destiny.io.records``) against Python's printf formatting, byte for byte."""

from __future__ import annotations

import numpy as np
import pytest

from destiny.io import records
from destiny.io.records import EncodedLabels, fixed_point, format_records, python_records

LABELS = np.array(["i0", "item-1", "é2", "日本3", "4", None], dtype=object)


def batch(rng, rows, k, scores):
    items = rng.integers(-1, len(LABELS), size=(rows, k)).astype(np.int32)
    return [f"user{r}" if r % 3 else f"ü{r}" for r in range(rows)], items, scores


def kernel_only(monkeypatch):
    """Make a fall-back to Python's formatting fail the test: the kernel must write these."""
    def refuse(*args, **kwargs):
        raise AssertionError("fell back to Python's formatting")
    monkeypatch.setattr(records, "python_records", refuse)


def awkward_scores(rng, shape):
    """Scores of every magnitude and sign, exact ties at 3 and 1 decimals, zeros of both signs."""
    x = rng.normal(size=shape) * 10.0 ** rng.integers(-6, 7, size=shape)
    flat = x.reshape(-1)
    flat[::7] = rng.integers(-4000, 4000, size=flat[::7].shape) / 8000  # k/8000: ties at P = 3
    flat[1::11] = rng.integers(-40, 40, size=flat[1::11].shape) / 20 + 0.025  # ties at P = 1
    flat[2::13] = 0.0
    flat[3::13] = -0.0
    flat[4::17] = -rng.random(size=flat[4::17].shape) * 1e-4  # rounds to -0.000
    return x.astype(np.float32)


@pytest.mark.parametrize("fmt", ["4.3f", "6.5f", ".0f", ".1f", "10.2f", "1.12f", "30.7f", "f"])
def test_the_kernel_writes_what_python_writes(fmt, monkeypatch):
    rng = np.random.default_rng(len(fmt))
    scores = awkward_scores(rng, (50, 40))
    if fmt == "1.12f":  # below 2**53 / 10**12, as the kernel needs
        scores /= np.float32(1e4)
    labels, items, scores = batch(rng, 50, 40, scores)
    expected = python_records(labels, items, scores, LABELS, fmt)
    if fmt == "f":  # '%f' is '.6f': not the kernel's pattern, so Python writes it
        assert fixed_point(fmt) is None
    else:
        kernel_only(monkeypatch)
    assert format_records(labels, items, scores, EncodedLabels(LABELS), fmt) == expected


def test_dsstnes_format_on_scores_in_zero_one(monkeypatch):
    """The usual case, spelled out: Sigmoid scores with DSSTNE's 4.3f."""
    kernel_only(monkeypatch)
    scores = np.array([[0.9825, 0.0625, 0.5, 1e-9], [0.99951, 0.0005, 0.0, 0.25]], np.float32)
    items = np.array([[0, 3, -1, 2], [1, -1, -1, -1]], np.int32)
    text = format_records(["a", "b"], items, scores, EncodedLabels(LABELS))
    assert text == ("a\ti0,%4.3f:日本3,0.062:é2,0.000:\n" % np.float32(0.9825)
                    + "b\titem-1,%4.3f:\n" % np.float32(0.99951))
    assert text == python_records(["a", "b"], items, scores, LABELS)


# (-1e16: -1e19 once scaled, beyond int64 though within uint64)
@pytest.mark.parametrize("bad", [np.nan, np.inf, -np.inf, 1e20, -1e16])
def test_scores_the_kernel_cannot_write_exactly_take_python(bad):
    rng = np.random.default_rng(3)
    labels, items, scores = batch(rng, 4, 5, rng.random((4, 5)).astype(np.float32))
    items[2, 3], scores[2, 3] = 1, bad
    assert format_records(labels, items, scores, EncodedLabels(LABELS)) == python_records(
        labels, items, scores, LABELS)


@pytest.mark.parametrize("fmt", ["4.3f", "1.12f"])
@pytest.mark.parametrize("longest", ["labels", "scores"])
def test_the_longest_labels_and_numbers_fit_the_kernels_buffer(fmt, longest, monkeypatch):
    """Every record at its longest: item labels of 300 bytes, or, with one-byte labels,
    negative scores just below what the kernel writes (2**53 / 10**P)."""
    kernel_only(monkeypatch)
    decimals = int(fmt.split(".")[1][:-1])
    rng = np.random.default_rng(6)
    if longest == "labels":
        item_labels = np.array(["x" * 300, "y" * 300], dtype=object)
        scores = rng.random((20, 30)).astype(np.float32)
    else:
        item_labels = np.array(["4", "5"], dtype=object)
        scores = np.full((20, 30), -np.float32(2.0 ** 53 / 10 ** decimals * 0.99))
    items = rng.integers(0, 2, size=(20, 30)).astype(np.int32)
    labels = [f"u{r}" for r in range(20)]
    text = format_records(labels, items, scores, EncodedLabels(item_labels), fmt)
    assert text == python_records(labels, items, scores, item_labels, fmt)


@pytest.mark.parametrize("fmt", ["+.3f", "-8.3f", "08.3f", " .3f", ".13f", "e", "8.2e", "g"])
def test_other_conversions_take_python(fmt):
    assert fixed_point(fmt) is None
    rng = np.random.default_rng(4)
    labels, items, scores = batch(rng, 3, 4, awkward_scores(rng, (3, 4)))
    assert format_records(labels, items, scores, EncodedLabels(LABELS), fmt) == python_records(
        labels, items, scores, LABELS, fmt)


def test_float64_scores_and_empty_batches():
    rng = np.random.default_rng(5)
    labels, items, scores = batch(rng, 3, 4, rng.random((3, 4)))
    items[0, 0], scores[0, 0] = 0, 0.0005  # (just above the tie: '0.001'; x 1000 is 0.5)
    assert format_records(labels, items, scores, EncodedLabels(LABELS)) == python_records(
        labels, items, scores, LABELS)
    assert "i0,0.001:" in python_records(labels, items, scores, LABELS)
    assert format_records([], np.zeros((0, 4), np.int32), np.zeros((0, 4), np.float32),
                          EncodedLabels(LABELS)) == ""
    none = np.full((2, 3), -1, np.int32)
    assert format_records(["a", "b"], none, np.zeros((2, 3), np.float32),
                          EncodedLabels(LABELS)) == "a\t\nb\t\n"


def test_an_item_without_a_label_is_an_error_not_a_stray_read():
    items = np.array([[0, len(LABELS)]], np.int32)
    with pytest.raises(IndexError):
        format_records(["a"], items, np.ones((1, 2), np.float32), EncodedLabels(LABELS))


def test_labels_items_and_scores_must_agree():
    with pytest.raises(ValueError, match="one label and one row"):
        format_records(["a"], np.zeros((2, 3), np.int32), np.zeros((2, 3), np.float32),
                       EncodedLabels(LABELS))
