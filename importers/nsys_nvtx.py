"""NVTX ranges and marks of an Nsight Systems export.

Names come from ``text`` or, when the string was registered, from ``textId`` via ``StringIds``.
Ranges written by ``torch.autograd.profiler.emit_nvtx`` (``aten::mm, seq = 3, op_id = 7``) become
CPU ops named ``aten::mm`` with ``seq``/``op_id`` in their args, as Kineto would show them. NCCL's
own ranges live in a separate NVTX domain; their payloads are kept for collective parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

import msgspec
import numpy as np

from echo_view.model.kinds import EventKind
from importers.nsys_db import Export
from importers.nsys_tables import (
    I64,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSH_POP,
    NVTX_START_END,
    Names,
    Rows,
    torch_op,
)

TABLE = "NVTX_EVENTS"
_ENCODE = msgspec.json.Encoder()


@dataclass
class Nvtx:
    """NVTX events as :class:`Rows` plus what the NCCL reader needs."""

    rows: Rows
    domain: I64
    nccl_domains: frozenset[int]
    domain_names: dict[int, str]
    json_payloads: dict[int, str] = field(default_factory=dict)
    blob_payloads: dict[int, bytes] = field(default_factory=dict)
    open_ranges: int = 0

    def nccl_mask(self) -> np.ndarray:
        """Rows that belong to an NCCL domain."""
        if not self.nccl_domains:
            return np.zeros(len(self.domain), dtype=bool)
        return np.isin(self.domain, np.fromiter(self.nccl_domains, dtype=np.int64))


def _empty() -> Nvtx:
    z = np.empty(0, dtype=np.int64)
    return Nvtx(Rows(z, z, z, z, z, z, z, z, z, z, []), z, frozenset(), {})


def read_nvtx(exp: Export, names: Names) -> Nvtx:
    """Read marks and push/pop and start/end ranges of every domain."""
    if not exp.has(TABLE):
        return _empty()
    cols = exp.columns(TABLE)
    c = exp.col
    numeric = [f'"{n}"' for n in _NUMERIC if n in cols]
    text_cols = [f'"{n}"' for n in ("jsonText", "jsonTextId", "binaryData") if n in cols]
    # JSON and blob payloads exist only with --include-json / --include-blobs. Payloads are rare,
    # so a cheap probe keeps the main scan narrow when there are none.
    said_off = all(
        exp.meta.get(f"EXPORT_PARAM_INCLUDE_{k}", "").lower() == "false" for k in ("JSON", "BLOBS")
    )
    if said_off:
        text_cols = []
    has_text = bool(text_cols) and _any_set(exp, text_cols)
    has_numeric = bool(numeric) and _any_set(exp, numeric)
    optional = [
        '"text"' if "text" in cols else "NULL",
        f"COALESCE({', '.join(numeric)}, NULL)" if has_numeric else "NULL",
    ]
    if has_text:
        optional += [
            '"jsonText"' if "jsonText" in cols else "NULL",
            '"jsonTextId"' if "jsonTextId" in cols else "NULL",
            '"binaryData"' if "binaryData" in cols else "NULL",
        ]
    # One scan; event type and domain share one integer to keep the row narrow.
    sql = (
        f'SELECT start, COALESCE("end", -1), {c(TABLE, "globalTid", "0")}, '
        f"eventType | ({c(TABLE, 'domainId', '0')} << 8), {c(TABLE, 'textId')}, "
        + ", ".join(optional)
        + f' FROM "{TABLE}" WHERE eventType IN ({NVTX_MARK}, {NVTX_PUSH_POP}, '
        f"{NVTX_START_END}, {NVTX_DOMAIN_CREATE})"
    )
    raw = exp.query(sql, TABLE)
    if not raw:
        return _empty()
    columns = list(zip(*raw, strict=True))
    start, end, tid, packed, text_id = (np.array(columns[j], dtype=np.int64) for j in range(5))
    texts: tuple[str | None, ...] = columns[5]
    etype, dom = packed & 0xFF, packed >> 8

    # Names: registered strings through StringIds; inline text (mostly torch's emit_nvtx ranges,
    # "aten::mm, seq = 3, op_id = 7") split into op name and args with C-level string methods.
    n_all = len(raw)
    in_default = (dom == 0).tolist()
    op_names: list[str | None] = list(texts)
    args: list[bytes] = [b""] * n_all
    op_rows: list[int] = []
    rare: list[int] = []
    for i, t in enumerate(texts):
        if t is None or not in_default[i]:
            continue
        head, sep, op_id = t.rpartition(", op_id = ")
        if not sep:
            continue
        if not (op_id.isdigit() and op_id.isascii()):
            rare.append(i)  # "sizes = [...]" (record_shapes) or an unusual layout
            continue
        name, sep, seq = head.rpartition(", seq = ")
        if sep and seq.isdigit() and seq.isascii():
            op_names[i], args[i] = name, f'{{"seq":{seq},"op_id":{op_id}}}'.encode()
        else:
            op_names[i], args[i] = head, f'{{"op_id":{op_id}}}'.encode()
        op_rows.append(i)
    for i in rare:
        parsed = torch_op(texts[i] or "")
        if parsed is not None:
            op_names[i], args[i] = parsed
            op_rows.append(i)
    is_op = np.zeros(n_all, dtype=bool)
    is_op[op_rows] = True
    inline = np.flatnonzero(text_id < 0)
    gid = names.from_ids(np.maximum(text_id, 0))
    if len(inline):
        gid[inline] = _intern_column(names, [op_names[i] or "" for i in inline.tolist()])

    domain_names: dict[int, str] = {}
    for i in np.flatnonzero(etype == NVTX_DOMAIN_CREATE).tolist():
        domain_names[int(dom[i])] = names[int(gid[i])]
    keep = np.flatnonzero(etype != NVTX_DOMAIN_CREATE)
    if len(keep) != n_all:
        start, end, etype, tid, dom, gid, is_op = (
            a[keep] for a in (start, end, etype, tid, dom, gid, is_op)
        )
        args = [args[i] for i in keep.tolist()]
    n = len(keep)

    is_mark = etype == NVTX_MARK
    open_range = ~is_mark & (end < start)
    end = np.where(is_mark | open_range, start, end)
    kind = np.full(n, int(EventKind.USER_ANNOTATION), dtype=np.int64)
    kind[is_op] = int(EventKind.CPU_OP)
    kind[is_mark] = int(EventKind.INSTANT)

    json_payloads, blob_payloads = _payloads(
        names, keep, tuple(columns[7:10]) if has_text else None, columns[6], args
    )
    nccl = _nccl_domains(names, dom, gid, domain_names)
    cat = np.empty(n, dtype=np.int64)
    for d in np.unique(dom).tolist():
        label = "nvtx" if d == 0 else f"nvtx:{domain_names.get(d, f'domain {d}')}"
        if d in nccl and d not in domain_names:
            label = "nvtx:NCCL"
        cat[dom == d] = names.intern(label)

    rows = Rows(
        kind=kind,
        start=start,
        end=end,
        name=gid,
        cat=cat,
        correlation=np.full(n, -1, dtype=np.int64),
        process=(tid >> 24) << 24,
        thread=tid,
        device=np.full(n, -1, dtype=np.int64),
        stream=np.full(n, -1, dtype=np.int64),
        args=args,
    )
    return Nvtx(
        rows,
        dom,
        frozenset(nccl),
        domain_names,
        json_payloads,
        blob_payloads,
        int(open_range.sum()),
    )


def _intern_column(names: Names, values: list[str]) -> I64:
    """Registry ids of a column of strings, interning each distinct value once."""
    distinct = list(dict.fromkeys(values))
    ids = np.array([names.intern(v) for v in distinct], dtype=np.int64)
    pos = {v: i for i, v in enumerate(distinct)}
    return ids[np.fromiter(map(pos.__getitem__, values), dtype=np.int64, count=len(values))]


def _any_set(exp: Export, cols: list[str]) -> bool:
    cond = " OR ".join(f"{c} IS NOT NULL" for c in cols)
    return bool(exp.query(f'SELECT 1 FROM "{TABLE}" WHERE {cond} LIMIT 1', TABLE))


def _payloads(
    names: Names,
    keep: I64,
    texts: tuple[tuple[Any, ...], ...] | None,
    num: tuple[Any, ...],
    args: list[bytes],
) -> tuple[dict[int, str], dict[int, bytes]]:
    """NVTX payloads by (kept) row: JSON text and binary blobs are returned for the NCCL reader;
    numeric and JSON payloads also go to the event's args."""
    json_payloads: dict[int, str] = {}
    blob_payloads: dict[int, bytes] = {}
    new_of = np.full(len(num), -1, dtype=np.int64)
    new_of[keep] = np.arange(len(keep))
    # Most events carry no payload: tuple.count(None) skips empty columns at C speed.
    if num.count(None) != len(num):
        for old, value in enumerate(num):
            if value is not None and new_of[old] >= 0:
                args[int(new_of[old])] = _ENCODE.encode({"payload": value})
    if texts is None:
        return json_payloads, blob_payloads
    json_text, json_id, blob = texts
    for old, (js, jid, bl) in enumerate(zip(json_text, json_id, blob, strict=True)):
        i = int(new_of[old])
        if i < 0 or (js is None and jid is None and bl is None):
            continue
        if js is None and jid is not None:
            js = names[int(names.from_ids(np.array([int(jid)], dtype=np.int64))[0])]
        if js is not None:
            json_payloads[i] = str(js)
            args[i] = _ENCODE.encode({"payload": str(js)})
        elif bl is not None:
            blob_payloads[i] = bytes(bl)
    return json_payloads, blob_payloads


_NUMERIC = ("int64Value", "uint64Value", "int32Value", "uint32Value", "doubleValue", "floatValue")


def _nccl_domains(names: Names, dom: I64, gid: I64, domain_names: dict[int, str]) -> set[int]:
    """Domains named ``NCCL``, or (when the window missed the domain's creation) a non-default
    domain whose every event is named ``nccl*``."""
    out = {d for d, name in domain_names.items() if name.upper() == "NCCL"}
    for d in np.unique(dom).tolist():
        if d == 0 or d in out or d in domain_names:
            continue
        uniq = np.unique(gid[dom == d])
        if all(names[int(g)].startswith("nccl") for g in uniq):
            out.add(d)
    return out
