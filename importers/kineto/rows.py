"""Column holders shared by the Kineto importer's stages (phase codes, flow points, a file)."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]
I32 = npt.NDArray[np.int32]
U8 = npt.NDArray[np.uint8]
#: ``traceEvents`` indices: int32, or int64 for a file of 2**31 events or more.
IDX = npt.NDArray[np.int32] | npt.NDArray[np.int64]

# Phase codes (``ph``).
PH_OTHER, PH_X, PH_B, PH_E, PH_I, PH_C, PH_AB, PH_AE, PH_AN = 0, 1, 2, 3, 4, 5, 6, 7, 8
PH_S, PH_T, PH_F, PH_M = 9, 10, 11, 12
PHASES: dict[str, int] = {
    "X": PH_X,
    "B": PH_B,
    "E": PH_E,
    "i": PH_I,
    "I": PH_I,
    "R": PH_I,
    "C": PH_C,
    "b": PH_AB,
    "e": PH_AE,
    "n": PH_AN,
    "s": PH_S,
    "t": PH_T,
    "f": PH_F,
    "M": PH_M,
}


def unique(values: npt.NDArray[Any]) -> npt.NDArray[Any]:
    """Sorted distinct values, as ``np.unique`` - which imports ``numpy.ma`` on first use
    (~15 ms and ~1.3 MB of peak RSS for an import that needs nothing else from it)."""
    out = np.sort(values)
    if len(out) < 2:
        return out
    keep = np.empty(len(out), dtype=np.bool_)
    keep[0] = True
    np.not_equal(out[1:], out[:-1], out=keep[1:])
    return out[keep]


_POINT_FIELDS = ("phase", "thread", "ts", "id", "cat", "name", "bind_enclosing", "index")


@dataclass
class PointColumns:
    """Flow points (``s``/``t``/``f``) or ends (``E``/``e``), one entry each."""

    phase: U8
    thread: I32
    ts: I64
    id: I64
    cat: I32
    name: I32
    #: Binds to the enclosing slice rather than the next one: a source (``s``) or a step
    #: (``t``) always, an end (``f``) with ``"bp": "e"``; False for ends of slices.
    bind_enclosing: npt.NDArray[np.bool_]
    #: Index in ``traceEvents`` (file order).
    index: IDX

    def __len__(self) -> int:
        return len(self.phase)

    @staticmethod
    def concat(parts: list[PointColumns]) -> PointColumns:
        """All parts as one."""
        if not parts:
            z = np.zeros(0, dtype=np.int64)
            i32 = z.astype(np.int32)
            return PointColumns(z.astype(np.uint8), i32, z, z, i32, i32, z.astype(np.bool_), i32)
        return PointColumns(
            *(np.concatenate([getattr(p, f) for p in parts]) for f in _POINT_FIELDS)
        )


@dataclass
class FileColumns:
    """One file's events as columns: one row per slice, instant or counter event.

    ``thread`` indexes :attr:`threads` ((pid, tid) pairs as written), ``name``/``cat`` index
    :attr:`strings`; times are int64 ns on the file's own clock (before ``baseTimeNanoseconds``).
    """

    strings: list[str]
    threads: list[tuple[int | str, int | str]]
    phase: U8
    name: I32
    cat: I32
    thread: I32
    start_ns: I64
    dur_ns: I64
    correlation: I64
    external_id: I64
    index: IDX
    async_id: dict[int, int]
    args_blob: bytes
    args_offsets: I64
    metadata: list[tuple[str, int, dict[str, Any]]]
    flows: PointColumns
    ends: PointColumns
    skipped: dict[str, int]
    #: The args of ``E`` events that carry args, by ``traceEvents`` index: merged into their
    #: ``B`` row's args when the pair is matched (the format's rule).
    end_args: dict[int, dict[str, Any]] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.phase)
