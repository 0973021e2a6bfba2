"""The README and docs/ point at each other: every relative link names a file that exists and,
where it has one, an anchor that one of that file's headings makes. The README gives each
command in short and links to docs/commands.md for the rest, so a renamed heading there would
otherwise leave the README's readers at the top of a long page."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parent.parent
DOCS = [ROOT / "README.md", *sorted((ROOT / "docs").glob("*.md"))]
LINK = re.compile(r"\]\(([^)\s]+)\)")


def prose(text: str) -> str:
    """``text`` without its fenced code blocks (a shell comment there is no heading)."""
    return re.sub(r"^```.*?^```", "", text, flags=re.M | re.S)


def anchors(path: Path) -> set[str]:
    """The anchors GitHub makes of a Markdown file's headings: lower case, punctuation but
    hyphens and underscores dropped, spaces made hyphens."""
    found = set()
    for line in prose(path.read_text()).splitlines():
        if m := re.match(r"#{1,6} (.*)", line):
            slug = re.sub(r"[^\w\- ]", "", m.group(1).strip().lower()).replace(" ", "-")
            found.add(slug)
    return found


def test_anchors_are_githubs():
    assert anchors(ROOT / "docs" / "commands.md") >= {
        "generate-netcdf-dsstne-text-to-a-dataset-netcdf-file", "predict-top-k-recommendations",
        "evaluate-how-good-are-the-recommendations"}


@pytest.mark.parametrize("doc", DOCS, ids=lambda p: str(p.relative_to(ROOT)))
def test_relative_links_resolve(doc):
    for target in LINK.findall(re.sub(r"`[^`\n]*`", "", prose(doc.read_text()))):
        if re.match(r"[a-z]+:", target):  # (https:, mailto:)
            continue
        path, _, anchor = target.partition("#")
        linked = (doc.parent / path).resolve() if path else doc
        assert linked.is_file(), (doc.name, target)
        if anchor:
            assert anchor in anchors(linked), (doc.name, target)
