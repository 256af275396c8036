"""Column readers for the activity tables of an Nsight Systems export.

Each reader reads the columns it needs at once (:meth:`Export.read`) and returns a :class:`Rows`
block of numpy columns with each row's args JSON built column-wise. Names stay integer ids
until the end: ``StringIds`` ids are mapped to one registry per export (:class:`Names`) whose
strings are decoded only when used, so that no per-row string work is needed.
"""

from __future__ import annotations

import re
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.errors import InputError
from echo_view.model.kinds import EventKind
from importers.nsys.args import Ints, Packed, assemble
from importers.nsys.columns import Columns
from importers.nsys.db import KERNEL_TABLES, REQUIRED_TIME, Export
from importers.nsys.pages import Text

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
    """The strings of one export: the ``StringIds`` rows (decoded when first asked for), then
    derived names. Ids are registry ids, dense from 0; two ids may hold the same text."""

    def __init__(self, ids: I64, values: Text | None) -> None:
        self._ids = ids
        self._values = values
        self._base = len(ids)
        self._decoded: dict[int, str] = {}
        self._extra: list[str] = []
        self._index: dict[str, int] = {}
        #: How many name ids (0 or more) were not ``StringIds`` rows (each became
        #: ``<missing name>``).
        self.missing = 0

    def __len__(self) -> int:
        return self._base + len(self._extra)

    def intern(self, s: str) -> int:
        """The id of a derived name (a string that is not a ``StringIds`` row)."""
        gid = self._index.get(s)
        if gid is None:
            gid = len(self)
            self._extra.append(s)
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
            self.missing += int(((~ok) & (ids >= 0)).sum())  # (below 0: no name was given)
        return out

    def remap(self, gids: I64, fn: Any) -> I64:
        """Apply ``fn(str) -> str`` to each distinct name in ``gids``."""
        if not len(gids):
            return gids
        uniq, inv = compact(gids, len(self))
        new = np.array([self.intern(fn(self[g])) for g in uniq.tolist()], dtype=np.int64)
        return new[inv]

    def __getitem__(self, gid: int) -> str:
        if gid >= self._base:
            return self._extra[gid - self._base]
        s = self._decoded.get(gid)
        if s is None:
            v = self._values
            assert v is not None  # ids below _base exist only with values
            lo = int(v.start[gid])
            s = v.data[lo : lo + int(v.length[gid])].tobytes().decode("utf-8", "replace")
            self._decoded[gid] = s
        return s


def load_names(exp: Export) -> Names:
    """The export's ``StringIds`` table (its values are decoded when used)."""
    if not exp.has("StringIds") or not {"id", "value"} <= exp.columns("StringIds"):
        kernels = exp.first_table(*KERNEL_TABLES)
        if kernels is not None and exp.query(f'SELECT 1 FROM "{kernels}" LIMIT 1', kernels):
            # Every kernel's name is a StringIds id: without the table all of them read as
            # <missing name>, and the NCCL kernels as compute.
            raise InputError(
                "the export has no StringIds table (id, value), which names its kernels",
                path=exp.path,
                hint="the file is damaged or was cut down: export the report again",
            )
        return Names(np.empty(0, dtype=np.int64), None)
    cols = exp.read("StringIds", {"id": -1}, ("value",))
    ids, values = cols.ints["id"], cols.texts["value"]
    if len(ids) > 1 and not (np.diff(ids) > 0).all():  # rowid order is id order, normally
        order = np.argsort(ids, kind="stable")
        ids = ids[order]
        values = Text(values.data, values.start[order], values.length[order], values.null[order])
    return Names(ids, values)


def factorize(values: I64) -> tuple[I64, I64]:
    """Distinct values, ascending, and the index of each value among them. Sort-based: numpy's
    hashing ``unique`` slows down badly on Nsight's global ids (low bits all zero)."""
    order = np.argsort(values, kind="stable")  # rows come in sorted runs: a merge, mostly
    ordered = values[order]
    new = np.ones(len(values), dtype=bool)
    np.not_equal(ordered[1:], ordered[:-1], out=new[1:])
    inverse = np.empty(len(values), dtype=np.int64)
    inverse[order] = np.cumsum(new) - 1
    return ordered[new], inverse


def compact(ids: I64, size: int) -> tuple[I64, I64]:
    """Distinct values of ``ids`` (all in ``[0, size)``), ascending, and the position of each id
    among them: a table lookup instead of a sort."""
    seen = np.zeros(size, dtype=bool)
    seen[ids] = True
    uniq = np.flatnonzero(seen)
    pos = np.zeros(size, dtype=np.int64)
    pos[uniq] = np.arange(len(uniq))
    return uniq, pos[ids]


@dataclass
class Rows:
    """Events of one table as columns; ``process`` is the globalPid, ``thread`` the globalTid
    (-1 on GPU rows), ``device``/``stream`` are -1 on CPU rows, ``args`` each row's args JSON.
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
    args: Packed
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
            args=Packed.concat([p.args for p in parts]),
        )


def full(n: int, value: int) -> I64:
    return np.full(n, value, dtype=np.int64)


#: Columns every GPU activity table has, with the value that stands for NULL (a NULL device
#: is refused: read as 0, it moved the work to GPU 0).
GPU_INTS = {
    "start": REQUIRED_TIME,
    "end": REQUIRED_TIME,
    "deviceId": -1,
    "streamId": 0,
    "correlationId": -1,
    "globalPid": 0,
    "contextId": -1,
}


def gpu_rows(c: Columns, kind: EventKind, name: I64, cat: int, args: Packed) -> Rows:
    i = c.ints
    return Rows(
        kind=full(len(c), int(kind)),
        start=i["start"],
        end=i["end"],
        name=name,
        cat=full(len(c), cat),
        correlation=i["correlationId"],
        process=i["globalPid"],
        thread=full(len(c), -1),
        device=i["deviceId"],
        stream=i["streamId"],
        args=args,
        context=i["contextId"],
    )


def json_pieces(fields: Sequence[tuple[str, I64]], first: bool = True) -> list[bytes | Ints]:
    """``{"key":value,...`` (or ``,"key":value...`` when not ``first``) as :func:`assemble`
    pieces."""
    out: list[bytes | Ints] = []
    for k, (key, values) in enumerate(fields):
        out += [(b"{" if k == 0 and first else b",") + f'"{key}":'.encode(), Ints(values)]
    return out


def gpu_fields(c: Columns) -> list[tuple[str, I64]]:
    """Kineto's first args of GPU activity: device, stream, correlation."""
    i = c.ints
    return [
        ("device", i["deviceId"]),
        ("stream", i["streamId"]),
        ("correlation", i["correlationId"]),
    ]


def read_kernels(exp: Export, names: Names) -> Rows:
    t = exp.kernel_table
    dims = ("gridX", "gridY", "gridZ", "blockX", "blockY", "blockZ")
    extra = ("registersPerThread", "staticSharedMemory", "dynamicSharedMemory")
    c = exp.read(
        t,
        {**GPU_INTS, "demangledName": -1, "shortName": -1, **dict.fromkeys((*dims, *extra), 0)},
    )
    i = c.ints
    name = np.where(i["demangledName"] >= 0, i["demangledName"], i["shortName"])
    # Kineto's kernel args; the grid and block are JSON arrays.
    pieces = json_pieces(gpu_fields(c))
    for key, axes in (("grid", dims[:3]), ("block", dims[3:])):
        pieces += [f',"{key}":['.encode(), Ints(i[axes[0]]), b",", Ints(i[axes[1]]), b","]
        pieces += [Ints(i[axes[2]]), b"]"]
    shared = i["staticSharedMemory"] + i["dynamicSharedMemory"]
    pieces += json_pieces(
        [("registers per thread", i["registersPerThread"]), ("shared memory", shared)], False
    )
    args = assemble(len(c), [*pieces, b"}"])
    return gpu_rows(c, EventKind.KERNEL, names.from_ids(name), names.intern("kernel"), args)


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
    ints = {"bytes": 0, "copyKind": 0, "srcKind": 7, "dstKind": 7}
    c = exp.read(t, {**GPU_INTS, **ints, "srcDeviceId": -1, "dstDeviceId": -1})
    i = c.ints
    fields = [("bytes", i["bytes"]), ("copy kind", i["copyKind"])]
    fields += [("src device", i["srcDeviceId"]), ("dst device", i["dstDeviceId"])]
    args = assemble(len(c), [*json_pieces([*gpu_fields(c), *fields]), b"}"])
    mem = _enum_labels(exp, "ENUM_CUDA_MEM_KIND", MEM_KINDS)

    def label(code: int) -> str:
        copy, src, dst = code >> 16, (code >> 8) & 0xFF, code & 0xFF
        what = COPY_KINDS.get(copy, f"kind {copy}")
        return f"Memcpy {what} ({mem.get(src, 'Unknown')} -> {mem.get(dst, 'Unknown')})"

    codes = (i["copyKind"] << 16) | ((i["srcKind"] & 0xFF) << 8) | (i["dstKind"] & 0xFF)
    return gpu_rows(
        c, EventKind.MEMCPY, names_by_code(names, codes, label), names.intern("gpu_memcpy"), args
    )


def read_memset(exp: Export, names: Names) -> Rows | None:
    t = "CUPTI_ACTIVITY_KIND_MEMSET"
    if not exp.has(t):
        return None
    c = exp.read(t, {**GPU_INTS, "bytes": 0, "value": 0, "memKind": 7})
    i = c.ints
    fields = [*gpu_fields(c), ("bytes", i["bytes"]), ("value", i["value"])]
    args = assemble(len(c), [*json_pieces(fields), b"}"])
    mem = _enum_labels(exp, "ENUM_CUDA_MEM_KIND", MEM_KINDS)
    gids = names_by_code(names, i["memKind"], lambda k: f"Memset ({mem.get(k, 'Unknown')})")
    return gpu_rows(c, EventKind.MEMSET, gids, names.intern("gpu_memset"), args)


def runtime_name(raw: str) -> str:
    """``cudaLaunchKernel_v7000`` -> ``cudaLaunchKernel`` (the name Kineto and users know)."""
    return _API_VERSION.sub("", raw)


def read_runtime(exp: Export, names: Names) -> Rows | None:
    t = "CUPTI_ACTIVITY_KIND_RUNTIME"
    if not exp.has(t):
        return None
    times = {"start": REQUIRED_TIME, "end": REQUIRED_TIME}
    c = exp.read(t, {**times, "globalTid": 0, "correlationId": -1, "nameId": -1})
    i = c.ints
    n = len(c)
    gids = names.remap(names.from_ids(i["nameId"]), runtime_name)
    # Driver API calls (cu*) versus runtime calls (cuda*), as Kineto labels them.
    uniq, inv = compact(gids, len(names))
    is_driver = (
        np.array([not names[int(g)].startswith("cuda") for g in uniq], dtype=bool)[inv]
        if n
        else np.zeros(0, dtype=bool)
    )
    kind = np.where(is_driver, int(EventKind.DRIVER), int(EventKind.RUNTIME)).astype(np.int64)
    cat = np.where(is_driver, names.intern("cuda_driver"), names.intern("cuda_runtime"))
    thread = i["globalTid"]
    return Rows(
        kind=kind,
        start=i["start"],
        end=i["end"],
        name=gids,
        cat=cat.astype(np.int64),
        correlation=i["correlationId"],
        process=(thread >> 24) << 24,
        thread=thread,
        device=full(n, -1),
        stream=full(n, -1),
        # As Kineto writes it, for exports and checks that read the args.
        args=assemble(n, [*json_pieces([("correlation", i["correlationId"])]), b"}"]),
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
