"""The command line as a whole: every command is installed, documented and has an example."""

from __future__ import annotations

import pathlib
import shutil
import subprocess
import sys

import pytest
from click.testing import CliRunner

from destiny.cli.main import cli

ROOT = pathlib.Path(__file__).resolve().parent.parent
COMMANDS = sorted(cli.commands)


def test_group_lists_the_commands():
    result = CliRunner().invoke(cli, ["--help"])
    assert result.exit_code == 0
    for name in COMMANDS:
        assert name in result.output
    assert "generate-netcdf" in COMMANDS


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_has_help_with_an_example(name):
    result = CliRunner().invoke(cli, [name, "-h"])
    assert result.exit_code == 0
    assert "Example:" in result.output


@pytest.mark.parametrize("name", COMMANDS)
def test_every_command_is_in_the_readme(name):
    readme = (ROOT / "README.md").read_text()
    assert f"### `{name}`" in readme


@pytest.mark.parametrize("name", COMMANDS)
def test_console_script_installed(name):
    exe = shutil.which(name, path=str(pathlib.Path(sys.executable).parent))
    assert exe, f"{name} is not installed next to {sys.executable}"
    result = subprocess.run([exe, "--help"], capture_output=True, text=True)
    assert result.returncode == 0 and "Usage:" in result.stdout


def test_version():
    result = CliRunner().invoke(cli, ["--version"])
    assert result.exit_code == 0 and "destiny" in result.output
