"""Structural checks of a native Perfetto protobuf trace (``.pftrace``).

No trace processor runs offline, so the file is parsed with the ``perfetto`` package's
``perfetto_trace_pb2`` and checked the way the importer would use it: every track declared once
with a known parent, every event on a declared track, interned names defined on their
sequence, slices balanced per track (begin before end), flows that start and end.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable

import numpy as np
from google.protobuf.message import DecodeError  # type: ignore[import-untyped]
from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

from echo_view.units import ns_to_us_text
from echo_view.validate.findings import FileFacts, Finding, Location, Report, Severity, define

define(
    "EV111",
    Severity.ERROR,
    "protobuf trace cannot be parsed",
    "the file is not a Perfetto Trace message (or is cut short); write it again",
    fatal=True,
)
define(
    "EV112",
    Severity.ERROR,
    "track declared twice",
    "two TrackDescriptors share one uuid; give each track its own uuid",
)
define(
    "EV113",
    Severity.ERROR,
    "undeclared track",
    "an event (or a track's parent) names a track uuid that no TrackDescriptor declares",
)
define(
    "EV114",
    Severity.ERROR,
    "undefined interned id",
    "an event uses a name/category iid that its sequence never interned (or interned "
    "before SEQ_INCREMENTAL_STATE_CLEARED)",
)

#: The name ending of an XLA profile (an ``XSpace`` protobuf): jax.profiler and TensorBoard's
#: profile plugin write ``<host>.xplane.pb`` beside the trace's JSON.
XPLANE_SUFFIX = ".xplane.pb"

#: Builds the location of packet ``i`` (with its timestamp in ns, when known).
_Loc = Callable[..., Location]

_BEGIN = pb.TrackEvent.TYPE_SLICE_BEGIN
_END = pb.TrackEvent.TYPE_SLICE_END
_CLEARED = pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED


def check_pftrace(data: bytes, path: str, report: Report) -> None:
    """Report structural problems of the protobuf trace ``data`` read from ``path``."""
    trace = pb.Trace()
    facts = FileFacts(path=path, form="pftrace")
    report.files.append(facts)
    if not data:
        # An empty message parses as a trace of no packets: nothing Perfetto could show.
        facts.usable = False
        report.add(Finding("EV111", "empty file (0 bytes): no trace packets", Location(file=path)))
        return
    if path.endswith(XPLANE_SUFFIX):
        facts.usable = False
        msg = (
            "an XLA profile (XSpace, as jax.profiler and TensorBoard write it), not a Perfetto "
            "trace: check the *.trace.json.gz written beside it"
        )
        report.add(Finding("EV111", msg, Location(file=path)))
        return
    if data[:1] == b"\x00":
        # Field number 0 is invalid in protobuf: refused before the parser, which on an
        # all-zero file of gigabytes first allocates in proportion to it.
        facts.usable = False
        msg = "not a protobuf trace: byte 0 is a tag with field number 0 (all-zero data?)"
        report.add(Finding("EV111", msg, Location(file=path)))
        return
    try:
        trace.ParseFromString(data)
    except DecodeError as exc:
        facts.usable = False
        report.add(Finding("EV111", f"protobuf decode failed: {exc}", Location(file=path)))
        return
    facts.events = len(trace.packet)

    def loc(i: int, ts: int | None = None, where: str = "") -> Location:
        return Location(
            file=path,
            where=f"packet[{i}]" + (f" {where}" if where else ""),
            ts=ns_to_us_text(ts) if ts is not None else None,
        )

    uuids: dict[int, int] = {}
    parents: list[tuple[int, int]] = []
    names: dict[int, set[int]] = defaultdict(set)
    cats: dict[int, set[int]] = defaultdict(set)
    # Per track: (timestamp, packet index, is_end) of slice events; flows in packet order.
    slices: dict[int, list[tuple[int, int, bool]]] = defaultdict(list)
    flow_out: dict[int, int] = {}
    flow_end: list[tuple[int, int, int]] = []
    undeclared: list[tuple[int, int]] = []
    undefined: list[Finding] = []
    n_undefined = 0
    for i, packet in enumerate(trace.packet):
        seq = packet.trusted_packet_sequence_id
        if packet.sequence_flags & _CLEARED:
            names[seq].clear()
            cats[seq].clear()
        if packet.HasField("interned_data"):
            names[seq].update(e.iid for e in packet.interned_data.event_names)
            cats[seq].update(e.iid for e in packet.interned_data.event_categories)
        if packet.HasField("track_descriptor"):
            d = packet.track_descriptor
            if d.uuid in uuids:
                report.add(
                    Finding(
                        "EV112",
                        f"uuid {d.uuid} already declared at packet[{uuids[d.uuid]}]",
                        loc(i),
                    )
                )
            else:
                uuids[d.uuid] = i
            if d.HasField("parent_uuid"):
                parents.append((i, d.parent_uuid))
        if not packet.HasField("track_event"):
            continue
        ev = packet.track_event
        ts = packet.timestamp
        undeclared.append((i, ev.track_uuid))
        if ev.HasField("name_iid") and ev.name_iid not in names[seq]:
            n_undefined += 1
            if len(undefined) < report.keep:
                undefined.append(Finding("EV114", f"name_iid {ev.name_iid}", loc(i, ts)))
        for c in ev.category_iids:
            if c not in cats[seq]:
                n_undefined += 1
                if len(undefined) < report.keep:
                    undefined.append(Finding("EV114", f"category_iid {c}", loc(i, ts)))
        if ev.type in (_BEGIN, _END):
            slices[ev.track_uuid].append((ts, i, ev.type == _END))
        for fid in ev.flow_ids:
            flow_out[fid] = i
        for fid in ev.terminating_flow_ids:
            flow_end.append((i, fid, ts))
    report.add_many("EV114", n_undefined, undefined)
    for i, parent in parents:
        if parent not in uuids:
            report.add(Finding("EV113", f"parent_uuid {parent} is not declared", loc(i)))
    missing = [(i, u) for i, u in undeclared if u and u not in uuids]
    report.add_many(
        "EV113",
        len(missing),
        (Finding("EV113", f"track_uuid {u} is not declared", loc(i)) for i, u in missing),
    )
    _balance(slices, report, loc)
    _flows(flow_out, flow_end, trace, report, loc)


def _balance(slices: dict[int, list[tuple[int, int, bool]]], report: Report, loc: _Loc) -> None:
    no_begin: list[Finding] = []
    open_: list[Finding] = []
    n_no_begin = n_open = 0
    for track, evs in slices.items():
        arr = np.array(evs, dtype=np.int64)
        order = np.lexsort((arr[:, 1], arr[:, 0]))
        depth = 0
        opened: list[tuple[int, int]] = []
        for ts, i, is_end in arr[order].tolist():
            if is_end:
                if depth == 0:
                    n_no_begin += 1
                    if len(no_begin) < report.keep:
                        no_begin.append(
                            Finding(
                                "EV302",
                                f"slice end on track {track} with no open slice",
                                loc(i, ts),
                            )
                        )
                    continue
                depth -= 1
                opened.pop()
            else:
                depth += 1
                opened.append((i, ts))
        n_open += len(opened)
        for i, ts in opened[: max(0, report.keep - len(open_))]:
            open_.append(
                Finding("EV303", f"slice begin on track {track} is never ended", loc(i, ts))
            )
    report.add_many("EV302", n_no_begin, no_begin)
    report.add_many("EV303", n_open, open_)


def _flows(
    flow_out: dict[int, int],
    flow_end: list[tuple[int, int, int]],
    trace: pb.Trace,
    report: Report,
    loc: _Loc,
) -> None:
    ended = {fid for _, fid, _ in flow_end}
    dangling = [(i, fid) for fid, i in flow_out.items() if fid not in ended]
    dangling.sort()
    report.add_many(
        "EV401",
        len(dangling),
        (Finding("EV401", f"flow id {fid} is never terminated", loc(i)) for i, fid in dangling),
    )
    orphan = [(i, fid, ts) for i, fid, ts in flow_end if fid not in flow_out]
    report.add_many(
        "EV402",
        len(orphan),
        (
            Finding("EV402", f"terminating flow id {fid} never started", loc(i, ts))
            for i, fid, ts in orphan
        ),
    )
