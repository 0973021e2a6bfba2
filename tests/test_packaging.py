"""pyproject.toml lists every package, so a wheel (not only the editable install) is complete."""

from __future__ import annotations

import pathlib
import sys

import pytest

# tomllib is Python 3.11's; on 3.10 pytest itself depends on tomli, the same parser.
tomllib = pytest.importorskip("tomllib" if sys.version_info >= (3, 11) else "tomli")
ROOT = pathlib.Path(__file__).resolve().parent.parent


def test_every_package_is_listed():
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["setuptools"]
    on_disk = {"destiny.cli"} | {
        ".".join(p.parent.relative_to(ROOT).parts)
        for p in (ROOT / "destiny").rglob("__init__.py")}
    assert set(config["packages"]) == on_disk
    assert config["package-dir"]["destiny.cli"] == "cli"


def test_each_console_script_loads_the_command_it_is_named_for(monkeypatch):
    """The console scripts go through cli/entry.py (Ctrl-C's default action while the command
    loads); each must load the module of its own command, whose ``main`` it runs."""
    import importlib

    from destiny.cli import entry

    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    loaded = []
    monkeypatch.setattr(entry, "_main", loaded.append)
    for name, target in scripts.items():
        module, function = target.split(":")
        getattr(importlib.import_module(module), function)()
        command = "main" if name == "destiny" else name.replace("-", "_")
        assert loaded[-1] == f"destiny.cli.{command}"
        assert callable(importlib.import_module(loaded[-1]).main)


def test_scripts_import_the_installed_package():
    """No script puts the repository on sys.path: there its destiny/ has no destiny.cli (cli/
    installs as destiny.cli), so such a script failed on a python without the package, and with
    it the line only hid which copy was imported. Scripts beside each other may still import
    one another (sys.path.insert(0, HERE))."""
    import re

    root_on_path = re.compile(r"sys\.path\.insert\([^)]*(?:\"\.\.\"|ROOT)")
    found = [f"{p.name}: {line.strip()}" for p in sorted((ROOT / "scripts").glob("*.py"))
             for line in p.read_text().splitlines() if root_on_path.search(line)]
    assert found == []
