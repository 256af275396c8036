"""Exact int64 nanoseconds from the µs values a trace writes (ints, floats, Decimals, strings).

A JSON float at or above 2**42 µs cannot hold nanoseconds; the event decoder hands such literals
over as :class:`~decimal.Decimal` (their exact text), so they convert exactly here and the
precision rule can still see whether sub-µs digits were written.
"""

from __future__ import annotations

from decimal import Decimal, InvalidOperation
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.units import EXACT_FLOAT_US_LIMIT, MAX_US_EXPONENT, decimal_ns, us_to_ns

UNSET = msgspec.UNSET
I64 = npt.NDArray[np.int64]
U8 = npt.NDArray[np.uint8]

# Time kinds, per event, for ts and dur.
T_MISSING = 0
T_INT = 1  # JSON integer
T_FLOAT = 2  # JSON float below 2**42 µs (exact to the ns through round(x*1000))
T_BIG_FLOAT = 3  # JSON float at or above 2**42 µs (decoded exactly from its text)
T_STRING = 4  # a numeric string (Perfetto parses it)
T_INVALID = 5  # null, bool, object, non-numeric string
T_RANGE = 6  # a number outside int64 nanoseconds or not finite

_INT64_US = 9_223_372_036_854_775  # |µs| above this overflows int64 ns


def _decimal_ns(value: Decimal) -> int | None:
    """Exact ns of a Decimal µs value (:func:`echo_view.units.decimal_ns`: sub-ns digits
    rounded half to even), ``None`` when it is not finite or leaves int64."""
    ns = decimal_ns(value)
    return ns if ns is not None and -_INT64_US * 1000 <= ns <= _INT64_US * 1000 else None


def _one_to_ns(value: Any) -> tuple[int, int]:
    """(ns, kind) of one raw time value; the slow path for odd values."""
    t = type(value)
    if value is UNSET:
        return 0, T_MISSING
    if t is bool or value is None:
        return 0, T_INVALID
    if t is int:
        if -_INT64_US <= value <= _INT64_US:
            return value * 1000, T_INT
        return 0, T_RANGE
    if t is float:
        if value != value or value in (float("inf"), float("-inf")):
            return 0, T_RANGE
        if abs(value) < EXACT_FLOAT_US_LIMIT:
            return us_to_ns(value), T_FLOAT
        ns = _decimal_ns(Decimal(repr(value)))
        return (0, T_RANGE) if ns is None else (ns, T_BIG_FLOAT)
    if t is Decimal:
        ns = _decimal_ns(value)
        return (0, T_RANGE) if ns is None else (ns, T_BIG_FLOAT)
    if t is str:
        try:
            ns = _decimal_ns(Decimal(value.strip()))
        except InvalidOperation:
            return 0, T_INVALID
        return (0, T_INVALID) if ns is None else (ns, T_STRING)
    return 0, T_INVALID


def _homogeneous(values: list[Any], t: type) -> tuple[I64, U8] | None:
    """Bulk conversion of values that all have type ``t``; ``None`` when it does not apply."""
    n = len(values)
    if t is int:
        try:
            arr = np.array(values, dtype=np.int64)
        except OverflowError:
            return None
        # min and max, not abs: abs(-2**63) is -2**63 in int64.
        if n and (int(arr.max()) > _INT64_US or int(arr.min()) < -_INT64_US):
            return None
        return arr * 1000, np.full(n, T_INT, dtype=np.uint8)
    if t is float:
        arr_f = np.array(values, dtype=np.float64)
        if not bool(np.all(np.abs(arr_f) < EXACT_FLOAT_US_LIMIT)):
            return None  # non-finite, or a big float that did not come through the hook
        return np.rint(arr_f * 1000).astype(np.int64), np.full(n, T_FLOAT, dtype=np.uint8)
    if t is Decimal:
        if not all(map(Decimal.is_finite, values)) or (
            n and max(map(Decimal.adjusted, values)) > MAX_US_EXPONENT
        ):
            return None  # (one by one: each out-of-range value gets T_RANGE, 0E20 is 0)
        # Rounded as us_to_ns rounds (half to even), not truncated: the importer's ns.
        ns = [int((v * 1000).to_integral_value()) for v in values]
        if n and (max(ns) > _INT64_US * 1000 or min(ns) < -_INT64_US * 1000):
            return None  # (one by one, as _decimal_ns bounds them: T_RANGE)
        return np.array(ns, dtype=np.int64), np.full(n, T_BIG_FLOAT, dtype=np.uint8)
    if values and values[0] is UNSET:
        return np.zeros(n, dtype=np.int64), np.zeros(n, dtype=np.uint8)
    return None


def _slow(values: list[Any]) -> tuple[I64, U8]:
    out = np.zeros(len(values), dtype=np.int64)
    kinds = np.zeros(len(values), dtype=np.uint8)
    for i, value in enumerate(values):
        out[i], kinds[i] = _one_to_ns(value)
    return out, kinds


def times_to_ns(values: list[Any]) -> tuple[I64, U8]:
    """Exact int64 nanoseconds and a ``T_*`` kind for each raw µs value.

    Values are converted in bulk per Python type (ints, floats, Decimals, absent); only odd
    values (strings, null, bools) go one by one.
    """
    n = len(values)
    types = set(map(type, values))
    if len(types) <= 1:
        done = _homogeneous(values, next(iter(types)) if n else int)
        return done if done is not None else _slow(values)
    codes = {t: c for c, t in enumerate(types)}
    tcodes = np.array([codes[t] for t in map(type, values)], dtype=np.uint8)
    out = np.zeros(n, dtype=np.int64)
    kinds = np.zeros(n, dtype=np.uint8)
    for t, c in codes.items():
        rows = np.flatnonzero(tcodes == c)
        sub = [values[i] for i in rows.tolist()]
        done = _homogeneous(sub, t)
        if done is None:
            done = _slow(sub)
        out[rows], kinds[rows] = done
    return out, kinds
