"""NCCL collectives of an Nsight Systems export.

NCCL kernels are recognised by name (``ncclKernel_*`` before NCCL 2.19, ``ncclDevKernel_*``
after). Their parameters come from NCCL's own NVTX ranges when the export carries the payloads
(``nsys export --include-json=true`` gives ``jsonText``, ``--include-blobs=true`` gives
``binaryData``): a kernel is matched to the NCCL calls on the thread that launched it — the call
whose range contains the launch, or, for a launch inside ``ncclGroupEnd``, every call of that
group. Without payloads every parameter that the kernel name does not give stays unknown (-1).
"""

from __future__ import annotations

import bisect
import struct
from collections import defaultdict
from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from echo_view.model.collectives import collective, collective_kind_from_name
from echo_view.model.kinds import CollectiveKind
from echo_view.model.nccl import parse_nccl_kernel_name
from importers.nsys.db import Export
from importers.nsys.nvtx import Nvtx
from importers.nsys.tables import I64, Names, Rows

# NVTX payload entry types (nvToolsExtPayload.h) -> (struct code, size).
_ENTRY_TYPES: dict[int, tuple[str, int]] = {
    1: ("b", 1), 2: ("B", 1), 3: ("h", 2), 4: ("H", 2), 5: ("i", 4), 6: ("I", 4),
    7: ("q", 8), 8: ("Q", 8), 9: ("q", 8), 10: ("Q", 8), 11: ("b", 1), 12: ("B", 1),
    13: ("h", 2), 14: ("H", 2), 15: ("i", 4), 16: ("I", 4), 17: ("q", 8), 18: ("Q", 8),
    19: ("f", 4), 20: ("d", 8), 22: ("Q", 8), 23: ("Q", 8),
}  # fmt: skip
_ENCODE = msgspec.json.Encoder()
_BLOB_HEADER = struct.Struct("<QQQQ")  # domainId, schemaId, payloadSize, payloadOffset
_GROUP_START, _GROUP_END = "ncclGroupStart", "ncclGroupEnd"
_NOT_OPS = ("ncclGroup", "ncclComm", "ncclGetVersion", "ncclGetUniqueId", "ncclMem")


@dataclass
class Payload:
    """What one NCCL call's payload says (None where it does not say)."""

    comm: int | None = None
    nbytes: int | None = None
    nranks: int | None = None
    rank: int | None = None
    peer: int | None = None
    root: int | None = None
    redop: str | None = None


@dataclass
class Collective:
    """One NCCL kernel as a collective, before it is placed in a rank's tables."""

    row: int  # kernel row (file level)
    kind: CollectiveKind
    nbytes: int = -1
    dtype: str | None = None
    algorithm: str | None = None
    protocol: str | None = None
    comm: int | None = None
    calls: list[str] = field(default_factory=list)
    #: Why ``nbytes`` is unknown ("" when it is known).
    missing: str = ""


@dataclass
class Communicator:
    nranks: int | None = None
    members: dict[int, int] = field(default_factory=dict)  # globalPid -> rank in communicator


def _norm(key: str) -> str:
    return "".join(ch for ch in key.lower() if ch.isalnum())


def payload_from_fields(fields: dict[str, Any]) -> Payload:
    """Interpret decoded payload entries by NCCL's entry names."""
    p = Payload()
    for key, value in fields.items():
        k = _norm(key)
        if isinstance(value, bool):
            continue
        if "communicator" in k and isinstance(value, int):
            p.comm = value
        elif ("messagesize" in k or k == "bytes") and isinstance(value, int):
            p.nbytes = value
        elif k in ("noofranks", "nranks", "numranks") and isinstance(value, int):
            p.nranks = value
        elif k in ("rank", "myrank") and isinstance(value, int):
            p.rank = value
        elif k.startswith("peer") and isinstance(value, int):
            p.peer = value
        elif k == "root" and isinstance(value, int):
            p.root = value
        elif "reduction" in k or k == "redop":
            p.redop = str(value)
    return p


def _flatten(value: Any, out: dict[str, Any]) -> None:
    if isinstance(value, dict):
        for k, v in value.items():
            if isinstance(v, dict | list):
                _flatten(v, out)
            else:
                out[str(k)] = v
    elif isinstance(value, list):
        for v in value:
            _flatten(v, out)


class PayloadDecoder:
    """Decodes ``jsonText`` and ``binaryData`` payloads with the export's schema tables."""

    def __init__(self, exp: Export) -> None:
        self.schemas: dict[tuple[int, int], list[tuple[str, int, int]]] = {}
        self.undecoded = 0
        t = "NVTX_PAYLOAD_SCHEMA_ENTRIES"
        if exp.has(t) and {"domainId", "schemaId", "idx", "type", "name"} <= exp.columns(t):
            sql = (
                f"SELECT domainId, schemaId, idx, type, name, {exp.col(t, 'offset')} "
                f'FROM "{t}" ORDER BY domainId, schemaId, idx'
            )
            entries: dict[tuple[int, int], dict[int, tuple[int, str, int]]] = defaultdict(dict)
            for d, s, idx, typ, name, off in exp.query(sql, t):
                entries[(int(d), int(s))].setdefault(int(idx), (int(typ), str(name), int(off)))
            for key, by_idx in entries.items():
                self.schemas[key] = self._layout([by_idx[i] for i in sorted(by_idx)])

    @staticmethod
    def _layout(entries: list[tuple[int, str, int]]) -> list[tuple[str, int, int]]:
        """``(name, type, offset)``; a missing offset follows the C layout of the types."""
        out: list[tuple[str, int, int]] = []
        pos = 0
        for typ, name, off in entries:
            size = _ENTRY_TYPES.get(typ, ("i", 4))[1]  # enums (NCCL's reduction op) are ints
            if off < 0:
                off = (pos + size - 1) // size * size
            out.append((name, typ, off))
            pos = off + size
        return out

    def decode(self, domain: int, json_text: str | None, blob: bytes | None) -> Payload | None:
        if json_text is not None:
            try:
                fields: dict[str, Any] = {}
                _flatten(msgspec.json.decode(json_text), fields)
                return payload_from_fields(fields)
            except msgspec.DecodeError:
                self.undecoded += 1
                return None
        if blob is not None:
            p = self._decode_blob(domain, blob)
            if p is None:
                self.undecoded += 1
            return p
        return None

    def _decode_blob(self, domain: int, blob: bytes) -> Payload | None:
        if len(blob) < _BLOB_HEADER.size:
            return None
        dom, schema, size, offset = _BLOB_HEADER.unpack_from(blob)
        entries = self.schemas.get((dom, schema))
        if dom != domain or entries is None or offset + size > len(blob):
            return None
        payload = blob[offset : offset + size]
        fields: dict[str, Any] = {}
        for name, typ, off in entries:
            code, width = _ENTRY_TYPES.get(typ, ("i", 4))
            if off + width <= len(payload):
                fields[name] = struct.unpack_from("<" + code, payload, off)[0]
        return payload_from_fields(fields)


def nccl_args(args: bytes, coll: Collective) -> bytes:
    """A kernel's args JSON with what its NCCL calls said added (calls, communicator, bytes)."""
    extra: dict[str, Any] = {}
    if coll.calls:
        extra["nccl calls"] = coll.calls
    if coll.comm is not None:
        extra["communicator"] = f"0x{coll.comm:016x}"
    if coll.nbytes >= 0:
        extra["bytes"] = coll.nbytes
    if not extra:
        return args
    body = _ENCODE.encode(extra)
    if not args or args == b"{}":
        return body
    return args[:-1] + b"," + body[1:]


def _call_kind(name: str) -> CollectiveKind:
    op = name.removeprefix("nccl")
    return collective_kind_from_name(op)


def find_collectives(
    exp: Export, names: Names, kernels: Rows, launch_of: I64, runtime: Rows | None, nvtx: Nvtx
) -> tuple[list[Collective], dict[int, Communicator], int]:
    """Collectives for every NCCL kernel row; also the communicators seen and the count of
    payloads that could not be decoded."""
    parsed: dict[int, Any] = {}
    found: list[Collective] = []
    for g in np.unique(kernels.name).tolist():
        info = parse_nccl_kernel_name(names[g])
        if info is not None:
            parsed[g] = info
    if not parsed:
        return found, {}, 0
    rows = np.flatnonzero(np.isin(kernels.name, np.fromiter(parsed, dtype=np.int64)))
    for r in rows.tolist():
        info = parsed[int(kernels.name[r])]
        found.append(Collective(r, info.collective, -1, info.dtype, info.algorithm, info.protocol))

    mask = nvtx.nccl_mask()
    if runtime is None or not mask.any():
        for coll in found:
            coll.missing = "the capture has no NCCL NVTX ranges (NCCL's ncclAllReduce, ncclSend...)"
        return found, {}, 0
    # The schema tables are read only when some call carries a payload.
    decoder = PayloadDecoder(exp) if nvtx.json_payloads or nvtx.blob_payloads else None
    calls = _calls_by_thread(names, nvtx, np.flatnonzero(mask), decoder)
    comms = _communicators(calls)
    for coll in found:
        launch = int(launch_of[coll.row])
        if launch < 0:
            coll.missing = "no CUDA launch of the kernel was captured"
            continue
        members = _members(calls.get(int(runtime.thread[launch]), []), int(runtime.start[launch]))
        _apply(coll, members, comms)
    return found, comms, decoder.undecoded if decoder is not None else 0


_Call = tuple[int, int, str, Payload | None, int]  # start, end, name, payload, globalPid


def _calls_by_thread(
    names: Names, nvtx: Nvtx, rows: I64, decoder: PayloadDecoder | None
) -> dict[int, list[_Call]]:
    """NCCL's calls per thread, by start (the longer first on ties)."""
    out: dict[int, list[_Call]] = defaultdict(list)
    r = nvtx.rows
    rows = rows[np.lexsort((-r.end[rows], r.start[rows]))]
    text = {g: names[g] for g in set(r.name[rows].tolist())}
    for i, start, end, name, process, thread in zip(
        rows.tolist(),
        r.start[rows].tolist(),
        r.end[rows].tolist(),
        r.name[rows].tolist(),
        r.process[rows].tolist(),
        r.thread[rows].tolist(),
        strict=True,
    ):
        payload = (
            decoder.decode(
                int(nvtx.domain[i]), nvtx.json_payloads.get(i), nvtx.blob_payloads.get(i)
            )
            if decoder is not None
            else None
        )
        out[thread].append((start, end, text[name], payload, process))
    return out


def _communicators(calls: dict[int, list[_Call]]) -> dict[int, Communicator]:
    comms: dict[int, Communicator] = {}
    for lst in calls.values():
        for _, _, _, p, process in lst:
            if p is None or p.comm is None or p.nranks is None:
                continue
            c = comms.setdefault(p.comm, Communicator())
            c.nranks = p.nranks
            if p.rank is not None:
                c.members[process] = p.rank
    return comms


def _members(calls: list[_Call], t: int) -> list[_Call]:
    """The NCCL calls behind a kernel launched at ``t`` on a thread with ``calls``."""
    starts = [c[0] for c in calls]
    i = bisect.bisect_right(starts, t) - 1
    container = None
    while i >= 0:
        if calls[i][1] >= t:  # innermost enclosing range: the latest start that still covers t
            container = i
            break
        i -= 1
    if container is None:
        return []
    name = calls[container][2]
    if name != _GROUP_END:
        return [] if name.startswith(_NOT_OPS) else [calls[container]]
    # The group: walk back to the ncclGroupStart that opened it at depth 0.
    depth, first = 0, container
    for j in range(container, -1, -1):
        nm = calls[j][2]
        if nm == _GROUP_END:
            depth += 1
        elif nm == _GROUP_START:
            depth -= 1
            if depth == 0:
                first = j
                break
    return [c for c in calls[first:container] if not c[2].startswith(_NOT_OPS)]


def _apply(coll: Collective, members: list[_Call], comms: dict[int, Communicator]) -> None:
    if not members:
        coll.missing = "no NCCL NVTX range encloses the kernel's launch"
        return
    coll.calls = [m[2] for m in members]
    kinds = {_call_kind(m[2]) for m in members}
    if coll.kind == CollectiveKind.UNKNOWN and len(kinds) == 1:
        coll.kind = next(iter(kinds))
    payloads = [(m[2], m[3]) for m in members]
    if any(p is None for _, p in payloads):
        names = ", ".join(sorted({n for n, p in payloads if p is None}))
        coll.missing = (
            f"its NCCL NVTX ranges ({names}) carry no payload (NVTX_EVENTS.binaryData and "
            "jsonText are empty), so no message size"
        )
        return
    comm_ids = {p.comm for _, p in payloads if p is not None}
    if len(comm_ids) == 1:
        coll.comm = next(iter(comm_ids))
    sizes = [(n, p.nbytes) for n, p in payloads if p is not None]
    if any(s is None for _, s in sizes):
        coll.missing = "its NCCL NVTX payload has no message size"
        return
    if coll.kind == CollectiveKind.SEND_RECV:
        sent = [s for n, s in sizes if n == "ncclSend" and s is not None]
        got = [s for n, s in sizes if n == "ncclRecv" and s is not None]
        coll.nbytes = sum(sent) if sent else sum(got)
        return
    total = sum(s for _, s in sizes if s is not None)
    # NCCL reports one rank's share for these (the catalogue's per_rank_payload); the model
    # wants the whole payload.
    if collective(coll.kind).per_rank_payload:
        comm = comms.get(coll.comm) if coll.comm is not None else None
        if comm is None or comm.nranks is None:
            # The payload gives one rank's share; without the rank count it stays unknown.
            coll.missing = "its communicator's rank count is unknown"
            return
        total *= comm.nranks
    coll.nbytes = total
