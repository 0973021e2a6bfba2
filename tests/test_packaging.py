"""pyproject.toml lists every package, so a wheel (not only the editable install) is complete."""

from __future__ import annotations

import pathlib

import pytest

tomllib = pytest.importorskip("tomllib")
ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {"destiny.cli"} | {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "destiny").rglob("__init__.py")}
    assert set(config["packages"]) == on_disk
    assert config["package-dir"]["destiny.cli"] == "cli"
