"""Byte sizes on the command line (``comm --bytes``, ``--max-inflated-bytes``): ``64MiB``,
``1GB``, ``1e6``, comma lists and doubling sweeps, each at most 1024 TiB."""

from __future__ import annotations

import re

from echo_view.errors import UsageError
from echo_view.text import clipped

_UNITS = {
    "": 1,
    "B": 1,
    "K": 1 << 10,
    "M": 1 << 20,
    "G": 1 << 30,
    "T": 1 << 40,
    "KIB": 1 << 10,
    "MIB": 1 << 20,
    "GIB": 1 << 30,
    "TIB": 1 << 40,
    "KB": 10**3,
    "MB": 10**6,
    "GB": 10**9,
    "TB": 10**12,
}
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE]\d+)?)\s*([A-Za-z]*)\s*$", re.ASCII)
#: Most sizes one option takes, lists and sweeps together: each costs a prediction, and at a
#: million ranks 0.2 s (60,000 listed ran past any timeout).
MAX_SIZES = 64
#: Longest text read as one size (``1125899906842624``, ``1.5e3 MiB``, with spaces around).
MAX_SIZE_TEXT = 64
#: Largest message size accepted (1024 TiB).
MAX_BYTES = 1 << 50


def parse_size(text: str, option: str = "") -> int:
    """``"64MiB"`` -> 67108864. K/M/G/T and KiB... are binary, KB/MB/GB/TB decimal; errors
    name ``option``."""
    named = f"{option}: " if option else ""
    # (a size has a few characters; "1" + 80,000 spaces + "!" took 30 s to refuse)
    m = _SIZE.match(text) if len(text) <= MAX_SIZE_TEXT else None
    unit = m.group(2).upper() if m else ""
    if m is None or unit not in _UNITS:
        raise UsageError(
            f"{named}cannot read the size {clipped(text)!r}",
            hint="write bytes as 1048576, 1MiB, 1M (binary), 1MB (decimal)",
        )
    value = float(m.group(1)) * _UNITS[unit]
    if not value <= MAX_BYTES:  # (1e400 reads as inf)
        raise UsageError(
            f"{named}size {clipped(text)!r} is more than 1024 TiB",
            hint="write a size in bytes up to 1024 TiB, e.g. 64MiB or 50G",
        )
    if value != int(value):
        raise UsageError(f"{named}size {clipped(text)!r} is not a whole number of bytes")
    return int(value)


def parse_sizes(text: str, option: str = "") -> list[int]:
    """A size, a comma list, or ``LO:HI`` doubling from LO to HI; at most :data:`MAX_SIZES`
    in all; errors name ``option``."""
    named = f"{option}: " if option else ""
    sizes: list[int] = []
    for part in text.split(","):
        if ":" in part:
            lo_text, hi_text = part.split(":", 1)
            lo, hi = parse_size(lo_text, option), parse_size(hi_text, option)
            if lo <= 0 or hi < lo:
                raise UsageError(
                    f"{named}sweep {clipped(part)!r} must go from a positive size up to a "
                    "larger one"
                )
            size = lo
            while size <= hi and len(sizes) <= MAX_SIZES:
                sizes.append(size)
                size *= 2
        else:
            sizes.append(parse_size(part, option))
        if len(sizes) > MAX_SIZES:
            raise UsageError(
                f"{named}more than {MAX_SIZES} sizes",
                hint="give fewer, or a doubling sweep LO:HI (1KiB:1GiB is 21 sizes)",
            )
    return sizes
