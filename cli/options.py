"""The commands' flags: their settings, the number types they take, and the checks of the
paths they name (click callbacks), shared by the commands and the scripts."""

from __future__ import annotations

import math
import struct

import click

CONTEXT = {"help_option_names": ["-h", "--help"], "max_content_width": 100}


class FiniteRange(click.FloatRange):
    """A ``click.FloatRange`` that also refuses NaN and infinities (which pass its bounds)."""

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        if not math.isfinite(number):
            self.fail(f"{value!r} is not a finite number.", param, ctx)
        return number

    def _describe_range(self) -> str:
        # (click's shows an unbounded range as '[x<=None]' in --help)
        if self.min is None and self.max is None:
            return ""
        return super()._describe_range()


class Float32Range(FiniteRange):
    """A ``FiniteRange`` for a setting the training computes with in float32 (the optimizer's
    alpha, lambda, mu): it must survive the cast, or it would become another setting than the
    one recorded. 1e39 became infinity, 1e-320 became 0 (no learning, without a word) and
    -mu 0.9999999999 became 1.0 (which Adam's bias correction divides by 1 - 1)."""

    _TINY = 2.0 ** -126  # float32's smallest normal number: below it, 0 or lost precision

    def convert(self, value, param, ctx):
        number = super().convert(value, param, ctx)
        try:
            single = struct.unpack("f", struct.pack("f", number))[0]
        except OverflowError:  # (Pythons before 3.12; later ones give infinity)
            single = math.inf
        if math.isinf(single):
            self.fail(f"{value!r} is beyond float32's range (3.4e38), the precision training "
                      "computes in.", param, ctx)
        if number != 0.0 and abs(single) < self._TINY:
            self.fail(f"{value!r} is below float32's smallest normal number (1.2e-38), the "
                      "precision training computes in: it would become 0 or lose its "
                      "precision.", param, ctx)
        if (self.min_open and single == self.min) or (self.max_open and single == self.max):
            self.fail(f"{value!r} becomes {single!r} in float32, the precision training "
                      f"computes in, which is outside {self._describe_range()}.", param, ctx)
        return number


# A seed: NumPy's generators take no negative seed, and the network file stores it as a 64-bit
# integer (a larger one failed only as the trained network was written).
SEED = click.IntRange(0, 2**63 - 1)


# train and predict: the GPU's dense products in TF32 (destiny.kernels.get_backend's tf32).
tf32_option = click.option(
    "--tf32", is_flag=True,
    help="Allow the GPU to compute the dense products in TF32 on its tensor cores (as "
         "PyTorch's allow_tf32): several times faster products, inputs rounded to 10 bits of "
         "mantissa. Off: float32, as DSSTNE. No effect on the cpu.")


def stdin_for_dash(ctx, param, value):
    """A click callback: '-' for a text input is standard input, read as /dev/stdin (the
    readers need a path: directories are listed, messages name the file)."""
    _refuse_empty(ctx, param, value)
    return "/dev/stdin" if value == "-" else value


def _refuse_empty(ctx, param, value) -> None:
    """An empty path (an unset variable in a script: -i "$DATA") is refused naming the flag,
    where a reader said "Error: : ... does not exist" (an output's check refused it too, but
    as a failure, exit status 1, once the other flags were read)."""
    if value == "":
        raise click.BadParameter("is an empty path; give the file's path (is a variable in "
                                 "the command unset?).", ctx, param)


def no_stdin(what: str, why: str):
    """A click callback for a file that must be named by its path: '-' (which the flags that
    read a text input take as standard input, ``stdin_for_dash``) is refused at once as a
    usage error saying ``why`` the command needs the file itself, where it was looked for as
    a file named '-' ("No such file or directory")."""
    return _refusing_dash(f"standard input cannot be read for {what}: {why}. Give the file's "
                          "path.")


def path_given(ctx, param, value):
    """A click callback for an output path: an empty one is a usage error, as for inputs."""
    _refuse_empty(ctx, param, value)
    return value


def no_stdout(what: str):
    """A click callback for a NetCDF file a command writes: '-' is refused at once as a usage
    error, as ``no_stdin`` refuses it for the files read, where the output check refused it
    with exit status 1 ("-: is standard output, not a file") once the other flags were read."""
    return _refusing_dash(f"standard output cannot take {what}: it is written to a temporary "
                          "file and renamed into place. Give the file's path.")


def _refusing_dash(message: str):
    """The callback of ``no_stdin`` and ``no_stdout``: an empty path, and '-' with
    ``message``, are usage errors."""

    def callback(ctx, param, value):
        _refuse_empty(ctx, param, value)
        if value == "-":
            raise click.BadParameter(message, ctx, param)
        return value

    return callback
