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
_SIZE = re.compile(r"^\s*(\d+(?:\.\d+)?(?:[eE]\d+)?)\s*([A-Za-z]*)\s*$")
_MAX_SWEEP = 64
#: Largest message size accepted (1024 TiB).
MAX_BYTES = 1 << 50


def parse_size(text: str) -> int:
    """``"64MiB"`` -> 67108864. K/M/G/T and KiB... are binary, KB/MB/GB/TB decimal."""
    m = _SIZE.match(text)
    unit = m.group(2).upper() if m else ""
    if m is None or unit not in _UNITS:
        raise UsageError(
            f"cannot read the size {text!r}",
            hint="write bytes as 1048576, 1MiB, 1M (binary), 1MB (decimal)",
        )
    value = float(m.group(1)) * _UNITS[unit]
    if not value <= MAX_BYTES:  # (1e400 reads as inf)
        raise UsageError(
            f"size {clipped(text)!r} is more than 1024 TiB",
            hint="write a size in bytes up to 1024 TiB, e.g. 64MiB or 50G",
        )
    if value != int(value):
        raise UsageError(f"size {text!r} is not a whole number of bytes")
    return int(value)


def parse_sizes(text: str) -> list[int]:
    """A size, a comma list, or ``LO:HI`` doubling from LO to HI."""
    sizes: list[int] = []
    for part in text.split(","):
        if ":" in part:
            lo_text, hi_text = part.split(":", 1)
            lo, hi = parse_size(lo_text), parse_size(hi_text)
            if lo <= 0 or hi < lo:
                raise UsageError(f"sweep {part!r} must go from a positive size up to a larger one")
            size = lo
            while size <= hi:
                sizes.append(size)
                size *= 2
                if len(sizes) > _MAX_SWEEP:
                    raise UsageError(f"sweep {part!r} has more than {_MAX_SWEEP} sizes")
        else:
            sizes.append(parse_size(part))
    return sizes
