"""Collectives and process groups of one Kineto trace (the ``CollectiveTable``).

One collective row per NCCL/RCCL kernel (``ncclKernel_*``, ``ncclDevKernel_*``), plus one per
``record_param_comms`` CPU op that names a collective but launched no such kernel (gloo, CPU-only
runs; ``wait`` and other names that are no collective are skipped). For a kernel:

- kind, algorithm, protocol and dtype come from the kernel name
  (:func:`echo_view.model.parse_comm_kernel_name`); a name without the operation
  (``ncclDevKernel_Generic``) takes the kind from the ``Collective name`` argument;
- the other facts come from the kernel's own args (``Collective name``, ``In msg nelems``,
  ``Out msg nelems``, ``dtype``, ``Group size``, ``Process Group Name``/``Ranks``/
  ``Description``, ``Seq``), or, when the kernel has none, from its ``record_param_comms`` op:
  the one sharing the kernel's or its launch's ``External id``, else the innermost one enclosing
  the launch (found through ``correlation``) on the launch's thread;
- ``bytes`` is the per-rank payload: ``Out msg nelems`` for all-gather, gather and receives,
  ``In msg nelems`` otherwise, times the element size of the dtype; unknown stays -1;
- ``seq`` is ``Seq`` when every collective of the group carries it, else the position of the
  collective among that group's collectives on this rank, in start order; -1 when the group is
  unknown (PyTorch's ``Sequence number`` is autograd's and is not used).

Process groups come from ``distributedInfo.pg_config`` (``ranks`` a list or a string such as
``"[0, 1]"``) and from the ``Process Group *`` arguments.
"""

from __future__ import annotations

import functools
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np
import numpy.typing as npt

from echo_view.model import (
    NONE,
    CollectiveKind,
    CollectiveTable,
    EventKind,
    ProcessGroup,
    StringTable,
    collective_kind_from_name,
    parse_comm_kernel_name,
)
from echo_view.model.collectives import collective
from echo_view.model.dtypes import canonical_dtype, dtype_bytes
from echo_view.model.job import group_ranks
from echo_view.model.trace import Text
from importers.event_args import RowDecoder
from importers.kineto.rows import I32, I64, unique

_COMMS_OP = "record_param_comms"


@dataclass
class EventView:
    """The event columns the collective and step builders read."""

    kind: npt.NDArray[np.uint8]
    name: I32
    lane: I32
    start_ns: I64
    dur_ns: I64
    correlation: I64
    external_id: I64
    args_blob: Text
    args_offsets: I64


class CollArgs(msgspec.Struct, gc=False):
    """The collective arguments of a kernel or ``record_param_comms`` op (others skipped)."""

    name: Any = msgspec.field(default=None, name="Collective name")
    in_nelems: Any = msgspec.field(default=None, name="In msg nelems")
    out_nelems: Any = msgspec.field(default=None, name="Out msg nelems")
    dtype: Any = None
    pg_name: Any = msgspec.field(default=None, name="Process Group Name")
    pg_ranks: Any = msgspec.field(default=None, name="Process Group Ranks")
    pg_desc: Any = msgspec.field(default=None, name="Process Group Description")
    seq: Any = msgspec.field(default=None, name="Seq")

    def present(self) -> bool:
        """Whether these args describe a collective at all."""
        return not (
            self.name is None
            and self.in_nelems is None
            and self.out_nelems is None
            and self.pg_name is None
        )


_COLL_ARGS = RowDecoder(CollArgs)


def coll_args(ev: EventView, rows: list[int]) -> list[CollArgs]:
    """:class:`CollArgs` of each row, decoded in one call (rows whose args are not an object
    get empty ones)."""
    return _COLL_ARGS(ev.args_blob, ev.args_offsets, rows)


@functools.lru_cache(maxsize=256)
def _kind_named(name: str) -> CollectiveKind:
    return collective_kind_from_name(name)


@dataclass
class Collectives:
    """What :func:`build_collectives` found."""

    table: CollectiveTable
    groups: tuple[ProcessGroup, ...]
    notes: dict[str, int] = field(default_factory=dict)


class _Groups:
    """Process groups by name, ``pg_config`` first."""

    def __init__(self, pg_config: object) -> None:
        self.groups: list[ProcessGroup] = []
        self.by_name: dict[str, int] = {}
        for pg in pg_config if isinstance(pg_config, list) else []:
            if not isinstance(pg, dict):
                continue
            name = pg.get("pg_name")
            ranks = group_ranks(pg.get("ranks"))
            if name is None or ranks is None:
                continue
            desc = pg.get("pg_desc")
            self.add(str(name), ranks, desc if isinstance(desc, str) else "")

    def add(self, name: str, ranks: tuple[int, ...], desc: str) -> int:
        gid = self.by_name.get(name)
        if gid is None:
            gid = self.by_name[name] = len(self.groups)
            self.groups.append(ProcessGroup(name, ranks, desc))
        return gid

    def from_args(self, args: CollArgs) -> int:
        """Group of a collective's args (-1 when they name none)."""
        name = args.pg_name
        if name is None or isinstance(name, (dict, list)):
            return NONE
        name = str(name)
        if name in self.by_name:
            return self.by_name[name]
        ranks = group_ranks(args.pg_ranks)
        if ranks is None:
            return NONE
        desc = args.pg_desc
        return self.add(name, ranks, desc if isinstance(desc, str) else "")


def _comms_ops(ev: EventView, strings: StringTable) -> I64:
    sid = strings.id_of(_COMMS_OP)
    if sid is None:
        return np.zeros(0, dtype=np.int64)
    return np.flatnonzero((ev.name == sid) & (ev.kind == int(EventKind.CPU_OP)))


def _lookup(keys: I64, rows: I64, queries: I64) -> I64:
    """For each query, the row whose key equals it (the first in ``rows`` order), else -1."""
    out = np.full(len(queries), NONE, dtype=np.int64)
    if not len(keys) or not len(queries):
        return out
    order = np.argsort(keys, kind="stable")
    sorted_keys = keys[order]
    pos = np.searchsorted(sorted_keys, queries)
    ok = (pos < len(sorted_keys)) & (queries != NONE)
    ok[ok] = sorted_keys[pos[ok]] == queries[ok]
    out[ok] = rows[order[pos[ok]]]
    return out


def link_comms_ops(ev: EventView, kernels: I64, comms: I64) -> I64:
    """The ``record_param_comms`` row of each kernel (-1 when none): same ``External id`` as
    the kernel or as its launch, else the innermost one enclosing the launch on its thread."""
    out = np.full(len(kernels), NONE, dtype=np.int64)
    if not len(kernels) or not len(comms):
        return out
    launch_kinds = np.array([int(EventKind.RUNTIME), int(EventKind.DRIVER)], dtype=np.uint8)
    launches = np.flatnonzero(np.isin(ev.kind, launch_kinds) & (ev.correlation != NONE))
    launch = _lookup(ev.correlation[launches], launches, ev.correlation[kernels])
    comms_ext = ev.external_id[comms]
    out = _lookup(comms_ext, comms, ev.external_id[kernels])
    has_launch = launch >= 0
    via_launch = np.full(len(kernels), NONE, dtype=np.int64)
    via_launch[has_launch] = _lookup(comms_ext, comms, ev.external_id[launch[has_launch]])
    out = np.where(out >= 0, out, via_launch)
    todo = np.flatnonzero((out < 0) & has_launch)
    if len(todo):
        out[todo] = _enclosing(ev, comms, launch[todo])
    return out


def _enclosing(ev: EventView, ops: I64, rows: I64) -> I64:
    """For each row, the latest-starting op on its lane whose span holds the row's start."""
    out = np.full(len(rows), NONE, dtype=np.int64)
    lane, start = ev.lane[ops], ev.start_ns[ops]
    order = np.lexsort((start, lane))
    ops, lane, start = ops[order], lane[order], start[order]
    end = start + ev.dur_ns[ops]
    q_lane, q_t = ev.lane[rows], ev.start_ns[rows]
    for ln in unique(q_lane).tolist():
        lo, hi = np.searchsorted(lane, [ln, ln + 1])
        sel = np.flatnonzero(q_lane == ln)
        if lo == hi:
            continue
        j = lo + np.searchsorted(start[lo:hi], q_t[sel], side="right") - 1
        for k, jj in zip(sel.tolist(), j.tolist(), strict=True):
            t = int(q_t[k])
            # Ops of one thread rarely nest; walk back a little in case they do.
            for c in range(jj, max(lo - 1, jj - 16), -1):
                if start[c] <= t <= end[c]:
                    out[k] = ops[c]
                    break
    return out


def _int(v: object) -> int | None:
    return v if isinstance(v, int) and not isinstance(v, bool) else None


def build_collectives(ev: EventView, strings: StringTable, pg_config: object) -> Collectives:
    """Collective rows and process groups of one trace (interning new strings)."""
    groups = _Groups(pg_config)
    notes: dict[str, int] = {}
    kernels = np.flatnonzero(ev.kind == int(EventKind.KERNEL))
    parsed: dict[int, Any] = {}
    for name_id in unique(ev.name[kernels]).tolist():
        parsed[name_id] = parse_comm_kernel_name(strings[name_id])
    nccl_names = np.array([n for n, info in parsed.items() if info is not None], dtype=np.int32)
    nccl = kernels[np.isin(ev.name[kernels], nccl_names)]
    comms = _comms_ops(ev, strings)
    linked = link_comms_ops(ev, nccl, comms)
    rows: list[tuple[int, int, int, str | None, int, int, str | None, str | None]] = []
    seqs: list[int | None] = []
    used_ops = set(linked[linked >= 0].tolist())
    kernel_args = coll_args(ev, nccl.tolist())
    op_rows = comms.tolist()
    op_args = dict(zip(op_rows, coll_args(ev, op_rows), strict=True))
    for r, op, args in zip(nccl.tolist(), linked.tolist(), kernel_args, strict=True):
        info = parsed[int(ev.name[r])]
        if not args.present() and op >= 0:
            args = op_args[op]
        named = _kind_named(str(args.name or ""))
        kind = info.collective if info.collective != CollectiveKind.UNKNOWN else named
        dtype = canonical_dtype(args.dtype) or canonical_dtype(info.dtype)
        nbytes = _payload(args, named if named != CollectiveKind.UNKNOWN else kind, dtype)
        rows.append(
            (r, int(kind), nbytes, dtype, groups.from_args(args), 0, info.algorithm, info.protocol)
        )
        seqs.append(_int(args.seq))
    for op, args in op_args.items():
        if op in used_ops or args.name is None:
            continue
        kind = _kind_named(str(args.name))
        if kind == CollectiveKind.UNKNOWN:
            # "wait" and other bookkeeping calls are recorded too; they move no data.
            notes["comms_ops_not_collectives"] = notes.get("comms_ops_not_collectives", 0) + 1
            continue
        dtype = canonical_dtype(args.dtype)
        nbytes = _payload(args, kind, dtype)
        rows.append((op, int(kind), nbytes, dtype, groups.from_args(args), 0, None, None))
        seqs.append(_int(args.seq))
    if not rows:
        return Collectives(CollectiveTable.empty(), tuple(groups.groups), notes)
    seq = _sequence(ev, rows, seqs)
    order = np.argsort(np.array([ev.start_ns[r[0]] for r in rows]), kind="stable")

    def sid(s: str | None) -> int:
        return NONE if s is None else strings.intern(s)

    table = CollectiveTable(
        event=np.array([rows[i][0] for i in order], dtype=np.int32),
        kind=np.array([rows[i][1] for i in order], dtype=np.uint8),
        bytes=np.array([rows[i][2] for i in order], dtype=np.int64),
        dtype=np.array([sid(rows[i][3]) for i in order], dtype=np.int32),
        group=np.array([rows[i][4] for i in order], dtype=np.int32),
        seq=seq[order],
        algorithm=np.array([sid(rows[i][6]) for i in order], dtype=np.int32),
        protocol=np.array([sid(rows[i][7]) for i in order], dtype=np.int32),
    )
    unknown_group = int((table.group == NONE).sum())
    if unknown_group:
        notes["collectives_without_group"] = unknown_group
    return Collectives(table, tuple(groups.groups), notes)


def _payload(args: CollArgs, kind: CollectiveKind, dtype: str | None) -> int:
    n = _int(args.out_nelems if collective(kind).output_sized else args.in_nelems)
    size = dtype_bytes(dtype)
    if n is None or n < 0 or size is None or n * size >= 1 << 63:
        return NONE  # (a byte count past int64 is no size: unknown, as a count past it is)
    return n * size


def _sequence(ev: EventView, rows: list[Any], seqs: list[int | None]) -> I64:
    """``Seq`` per group when all its collectives have it, else the order within the group."""
    out = np.full(len(rows), NONE, dtype=np.int64)
    by_group: dict[int, list[int]] = {}
    for i, row in enumerate(rows):
        if row[4] != NONE:
            by_group.setdefault(row[4], []).append(i)
    for members in by_group.values():
        given = [seqs[i] for i in members]
        if all(s is not None for s in given):
            out[members] = [s for s in given if s is not None]
            continue
        members.sort(key=lambda i: (int(ev.start_ns[rows[i][0]]), rows[i][0]))
        out[members] = np.arange(len(members))
    return out
