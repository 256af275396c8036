"""Column-wise encoding of the pftrace event packets (slice begin/end, instant, counter).

Each packet is ``TracePacket{timestamp, trusted_packet_sequence_id=1, sequence_flags=
SEQ_NEEDS_INCREMENTAL_STATE, track_event}`` wrapped as one ``Trace.packet`` entry. Begin and
instant events carry the interned name and category, debug annotations for the key columns
(``correlation``, ``External id``; for collectives ``collective``, ``bytes``, ``group``, ``seq``;
``step`` on step slices) plus ``args``, the event's raw JSON args as a string, and the flows:
``flow_ids`` on a flow's source, ``terminating_flow_ids`` on its end.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import numpy as np
import numpy.typing as npt

from echo_view.model import NONE, CollectiveKind
from echo_view.model.columns import spans
from exporters.layout import ExportLayout
from exporters.protoevents import (
    COUNTER,
    FROM_COUNTER,
    FROM_EVENT,
    FROM_STEP,
    INSTANT,
    SLICE_BEGIN,
    Counters,
    Interned,
    Packets,
)
from exporters.protowire import U8, Rows, gathered, varint_bytes, varint_len, with_suffixes

I64 = npt.NDArray[np.int64]
Mask = npt.NDArray[np.bool_]

SEQUENCE_ID = 1
#: Interned debug annotation names; iid = position + 1 (all below 128: one-byte varints).
ANNOTATION_NAMES: tuple[str, ...] = (
    "args",
    "correlation",
    "External id",
    "collective",
    "bytes",
    "group",
    "seq",
    "step",
)
_ARGS, _CORR, _EXT, _COLL, _BYTES, _GROUP, _SEQ, _STEP = range(1, 9)

# Field keys (field number << 3 | wire type) of the fields written here.
_PACKET_HEAD = b"\x40"  # TracePacket.timestamp (8, varint)
_PACKET_MID = bytes([0x50, SEQUENCE_ID, 0x68, 0x02, 0x5A])  # seq id (10), flags (13), event (11)
_TYPE, _TRACK, _NAME, _CAT, _ANNOTATION = b"\x48", b"\x58", b"\x50", b"\x18", b"\x22"
#: Room left in front of each event for the packet header: tag, length, timestamp, sequence id,
#: flags, event tag and event length (at most 1 + 10 + 1 + 10 + 5 + 10 bytes).
_HEAD_ROOM = 40
_FLOW_OUT, _FLOW_END, _DOUBLE = b"\xf9\x02", b"\x81\x03", b"\xe1\x02"  # 47, 48, 44 (fixed64)


def _string_annotation(iid: int, text: str) -> bytes:
    data = text.encode()
    body = bytes([0x08, iid, 0x32]) + varint_bytes(len(data)) + data
    return _ANNOTATION + varint_bytes(len(body)) + body


def _int_annotation(rows: Rows, iid: int, values: I64, mask: Mask) -> None:
    rows.raw(_ANNOTATION, mask)
    rows.varint(3 + varint_len(values), mask)
    rows.raw(bytes([0x08, iid, 0x20]), mask)
    rows.varint(values, mask)


def _cat(parts: Sequence[npt.NDArray[Any]]) -> I64:
    return np.concatenate(parts).astype(np.int64) if parts else np.zeros(0, dtype=np.int64)


class PacketEncoder:
    """Encodes chunks of :class:`Packets` rows into pftrace bytes."""

    def __init__(self, layout: ExportLayout, interned: Interned, ctrs: Counters) -> None:
        self.interned = interned
        self.ctrs = ctrs
        first = interned.rank_first
        self.blobs = [rl.trace.events.args_blob for rl in layout.ranks]
        evs = [rl.trace.events for rl in layout.ranks]
        offs = [e.args_offsets if e.args_offsets is not None else np.zeros(1) for e in evs]
        # One sentinel row at the end (index = event count) for packets that are not events.
        none = [np.array([NONE], dtype=np.int64)]
        zero = [np.zeros(1, dtype=np.int64)]
        self.sentinel = int(first[-1])
        self.corr = _cat([e.correlation for e in evs] + none)
        self.ext = _cat([e.external_id for e in evs] + none)
        self.lo = _cat([o[:-1] for o in offs] + zero)
        self.hi = _cat([o[1:] for o in offs] + zero)
        rank = np.repeat(np.arange(len(evs)), np.diff(first)).astype(np.int64)
        self.rank = np.concatenate((rank, zero[0]))
        self.step_number = _cat([rl.trace.steps.number for rl in layout.ranks])
        self.kind_pool = [_string_annotation(_COLL, k.label) for k in CollectiveKind]
        self.group_pool: list[bytes] = []
        gev: list[I64] = []
        kind: list[npt.NDArray[Any]] = []
        nbytes: list[npt.NDArray[Any]] = []
        seq: list[npt.NDArray[Any]] = []
        group: list[npt.NDArray[Any]] = []
        for rl in layout.ranks:
            coll = rl.trace.collectives
            pool_of = []
            for pg in rl.trace.groups:
                pool_of.append(len(self.group_pool))
                self.group_pool.append(_string_annotation(_GROUP, pg.name))
            gev.append(coll.event.astype(np.int64) + first[rl.index])
            kind.append(coll.kind)
            nbytes.append(coll.bytes)
            seq.append(coll.seq)
            pools = np.array([*pool_of, NONE], dtype=np.int64)
            group.append(np.where(coll.group >= 0, pools[coll.group], NONE))
        all_gev = _cat(gev)
        _, keep = np.unique(all_gev, return_index=True)
        self.coll_gev = all_gev[keep]
        self.coll_kind = _cat(kind)[keep]
        self.coll_bytes = _cat(nbytes)[keep]
        self.coll_seq = _cat(seq)[keep]
        self.coll_group = _cat(group)[keep]
        links = layout.links
        src = first[links.src_rank] + links.src_event
        dst = first[links.dst_rank] + links.dst_event
        o, e = np.argsort(src, kind="stable"), np.argsort(dst, kind="stable")
        self.out_gev, self.out_id = src[o], links.flow_id[o]
        self.end_gev, self.end_id = dst[e], links.flow_id[e]

    @staticmethod
    def _flows(key: bytes, gevs: I64, ids: I64, gev: I64, mask: Mask) -> tuple[U8, I64]:
        """The ``key`` fields (fixed64 flow ids) of every row of ``mask``: their bytes, row after
        row, and each row's length. Written after the rows' fixed-width fields, not into them:
        one event may hold thousands of flows (a hostile trace), and a row of ``Rows`` that
        long widens every row."""
        n = len(gev)
        rows = np.flatnonzero(mask)
        lens = np.zeros(n, dtype=np.int64)
        if not len(gevs) or not len(rows):
            return np.zeros(0, dtype=np.uint8), lens
        lo = np.searchsorted(gevs, gev[rows], "left")
        cnt = np.searchsorted(gevs, gev[rows], "right") - lo
        total = int(cnt.sum())
        # Flow k of a row is ids[lo + k]: the ids of all rows' flows, in row order.
        flow_ids = ids[spans(lo, cnt)].astype("<i8")
        fields = np.empty((total, len(key) + 8), dtype=np.uint8)
        fields[:, : len(key)] = np.frombuffer(key, dtype=np.uint8)
        fields[:, len(key) :] = flow_ids.view(np.uint8).reshape(total, 8)
        lens[rows] = cnt * (len(key) + 8)
        return fields.reshape(-1), lens

    def _collectives(self, te: Rows, gev: I64, mask: Mask) -> tuple[U8, I64, I64, Mask]:
        """Write the ``collective`` and ``bytes`` annotations of the collectives among the rows
        of ``mask`` into ``te``. Return their ``group`` annotations (a group's name is the
        trace's text, of any length: they go to the tail), each row's bytes concatenated, and
        their lengths; then each row's ``seq`` and which rows have one."""
        rows = np.flatnonzero(mask)
        n = len(gev)
        none = (
            np.zeros(0, dtype=np.uint8),
            np.zeros(n, dtype=np.int64),
            np.zeros(n, dtype=np.int64),
            np.zeros(n, dtype=bool),
        )
        if not len(self.coll_gev) or not len(rows):
            return none
        pos = np.zeros(len(gev), dtype=np.int64)
        pos[rows] = np.minimum(np.searchsorted(self.coll_gev, gev[rows]), len(self.coll_gev) - 1)
        hit = mask & (self.coll_gev[pos] == gev)
        if not hit.any():
            return none
        te.pooled(self.kind_pool, self.coll_kind[pos], hit)
        nbytes = self.coll_bytes[pos]
        _int_annotation(te, _BYTES, nbytes, hit & (nbytes >= 0))
        group = self.coll_group[pos]
        names, name_len = gathered(self.group_pool, group, hit & (group >= 0))
        seq = self.coll_seq[pos]
        return names, name_len, seq, hit & (seq >= 0)

    def encode(self, packets: Packets, part: slice) -> bytes:
        """The bytes of packets ``part`` (in order)."""
        ts = packets.ts[part]
        typ = packets.type[part].astype(np.int64)
        src = packets.source[part]
        ref = packets.ref[part]
        n = len(ts)
        it = self.interned
        ev, st, ct = src == FROM_EVENT, src == FROM_STEP, src == FROM_COUNTER
        uuid = np.zeros(n, dtype=np.int64)
        uuid[ev] = it.uuid[ref[ev]]
        uuid[st] = it.step_uuid[ref[st]]
        uuid[ct] = self.ctrs.uuid[ref[ct]]
        named = (typ == SLICE_BEGIN) | (typ == INSTANT)
        name = np.zeros(n, dtype=np.int64)
        name[ev] = it.name_iid[ref[ev]]
        name[st] = it.step_name_iid[ref[st]]
        cat = np.full(n, it.step_cat_iid, dtype=np.int64)
        cat[ev] = it.cat_iid[ref[ev]]

        te = Rows(n, _HEAD_ROOM + 48, start=_HEAD_ROOM)
        te.raw(_TYPE)
        te.varint(typ)
        te.raw(_TRACK)
        te.varint(uuid)
        te.raw(_NAME, named)
        te.varint(name, named)
        te.raw(_CAT, named)
        te.varint(cat, named)
        evn = named & ev
        gev = np.where(ev, ref, self.sentinel)
        corr, ext = self.corr[gev], self.ext[gev]
        _int_annotation(te, _CORR, corr, evn & (corr != NONE))
        _int_annotation(te, _EXT, ext, evn & (ext != NONE))
        groups, group_len, seq, has_seq = self._collectives(te, gev, evn)
        step_no = np.zeros(n, dtype=np.int64)
        step_no[st] = self.step_number[ref[st]]
        _int_annotation(te, _STEP, step_no, named & st)
        begin = evn & (typ == SLICE_BEGIN)
        outs, out_len = self._flows(_FLOW_OUT, self.out_gev, self.out_id, gev, begin)
        ends, end_len = self._flows(_FLOW_END, self.end_gev, self.end_id, gev, begin)
        value = np.zeros(n, dtype=np.float64)
        value[ct] = self.ctrs.value[ref[ct]]
        ctr = typ == COUNTER
        te.raw(_DOUBLE, ctr)
        te.fixed64(value, ctr)

        lo, hi = self.lo[gev], self.hi[gev]
        has = evn & (hi > lo)
        size = np.where(has, hi - lo, 0)
        # Between the group's name and the arguments' text: the seq annotation and the header
        # of the arguments' annotation.
        mid = Rows(n, 48)
        _int_annotation(mid, _SEQ, seq, has_seq)
        mid.raw(_ANNOTATION, has)
        mid.varint(3 + varint_len(size) + size, has)
        mid.raw(bytes([0x08, _ARGS, 0x32]), has)
        mid.varint(size, has)
        rows = np.flatnonzero(has)
        blobs = self.blobs
        args = b"".join(
            [
                blobs[r][a:b]
                for r, a, b in zip(
                    self.rank[gev[rows]].tolist(), lo[rows].tolist(), hi[rows].tolist(), strict=True
                )
            ]
        )
        # Each TrackEvent ends in its variable-length fields, after the fixed-width ones: its
        # collective group's annotation, the seq and arguments' annotations (the text last),
        # then its flow ids (outgoing, then terminating). The field order is the same as when
        # all but the text and flows were fixed-width rows.
        flow_len = out_len + end_len
        flows = with_suffixes(outs, out_len, ends.tobytes(), end_len)
        args_flows = with_suffixes(np.frombuffer(args, np.uint8), size, flows, flow_len)
        head_len = group_len + mid.len
        heads = with_suffixes(groups, group_len, mid.flat().tobytes(), mid.len)
        tail_len = head_len + size + flow_len
        tail = with_suffixes(np.frombuffer(heads, np.uint8), head_len, args_flows, size + flow_len)
        te_len = te.len + tail_len

        head = Rows(n, _HEAD_ROOM)
        head.raw(b"\x0a")  # Trace.packet (1, length-delimited)
        head.varint(
            len(_PACKET_HEAD) + varint_len(ts) + len(_PACKET_MID) + varint_len(te_len) + te_len
        )
        head.raw(_PACKET_HEAD)
        head.varint(ts)
        head.raw(_PACKET_MID)
        head.varint(te_len)
        te.prepend(head)
        return with_suffixes(te.flat(), te.total_len(), tail, tail_len)
