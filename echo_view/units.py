"""Integer-nanosecond time helpers.

Inside echo-view every time is an ``int`` (or int64 column) in nanoseconds. Microsecond floats
exist only at the edges (Chrome/Kineto JSON). A double holds exact nanoseconds only below
2**42 microseconds, so absolute-epoch microsecond floats are converted through their decimal
text, never through ``float * 1000``.
"""

from __future__ import annotations

from decimal import Decimal

NS_PER_US = 1_000
NS_PER_MS = 1_000_000
NS_PER_S = 1_000_000_000

# Below this magnitude (in µs) a double's ULP is finer than 1/1024 ns, so round(x * 1000) is exact
# for values that were printed with at most three decimals.
EXACT_FLOAT_US_LIMIT = float(2**42)


def us_to_ns(value: int | float | str | Decimal) -> int:
    """Convert a microsecond value from a trace file to integer nanoseconds, exactly.

    Integers are exact; decimal strings and :class:`~decimal.Decimal` are exact; floats are exact
    when below :data:`EXACT_FLOAT_US_LIMIT` and otherwise go through their shortest ``repr``,
    which is the text the writer printed.
    """
    if isinstance(value, bool):
        raise TypeError("a boolean is not a time")
    if isinstance(value, int):
        return value * NS_PER_US
    if isinstance(value, float):
        if abs(value) < EXACT_FLOAT_US_LIMIT:
            return round(value * NS_PER_US)
        return int((Decimal(repr(value)) * NS_PER_US).to_integral_value())
    if isinstance(value, str):
        value = Decimal(value)
    return int((value * NS_PER_US).to_integral_value())


def ns_to_us_text(ns: int) -> str:
    """Format integer nanoseconds as exact microseconds text (``"12.345"``, ``"-0.001"``)."""
    sign = "-" if ns < 0 else ""
    whole, frac = divmod(abs(ns), NS_PER_US)
    if frac == 0:
        return f"{sign}{whole}"
    return f"{sign}{whole}.{frac:03d}".rstrip("0")


def format_duration(ns: int | float) -> str:
    """Human-readable duration with an adaptive unit (``1.23 ms``)."""
    v = float(ns)
    a = abs(v)
    if a >= NS_PER_S:
        return f"{v / NS_PER_S:.3f} s"
    if a >= NS_PER_MS:
        return f"{v / NS_PER_MS:.3f} ms"
    if a >= NS_PER_US:
        return f"{v / NS_PER_US:.3f} µs"
    return f"{v:.0f} ns"
