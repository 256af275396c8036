"""Value conversions and interning for :mod:`importers.kineto.columns` (times are converted
from their text by :func:`echo_view.units.us_texts_to_ns`).

Interning: dict subclasses whose ``__missing__`` adds the new key, so that ``map(d.__getitem__,
values)`` maps a whole column in C and only new values run Python code.
"""

from __future__ import annotations

from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model import NONE
from importers.kineto.rows import PH_OTHER, PHASES

I64 = npt.NDArray[np.int64]

#: Categories whose args never hold ``correlation`` or ``External id`` (Python stack frames,
#: memory instants): their args are not decoded a second time.
NO_LINK_CATEGORIES = frozenset({"python_function", "cpu_instant_event"})

#: Default ``ts``/``dur`` of an event that has none (exact as a double, never a real time).
MISSING = -(2**62)


def ints(values: list[Any]) -> I64:
    """int64 column of ``values``; anything not an int (or out of range) becomes -1."""
    if set(map(type, values)) <= {int}:
        try:
            return np.array(values, dtype=np.int64)
        except OverflowError:
            pass
    clean = [v if type(v) is int and -(2**63) <= v < 2**63 else NONE for v in values]
    return np.array(clean, dtype=np.int64)


def as_int(value: object) -> int:
    return value if type(value) is int and -(2**63) <= value < 2**63 else NONE


def norm(value: Any) -> int | str:
    """A pid/tid as the model keeps it: an int64 when it is one (Perfetto also reads a
    numeric string as that number), else its text, so that a label like ``"Trace"`` or a
    damaged value can never overflow a numeric column."""
    if type(value) is int:
        return value if -(2**63) <= value < 2**63 else str(value)
    if isinstance(value, str):
        s = value.strip()
        digits = s[1:] if s.startswith("-") else s
        # ASCII digits only: str.isdigit also accepts '²' and other digits int() refuses.
        if digits.isascii() and digits.isdigit() and -(2**63) <= (v := int(s)) < 2**63:
            return v
        return value
    if isinstance(value, float) and value.is_integer() and abs(value) < 2**63:
        return int(value)
    return msgspec.json.encode(value).decode()  # true, 1.5, [1], {} ... as written


class Interner(dict[str, int]):
    """String -> dense id; a lookup of a new string adds it (so ``map`` can run in C)."""

    def __missing__(self, key: str) -> int:
        value = self[key] = len(self)
        return value


class ThreadIds(dict[tuple[Any, Any], int]):
    """(pid, tid) as written -> id of the normalised pair in ``threads``."""

    def __init__(self, threads: list[tuple[int | str, int | str]]) -> None:
        super().__init__()
        self.threads = threads
        self.norm: dict[tuple[int | str, int | str], int] = {}

    def __missing__(self, key: tuple[Any, Any]) -> int:
        pid, tid = key
        norm_pid = norm(pid)
        pair = (norm_pid, norm_pid if tid is None else norm(tid))
        value = self.norm.get(pair)
        if value is None:
            value = self.norm[pair] = len(self.threads)
            self.threads.append(pair)
        self[key] = value
        return value


class Classes(dict[tuple[Any, ...], int]):
    """(ph, cat, name, pid, tid) -> class id, with each class's phase code, string ids and
    thread id in :attr:`props`: one dict lookup per event replaces four."""

    def __init__(self, strings: Interner, threads: ThreadIds) -> None:
        super().__init__()
        self.strings = strings
        self.threads = threads
        # phase, cat, name, thread, whether its args can hold correlation / External id
        self.props = np.zeros((1024, 5), dtype=np.int32)

    def __missing__(self, key: tuple[Any, ...]) -> int:
        ph, cat, name, pid, tid = key
        cid = len(self)
        if cid == len(self.props):
            self.props = np.concatenate([self.props, np.zeros_like(self.props)])
        self.props[cid] = (
            PHASES.get(ph, PH_OTHER),
            self.strings[cat],
            self.strings[name],
            self.threads[(pid, tid)],
            cat not in NO_LINK_CATEGORIES,
        )
        self[key] = cid
        return cid
