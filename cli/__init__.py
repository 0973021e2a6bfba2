"""Destiny's command line (installed as ``destiny.cli``): thin click commands over ``destiny``.

Each command parses DSSTNE's flags, calls the library, and turns a ``DestinyError`` into
exit code 1 with its one-paragraph message. Bad usage (unknown or conflicting flags) exits 2;
paths that are one file (an output over an input, evaluate's -t its -r) are bad input, 1.
"""
