"""Column readers for the activity tables of an Nsight Systems export.

Each reader runs one set-based query and returns a :class:`Rows` block of numpy columns. Names
stay integer ids until the end: ``StringIds`` ids are mapped to one registry per export
(:class:`Names`) so that no per-row string join is needed.
"""

from __future__ import annotations

import re
from collections.abc import Iterable, Sequence
from dataclasses import dataclass
from itertools import chain
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model.kinds import EventKind
from importers.nsys_db import Export

I64 = npt.NDArray[np.int64]

# Kineto's names for CUPTI copy kinds and synchronisation types, so that both importers agree.
COPY_KINDS = {
    0: "Unknown",
    1: "HtoD",
    2: "DtoH",
    3: "HtoA",
    4: "AtoH",
    5: "AtoA",
    6: "AtoD",
    7: "DtoA",
    8: "DtoD",
    9: "HtoH",
    10: "PtoP",
    11: "HtoD (UVM)",
    12: "DtoH (UVM)",
    13: "DtoD (UVM)",
}
# Nsight's own memory-kind enum (ENUM_CUDA_MEM_KIND), used when the export lacks the table.
MEM_KINDS = {
    0: "Pageable",
    1: "Pinned",
    2: "Device",
    3: "Array",
    4: "Managed",
    5: "Device Static",
    6: "Managed Static",
    7: "Unknown",
}
SYNC_TYPES = {1: "Event Sync", 2: "Stream Wait Event", 3: "Stream Sync", 4: "Context Sync"}

#: The stream id CUPTI gives synchronisation records that wait on no stream (uint32 -1).
NO_STREAM = 0xFFFFFFFF
#: NVTX event types (ENUM_NSYS_EVENT_TYPE).
NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE = 34, 59, 60, 75

_API_VERSION = re.compile(r"_v\d+$")
# torch.autograd.profiler.emit_nvtx writes "op, seq = N, op_id = M[, sizes = [...]]".
_TORCH_NVTX = re.compile(
    r"^(?P<op>[^,]+), (?:seq = (?P<seq>\d+), )?op_id = (?P<op_id>\d+)(?:, sizes = (?P<sizes>.*))?$"
)
MISSING_NAME = "<missing name>"


class Names:
    """The strings of one export: the ``StringIds`` rows in use, then derived names."""

    def __init__(self, ids: I64, values: list[str]) -> None:
        self._ids = ids
        self.strings = values
        self._index: dict[str, int] | None = None

    def intern(self, s: str) -> int:
        if self._index is None:
            self._index = {}
            for i, v in enumerate(self.strings):
                self._index.setdefault(v, i)
        gid = self._index.get(s)
        if gid is None:
            gid = len(self.strings)
            self.strings.append(s)
            self._index[s] = gid
        return gid

    def from_ids(self, ids: I64) -> I64:
        """Registry ids of ``StringIds`` ids (an unknown id becomes ``<missing name>``)."""
        if not len(ids):
            return np.empty(0, dtype=np.int64)
        pos = np.searchsorted(self._ids, ids)
        pos_c = np.minimum(pos, max(len(self._ids) - 1, 0))
        ok = (pos < len(self._ids)) & (self._ids[pos_c] == ids) if len(self._ids) else pos < 0
        out = pos_c.astype(np.int64)
        if not ok.all():
            out[~ok] = self.intern(MISSING_NAME)
        return out

    def remap(self, gids: I64, fn: Any) -> I64:
        """Apply ``fn(str) -> str`` to each distinct name in ``gids``."""
        if not len(gids):
            return gids
        uniq, inv = compact(gids, len(self.strings))
        new = np.array([self.intern(fn(self.strings[g])) for g in uniq.tolist()], dtype=np.int64)
        return new[inv]

    def __getitem__(self, gid: int) -> str:
        return self.strings[gid]


#: Up to this many ``StringIds`` rows the whole table is read; beyond it only the rows in use.
_READ_ALL_STRINGS = 200_000


def load_names(exp: Export, refs: Iterable[tuple[str, str]]) -> Names:
    """Read the ``StringIds`` rows that ``(table, column)`` pairs refer to."""
    if not exp.has("StringIds"):
        return Names(np.empty(0, dtype=np.int64), [])
    top = exp.query("SELECT count(*) FROM StringIds", "StringIds")[0][0]
    if top is None:
        return Names(np.empty(0, dtype=np.int64), [])
    if int(top) <= _READ_ALL_STRINGS:
        sql = "SELECT id, value FROM StringIds ORDER BY id"
    else:
        subqueries = [
            f'SELECT "{c}" FROM "{t}"' for t, c in refs if exp.has(t) and c in exp.columns(t)
        ]
        sql = (
            "SELECT id, value FROM StringIds WHERE id IN ("
            + " UNION ".join(subqueries or ["SELECT NULL"])
            + ") ORDER BY id"
        )
    rows = exp.query(sql, "StringIds")
    ids = np.fromiter((r[0] for r in rows), dtype=np.int64, count=len(rows))
    return Names(ids, [str(r[1]) if r[1] is not None else "" for r in rows])


def compact(ids: I64, size: int) -> tuple[I64, I64]:
    """Distinct values of ``ids`` (all in ``[0, size)``), ascending, and the position of each id
    among them: a table lookup instead of a sort."""
    seen = np.zeros(size, dtype=bool)
    seen[ids] = True
    uniq = np.flatnonzero(seen)
    pos = np.zeros(size, dtype=np.int64)
    pos[uniq] = np.arange(len(uniq))
    return uniq, pos[ids]


def int_matrix(rows: Sequence[tuple[Any, ...]], ncols: int) -> I64:
    """``rows`` of integers as an ``(n, ncols)`` int64 array."""
    flat = np.fromiter(chain.from_iterable(rows), dtype=np.int64, count=len(rows) * ncols)
    return flat.reshape(len(rows), ncols)


@dataclass
class Rows:
    """Events of one table as columns; ``process`` is the globalPid, ``thread`` the globalTid
    (-1 on GPU rows), ``device``/``stream`` are -1 on CPU rows, ``args`` one JSON bytes per row.
    A GPU row on stream :data:`NO_STREAM` (event and context syncs) belongs to no stream."""

    kind: I64
    start: I64
    end: I64
    name: I64
    cat: I64
    correlation: I64
    process: I64
    thread: I64
    device: I64
    stream: I64
    args: list[bytes]
    context: I64 | None = None  # CUDA context of GPU rows (sync records need it for the device)

    def __len__(self) -> int:
        return len(self.start)

    @staticmethod
    def concat(parts: Sequence[Rows]) -> Rows:
        fields = ("kind", "start", "end", "name", "cat", "correlation", "process", "thread")
        cols = {f: np.concatenate([getattr(p, f) for p in parts]) for f in fields}
        return Rows(
            **cols,
            device=np.concatenate([p.device for p in parts]),
            stream=np.concatenate([p.stream for p in parts]),
            args=list(chain.from_iterable(p.args for p in parts)),
        )


def _full(n: int, value: int) -> I64:
    return np.full(n, value, dtype=np.int64)


def mixed_query(exp: Export, sql: str, n_ints: int, where: str) -> tuple[I64, list[bytes]]:
    """Rows of ``n_ints`` integer columns then one BLOB column, as an int matrix and a list."""
    rows = exp.query(sql, where)
    if not rows:
        return np.empty((0, n_ints), dtype=np.int64), []
    cols = list(zip(*rows, strict=True))
    m = np.empty((len(rows), n_ints), dtype=np.int64)
    for j in range(n_ints):
        m[:, j] = cols[j]
    return m, [b if b is not None else b"" for b in cols[n_ints]]


def gpu_rows(m: I64, kind: EventKind, name: I64, cat: int, args: list[bytes]) -> Rows:
    # m columns: start, end, deviceId, streamId, correlationId, globalPid, ...
    n = len(m)
    return Rows(
        kind=_full(n, int(kind)),
        start=m[:, 0].copy(),
        end=m[:, 1].copy(),
        name=name,
        cat=_full(n, cat),
        correlation=m[:, 4].copy(),
        process=m[:, 5].copy(),
        thread=_full(n, -1),
        device=m[:, 2].copy(),
        stream=m[:, 3].copy(),
        args=args,
        context=m[:, 6].copy(),
    )


GPU_COLS = (
    'start, "end", deviceId, streamId, COALESCE(correlationId, -1), COALESCE(globalPid, 0), '
    "COALESCE(contextId, -1)"
)
_GPU_ARGS = '"device":%d,"stream":%d,"correlation":%d'
_GPU_ARG_COLS = "deviceId, streamId, COALESCE(correlationId, -1)"


def _printf(fmt: str, cols: str) -> str:
    """SQL that formats each row's args JSON inside SQLite (cheaper than per-row Python)."""
    return f"CAST(printf('{{{_GPU_ARGS},{fmt}}}', {_GPU_ARG_COLS}, {cols}) AS BLOB)"


def read_kernels(exp: Export, names: Names) -> Rows:
    t = exp.kernel_table
    c = exp.col
    name_sql = (
        'COALESCE("demangledName", "shortName", -1)'
        if "demangledName" in exp.columns(t)
        else c(t, "shortName")
    )
    dims = ", ".join(
        c(t, col, "0") for col in ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    )
    shared = f"{c(t, 'staticSharedMemory', '0')} + {c(t, 'dynamicSharedMemory', '0')}"
    args = _printf(
        '"grid":[%d,%d,%d],"block":[%d,%d,%d],"registers per thread":%d,"shared memory":%d',
        f"{dims}, {c(t, 'registersPerThread', '0')}, {shared}",
    )
    m, blobs = mixed_query(exp, f'SELECT {GPU_COLS}, {name_sql}, {args} FROM "{t}"', 8, t)
    return gpu_rows(m, EventKind.KERNEL, names.from_ids(m[:, 7]), names.intern("kernel"), blobs)


def _enum_labels(exp: Export, table: str, fallback: dict[int, str]) -> dict[int, str]:
    labels = dict(fallback)
    if exp.has(table) and {"id", "label"} <= exp.columns(table):
        for i, label in exp.query(f'SELECT id, label FROM "{table}"', table):
            if i is not None and label:
                labels[int(i)] = str(label)
    return labels


def names_by_code(names: Names, codes: I64, label: Any) -> I64:
    """Registry ids of ``label(code)`` for a column of small integer codes."""
    if not len(codes):
        return np.empty(0, dtype=np.int64)
    uniq, inv = np.unique(codes, return_inverse=True)
    gids = np.array([names.intern(label(int(k))) for k in uniq.tolist()], dtype=np.int64)
    return gids[inv.reshape(-1)]


def read_memcpy(exp: Export, names: Names) -> Rows | None:
    t = "CUPTI_ACTIVITY_KIND_MEMCPY"
    if not exp.has(t):
        return None
    c = exp.col
    kinds = f"{c(t, 'copyKind', '0')}, {c(t, 'srcKind', '7')}, {c(t, 'dstKind', '7')}"
    args = _printf(
        '"bytes":%d,"copy kind":%d,"src device":%d,"dst device":%d',
        f"{c(t, 'bytes', '0')}, {c(t, 'copyKind', '0')}, {c(t, 'srcDeviceId')}, "
        f"{c(t, 'dstDeviceId')}",
    )
    m, blobs = mixed_query(exp, f'SELECT {GPU_COLS}, {kinds}, {args} FROM "{t}"', 10, t)
    mem = _enum_labels(exp, "ENUM_CUDA_MEM_KIND", MEM_KINDS)

    def label(code: int) -> str:
        copy, src, dst = code >> 16, (code >> 8) & 0xFF, code & 0xFF
        what = COPY_KINDS.get(copy, f"kind {copy}")
        return f"Memcpy {what} ({mem.get(src, 'Unknown')} -> {mem.get(dst, 'Unknown')})"

    codes = (m[:, 7] << 16) | ((m[:, 8] & 0xFF) << 8) | (m[:, 9] & 0xFF)
    return gpu_rows(
        m, EventKind.MEMCPY, names_by_code(names, codes, label), names.intern("gpu_memcpy"), blobs
    )


def read_memset(exp: Export, names: Names) -> Rows | None:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if not exp.has(t):
        return None
    c = exp.col
    args = _printf('"bytes":%d,"value":%d', f"{c(t, 'bytes', '0')}, {c(t, 'value', '0')}")
    m, blobs = mixed_query(
        exp, f'SELECT {GPU_COLS}, {c(t, "memKind", "7")}, {args} FROM "{t}"', 8, t
    )
    mem = _enum_labels(exp, "ENUM_CUDA_MEM_KIND", MEM_KINDS)
    gids = names_by_code(names, m[:, 7], lambda k: f"Memset ({mem.get(k, 'Unknown')})")
    return gpu_rows(m, EventKind.MEMSET, gids, names.intern("gpu_memset"), blobs)


def runtime_name(raw: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (the name Kineto and users know)."""
    return _API_VERSION.sub("", raw)


def read_runtime(exp: Export, names: Names) -> Rows | None:
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not exp.has(t):
        return None
    corr = exp.col(t, "correlationId")
    sql = (
        f'SELECT start, "end", globalTid, {corr}, {exp.col(t, "nameId")}, '
        + "CAST(printf('{\"correlation\":%d}', "
        + corr
        + f') AS BLOB) FROM "{t}"'
    )
    m, blobs = mixed_query(exp, sql, 5, t)
    n = len(m)
    gids = names.remap(names.from_ids(m[:, 4]), runtime_name)
    # Driver API calls (cu*) versus runtime calls (cuda*), as Kineto labels them.
    uniq, inv = compact(gids, len(names.strings))
    is_driver = (
        np.array([not names[int(g)].startswith("cuda") for g in uniq], dtype=bool)[inv]
        if n
        else np.zeros(0, dtype=bool)
    )
    kind = np.where(is_driver, int(EventKind.DRIVER), int(EventKind.RUNTIME)).astype(np.int64)
    cat = np.where(is_driver, names.intern("cuda_driver"), names.intern("cuda_runtime"))
    thread = m[:, 2].copy()
    return Rows(
        kind=kind,
        start=m[:, 0].copy(),
        end=m[:, 1].copy(),
        name=gids,
        cat=cat.astype(np.int64),
        correlation=m[:, 3].copy(),
        process=(thread >> 24) << 24,
        thread=thread,
        device=_full(n, -1),
        stream=_full(n, -1),
        args=blobs,  # as Kineto writes it, for exports and checks that read the args
    )


def torch_op(text: str) -> tuple[str, bytes] | None:
    """Split a ``torch.autograd.profiler.emit_nvtx`` range name into op name and args."""
    m = _TORCH_NVTX.match(text)
    if m is None:
        return None
    parts = [f'"op_id":{m.group("op_id")}']
    if m.group("seq") is not None:
        parts.insert(0, f'"seq":{m.group("seq")}')
    if m.group("sizes") is not None:
        sizes = m.group("sizes").replace("\\", "\\\\").replace('"', '\\"')
        parts.append(f'"sizes":"{sizes}"')
    return m.group("op"), ("{" + ",".join(parts) + "}").encode()
