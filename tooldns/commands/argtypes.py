"""Command-line value types: argparse ``type=`` functions for numbers within bounds, and sizes.

One shape for every bounded number the commands take (seconds, counts, BM25 parameters, bytes): parse,
check the range, or fail with argparse's usage error (exit status 2) saying what the value must be.

    >>> bounded(int, 1, what="a whole number of at least 1")("3")
    3
"""

from __future__ import annotations

import argparse
import math


def bounded(convert, least: float, above: bool = False, most: float = math.inf, *, what: str):
    """An argparse type: *convert* (int or float) of the text, finite, above *least* (*above*) or at
    least *least*, and at most *most*; else argparse's error saying it must be *what*."""

    def parse(text: str):
        try:
            value = convert(text)
        except ValueError:
            value = None
        if value is None or not (value > least if above else value >= least) or not value <= most \
                or (isinstance(value, float) and not math.isfinite(value)):
            raise argparse.ArgumentTypeError(f"must be {what}, not {text!r}")
        return value

    return parse


#: the multiples a size may end with (powers of 1024, as Unbound's cache sizes)
_UNITS = {"": 1, "K": 2**10, "M": 2**20, "G": 2**30}


def size(text: str) -> int:
    """An argparse type: bytes, as a whole number or with K, M or G (``768M``, ``1.5G``), at least 0; a
    fraction of a byte is a byte (so that only 0 itself means none)."""
    number, unit = text.strip(), ""
    if number[-1:].upper() in _UNITS:
        number, unit = number[:-1], number[-1:].upper()
    try:
        value: int | float = int(number)  # exact, however large
    except ValueError:
        try:
            value = float(number)
        except ValueError:
            value = -1.0
    if not math.isfinite(value) or value < 0:
        raise argparse.ArgumentTypeError(f"must be a size in bytes (such as 768M or 2G), not {text!r}")
    return value * _UNITS[unit] if isinstance(value, int) else math.ceil(value * _UNITS[unit])


#: a TCP or UDP port to serve on (0: one the system picks)
port = bounded(int, 0, most=65535, what="a port number from 0 to 65535")
