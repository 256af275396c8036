"""Read-only numpy columns and a small append-only builder for them."""

from __future__ import annotations

from array import array
from collections.abc import Iterable, Iterator, Mapping
from typing import Any

import numpy as np
import numpy.typing as npt

I64 = npt.NDArray[np.int64]

# array.array typecodes for the dtypes the model uses.
_TYPECODES = {"i1": "b", "u1": "B", "i4": "i", "i8": "q", "f8": "d"}


def frozen(values: Any, dtype: str) -> npt.NDArray[Any]:
    """A read-only numpy array of ``dtype`` holding ``values`` (no copy when already right)."""
    arr = np.asarray(values, dtype=dtype)
    if arr.ndim != 1:
        raise ValueError(f"a column must be one-dimensional, got shape {arr.shape}")
    if arr.flags.writeable:
        if arr is values or (isinstance(values, np.ndarray) and np.shares_memory(arr, values)):
            arr = arr.copy()
        arr.flags.writeable = False
    return arr


def byte_slices(sizes: I64, budget: int) -> Iterator[tuple[int, int]]:
    """``(i, j)`` row ranges covering ``sizes`` (bytes per row) in order, each of at most
    ``budget`` bytes, or of one row where that row alone is larger: the rows a step that costs
    memory per byte takes at once."""
    cum = np.cumsum(sizes)
    i, n = 0, len(sizes)
    while i < n:
        before = int(cum[i - 1]) if i else 0
        j = max(i + 1, int(np.searchsorted(cum, before + budget, side="right")))
        yield i, j
        i = j


def spans(start: I64, length: I64) -> I64:
    """The indices ``start[i] .. start[i] + length[i] - 1`` of every row, back to back (with
    ``start`` 0, each element's place in its row): ones with a jump at each row's first index,
    summed up (two passes over the output)."""
    keep = length > 0
    start, length = start[keep], length[keep]
    total = int(length.sum())
    idx = np.ones(total, dtype=np.int64)
    if not total:
        return idx
    first = np.cumsum(length) - length
    idx[0] = start[0]
    idx[first[1:]] = start[1:] - (start[:-1] + length[:-1]) + 1
    return np.cumsum(idx, out=idx)


def groups(keys: npt.NDArray[np.integer[Any]]) -> Iterator[tuple[int, npt.NDArray[np.intp]]]:
    """``(key, indices)`` for each distinct value of ``keys``, ascending, with the indices of its
    rows in order: one stable sort for all groups, where a mask per key would read every row
    once per key (a trace with a device per event has as many keys as rows)."""
    if not len(keys):
        return
    order = np.argsort(keys, kind="stable")
    ordered = keys[order]
    cuts = (np.flatnonzero(ordered[1:] != ordered[:-1]) + 1).tolist()
    for lo, hi in zip([0, *cuts], [*cuts, len(keys)], strict=True):
        yield int(ordered[lo]), order[lo:hi]


def check_lengths(table: str, columns: Mapping[str, npt.NDArray[Any]]) -> int:
    """Return the common length of ``columns`` or raise naming the odd one out."""
    lengths = {name: len(col) for name, col in columns.items()}
    n = next(iter(lengths.values()), 0)
    for name, length in lengths.items():
        if length != n:
            raise ValueError(f"{table}.{name} has {length} rows, expected {n}")
    return n


class ColumnBuilder:
    """Append rows one at a time into typed buffers, then freeze them into numpy columns.

    Used where rows are produced one by one (the simulator, small importers, tests). Bulk
    importers build numpy arrays directly.
    """

    def __init__(self, dtypes: Mapping[str, str]) -> None:
        self._dtypes = dict(dtypes)
        self._buffers: dict[str, array[Any]] = {
            name: array(_TYPECODES[np.dtype(dt).str[1:]]) for name, dt in dtypes.items()
        }

    def append(self, **row: int | float) -> int:
        """Append one row; every column must be given. Returns the row index."""
        if row.keys() != self._buffers.keys():
            missing = self._buffers.keys() - row.keys()
            extra = row.keys() - self._buffers.keys()
            raise KeyError(f"row columns differ: missing {sorted(missing)}, extra {sorted(extra)}")
        for name, value in row.items():
            self._buffers[name].append(value)
        return len(self) - 1

    def extend(self, name: str, values: Iterable[int | float]) -> None:
        """Append many values to one column (the caller keeps columns equally long)."""
        self._buffers[name].extend(values)

    def __len__(self) -> int:
        return len(next(iter(self._buffers.values()))) if self._buffers else 0

    def columns(self) -> dict[str, npt.NDArray[Any]]:
        """The frozen columns."""
        out: dict[str, npt.NDArray[Any]] = {}
        for name, buf in self._buffers.items():
            arr = (
                np.frombuffer(buf, dtype=self._dtypes[name]).copy()
                if len(buf)
                else np.empty(0, dtype=self._dtypes[name])
            )
            arr.flags.writeable = False
            out[name] = arr
        return out
