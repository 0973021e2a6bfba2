"""``destiny.wording``: counts in messages."""

from destiny.wording import counted


def test_counted():
    assert counted(1, "sample") == "1 sample"
    assert counted(0, "sample") == "0 samples"
    assert counted(12345, "sample") == "12,345 samples"
    assert counted(1, "entry", "entries") == "1 entry"
    assert counted(2, "entry", "entries") == "2 entries"
