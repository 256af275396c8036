"""NVTX ranges and marks of an Nsight Systems export.

Names come from ``text`` or, when the string was registered, from ``textId`` via ``StringIds``.
Ranges written by ``torch.autograd.profiler.emit_nvtx`` (``aten::mm, seq = 3, op_id = 7``) become
CPU ops named ``aten::mm`` with ``seq``/``op_id`` in their args, as Kineto would show them. NCCL's
own ranges live in a separate NVTX domain; their payloads are kept for collective parameters.
"""

from __future__ import annotations

from dataclasses import dataclass, field

import msgspec
import numpy as np

from echo_view.model.kinds import EventKind
from importers.nsys.args import Packed, assemble, concat_rows, literal
from importers.nsys.db import Export
from importers.nsys.pages import Text
from importers.nsys.tables import (
    I64,
    NVTX_DOMAIN_CREATE,
    NVTX_MARK,
    NVTX_PUSH_POP,
    NVTX_START_END,
    Names,
    Rows,
    json_pieces,
    torch_op,
)
from importers.nsys.text import SizedOps, decoded, intern_ranges, split_sized_ops, split_torch_ops

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
    return Nvtx(Rows(z, z, z, z, z, z, z, z, z, z, Packed.empty()), z, frozenset(), {})


_NUMERIC = ("int64Value", "uint64Value", "int32Value", "uint32Value", "doubleValue", "floatValue")
_TEXTUAL = ("jsonText", "jsonTextId", "binaryData")
_KINDS = (NVTX_MARK, NVTX_PUSH_POP, NVTX_START_END, NVTX_DOMAIN_CREATE)


def read_nvtx(exp: Export, names: Names) -> Nvtx:
    """Read marks and push/pop and start/end ranges of every domain."""
    if not exp.has(TABLE):
        return _empty()
    ints = {"start": 0, "end": -1, "globalTid": 0, "eventType": -1, "domainId": 0, "textId": -1}
    c = exp.read(TABLE, ints, ("text",), (*_NUMERIC, *_TEXTUAL))
    etype_all = c.ints["eventType"]
    wanted = np.zeros(len(etype_all), dtype=bool)
    for k in _KINDS:  # a few codes: comparisons, not a sort
        wanted |= etype_all == k
    keep = np.flatnonzero(wanted)
    if not len(keep):
        return _empty()
    i = {k: v[keep] for k, v in c.ints.items()}
    start, end, tid, etype, dom, text_id = (
        i[k] for k in ("start", "end", "globalTid", "eventType", "domainId", "textId")
    )
    n_all = len(keep)
    t = c.texts["text"]
    text = Text(t.data, t.start[keep], t.length[keep], t.null[keep])

    # Names: registered strings through StringIds; inline text (mostly torch's emit_nvtx ranges,
    # "aten::mm, seq = 3, op_id = 7") split into op name and ids, all rows at once.
    torch_rows = np.flatnonzero(~text.null & (dom == 0))
    ops = split_torch_ops(text, torch_rows)
    name_length = text.length.copy()
    op_rows = torch_rows[ops.rows]
    name_length[op_rows] = ops.name_length
    is_op = np.zeros(n_all, dtype=bool)
    is_op[op_rows] = True
    with_seq = ops.seq >= 0
    args = _scatter(
        n_all,
        [
            (op_rows[with_seq], [("seq", ops.seq[with_seq]), ("op_id", ops.op_id[with_seq])]),
            (op_rows[~with_seq], [("op_id", ops.op_id[~with_seq])]),
        ],
    )
    gid = names.from_ids(text_id)  # (inline rows, text_id < 0, are named below)
    # The other layouts (record_shapes' "sizes = [...]") are named below, by the byte split or
    # the pattern: their whole texts (nearly all distinct) are not interned.
    odd = torch_rows[ops.odd]
    is_inline = text_id < 0
    is_inline[odd] = False
    inline = np.flatnonzero(is_inline)
    if len(inline):
        gid[inline] = intern_ranges(names, text.data, text.start[inline], name_length[inline])
    # Those in record_shapes' plain form all at once on the bytes, the rest by the pattern.
    sized = split_sized_ops(text, odd)
    sized_rows = odd[sized.rows]
    is_op[sized_rows] = True
    own = text_id[sized_rows] < 0
    gid[sized_rows[own]] = intern_ranges(
        names, text.data, text.start[sized_rows[own]], sized.name_length[own]
    )
    args = args.replace_rows(sized_rows, _sized_args(text, sized))
    odd = np.delete(odd, sized.rows)
    odd_args: dict[int, bytes] = {}
    for first, wholes in decoded(text.data, text.start[odd], text.length[odd]):
        for r, whole in zip(odd[first : first + len(wholes)].tolist(), wholes, strict=True):
            parsed = torch_op(whole)
            if parsed is not None:
                is_op[r] = True
                odd_args[r] = parsed[1]
            if text_id[r] < 0:
                gid[r] = names.intern(whole if parsed is None else parsed[0])
    args = args.replace(odd_args)

    domain_names: dict[int, str] = {}
    for r in np.flatnonzero(etype == NVTX_DOMAIN_CREATE).tolist():
        domain_names[int(dom[r])] = names[int(gid[r])]
    kept = np.flatnonzero(etype != NVTX_DOMAIN_CREATE)
    rowid = c.rowid[keep]
    if len(kept) != n_all:
        start, end, etype, tid, dom, gid, is_op, rowid = (
            a[kept] for a in (start, end, etype, tid, dom, gid, is_op, rowid)
        )
        args = args.take(kept)
    n = len(kept)

    is_mark = etype == NVTX_MARK
    open_range = ~is_mark & (end < start)
    end = np.where(is_mark | open_range, start, end)
    kind = np.full(n, int(EventKind.USER_ANNOTATION), dtype=np.int64)
    kind[is_op] = int(EventKind.CPU_OP)
    kind[is_mark] = int(EventKind.INSTANT)

    payload_rows = np.zeros(len(c), dtype=bool)
    for col in (*_NUMERIC, *_TEXTUAL):
        payload_rows |= c.present[col]
    json_payloads: dict[int, str] = {}
    blob_payloads: dict[int, bytes] = {}
    if payload_rows[keep][kept].any():
        args = _payloads(exp, names, rowid, args, json_payloads, blob_payloads)
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


def _sized_args(text: Text, sized: SizedOps) -> Packed:
    """The args :func:`~importers.nsys.tables.torch_op` gives these ranges,
    ``{"seq":N,"op_id":M,"sizes":"S"}`` (``seq`` and ``sizes`` where present), column-wise."""
    n = len(sized.rows)
    if not n:
        return Packed.empty()
    with_seq, with_sizes = sized.seq >= 0, sized.sizes_length >= 0
    parts: list[Packed] = []
    order: list[I64] = []
    for seq_on in (True, False):
        for sizes_on in (True, False):
            g = np.flatnonzero((with_seq == seq_on) & (with_sizes == sizes_on))
            if not len(g):
                continue
            fields = [("seq", sized.seq[g])] if seq_on else []
            fields.append(("op_id", sized.op_id[g]))
            part = assemble(len(g), [*json_pieces(fields), b',"sizes":"' if sizes_on else b"}"])
            if sizes_on:
                sizes = Packed(text.data, sized.sizes_start[g], sized.sizes_length[g])
                part = concat_rows([part, sizes, literal(len(g), b'"}')])
            parts.append(part)
            order.append(g)
    position = np.empty(n, dtype=np.int64)
    position[np.concatenate(order)] = np.arange(n)
    return Packed.concat(parts).take(position)


def _scatter(n: int, groups: list[tuple[I64, list[tuple[str, I64]]]]) -> Packed:
    """``n`` rows of args: each group's rows get ``{"key":value,...}``, the others none."""
    parts = [assemble(len(rows), [*json_pieces(fields), b"}"]) for rows, fields in groups]
    covered = np.concatenate([rows for rows, _ in groups]) if groups else np.zeros(0, np.int64)
    empty = np.setdiff1d(np.arange(n), covered, assume_unique=True)
    order = np.empty(n, dtype=np.int64)
    order[np.concatenate([covered, empty])] = np.arange(n)
    return Packed.concat([*parts, Packed.empty(len(empty))]).take(order)


def _payloads(
    exp: Export,
    names: Names,
    rowid: I64,
    args: Packed,
    json_payloads: dict[int, str],
    blob_payloads: dict[int, bytes],
) -> Packed:
    """NVTX payloads (few rows carry one): JSON text and binary blobs are kept by row for the
    NCCL reader; numeric and JSON payloads also go to the event's args."""
    cols = exp.columns(TABLE)
    numeric = [f'"{n}"' for n in _NUMERIC if n in cols]
    textual = [f'"{n}"' if n in cols else "NULL" for n in _TEXTUAL]
    value = f"COALESCE({', '.join(numeric)}, NULL)" if numeric else "NULL"
    cond = " OR ".join(f"{x} IS NOT NULL" for x in [*numeric, *textual] if x != "NULL")
    sql = f'SELECT rowid, {value}, {", ".join(textual)} FROM "{TABLE}" WHERE {cond}'
    new: dict[int, bytes] = {}
    for rid, num, js, jid, blob in exp.query(sql, TABLE):
        at = int(np.searchsorted(rowid, rid))
        if at >= len(rowid) or rowid[at] != rid:
            continue  # a row that is not a mark or a range
        if num is not None:
            new[at] = _ENCODE.encode({"payload": num})
        if js is None and jid is not None:
            js = names[int(names.from_ids(np.array([int(jid)], dtype=np.int64))[0])]
        if js is not None:
            json_payloads[at] = str(js)
            new[at] = _ENCODE.encode({"payload": str(js)})
        elif blob is not None:
            blob_payloads[at] = bytes(blob)
    return args.replace(new)


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
