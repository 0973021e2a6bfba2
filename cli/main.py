"""The ``destiny`` group command: every program as a subcommand."""

from __future__ import annotations

import click

from destiny import __version__
from destiny.cli.common import run_command
from destiny.cli.options import CONTEXT
from destiny.cli.evaluate import evaluate
from destiny.cli.generate_netcdf import generate_netcdf
from destiny.cli.predict import predict
from destiny.cli.train import train


@click.group(context_settings=CONTEXT)
@click.version_option(__version__, prog_name="destiny")
def cli():
    """Destiny: train and serve sparse neural networks for recommendations.

    The same programs as DSSTNE, with the same flags and files; each is also installed as a
    command of its own (generate-netcdf).
    """


cli.add_command(generate_netcdf)
cli.add_command(predict)
cli.add_command(train)
cli.add_command(evaluate)


def main():
    return run_command(cli, "destiny")
