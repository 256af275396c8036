"""Independent readers and checkers for exported Perfetto files (JSON and pftrace).

They re-implement the parts of Perfetto's importers the exports rely on, without sharing code
with the exporters: exact ``ts``/``dur`` parsing, the ``X`` sort order and nesting rule per
(pid, tid), v1 flow binding (``s`` to the deepest open slice, ``f`` with ``"bp":"e"`` to the
enclosing one), and for pftrace: interned names, begin/end stacks per track and flow pairing.
"""

from __future__ import annotations

import gzip
import json
import re
from collections import defaultdict
from dataclasses import dataclass, field
from decimal import Decimal
from pathlib import Path
from typing import Any

from perfetto.protos.perfetto.trace import perfetto_trace_pb2 as pb

TIME_TEXT = re.compile(rb'"(?:ts|dur)":(-?[0-9.eE+]+)')
EXACT_US = re.compile(rb"^\d+\.\d{3}$")


def read_bytes(path: Path) -> bytes:
    data = path.read_bytes()
    return gzip.decompress(data) if data[:2] == b"\x1f\x8b" else data


def load_json(path: Path) -> dict[str, Any]:
    """The document, with numbers as Decimal (so µs text converts to exact ns)."""
    doc: dict[str, Any] = json.loads(read_bytes(path), parse_float=Decimal)
    return doc


def inexact_times(path: Path) -> list[bytes]:
    """``ts``/``dur`` texts that are not ``<int>.<3 digits>``."""
    return [m for m in TIME_TEXT.findall(read_bytes(path)) if not EXACT_US.match(m)]


def ns(value: Any) -> int:
    return int(Decimal(value) * 1000)


@dataclass
class Slice:
    thread: tuple[int, int]
    ts: int
    dur: int
    name: str
    cat: str
    order: int
    args: dict[str, Any] = field(default_factory=dict)

    @property
    def end(self) -> int:
        return self.ts + self.dur


def json_slices(doc: dict[str, Any]) -> list[Slice]:
    """All ``X`` events in file order."""
    return [
        Slice((e["pid"], e["tid"]), ns(e["ts"]), ns(e["dur"]), e["name"], e["cat"], i, e["args"])
        for i, e in enumerate(doc["traceEvents"])
        if e.get("ph") == "X"
    ]


def by_thread(slices: list[Slice]) -> dict[tuple[int, int], list[Slice]]:
    """Slices per thread in Perfetto's order: start, longest first, file order."""
    out: dict[tuple[int, int], list[Slice]] = defaultdict(list)
    for s in slices:
        out[s.thread].append(s)
    for lst in out.values():
        lst.sort(key=lambda s: (s.ts, -s.dur, s.order))
    return out


def partial_overlaps(slices: list[Slice]) -> list[tuple[Slice, Slice]]:
    """(open slice, slice that starts inside it and ends after it), per thread."""
    bad = []
    for lst in by_thread(slices).values():
        stack: list[Slice] = []
        for s in lst:
            while stack and stack[-1].end <= s.ts:
                stack.pop()
            if stack and s.end > stack[-1].end:
                bad.append((stack[-1], s))
                continue
            stack.append(s)
    return bad


def deepest_open(lst: list[Slice], ts: int) -> Slice | None:
    """The innermost slice open at ``ts`` (``X`` at ``ts`` already begun) on one thread."""
    stack: list[Slice] = []
    for s in lst:
        if s.ts > ts:
            break
        while stack and (stack[-1].end < s.ts or (stack[-1].end == s.ts and stack[-1].dur > 0)):
            stack.pop()
        stack.append(s)
    while stack and (stack[-1].end <= ts if stack[-1].dur > 0 else stack[-1].ts != ts):
        stack.pop()
    return stack[-1] if stack else None


@dataclass
class Flow:
    id: int
    cat: str
    source: Slice | None
    end: Slice | None
    src_ts: int
    end_ts: int


def json_flows(doc: dict[str, Any]) -> list[Flow]:
    """Each v1 flow with the slices Perfetto binds its ``s`` and ``f`` to."""
    threads = by_thread(json_slices(doc))
    starts: dict[tuple[int, str, str], dict[str, Any]] = {}
    ends: dict[tuple[int, str, str], dict[str, Any]] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") in ("s", "f"):
            key = (e["id"], e["cat"], e["name"])
            table = starts if e["ph"] == "s" else ends
            assert key not in table, f"duplicate flow {key}"
            table[key] = e
            if e["ph"] == "f":
                assert e.get("bp") == "e"
    assert starts.keys() == ends.keys()
    out = []
    for key, s in starts.items():
        f = ends[key]
        src = deepest_open(threads.get((s["pid"], s["tid"]), []), ns(s["ts"]))
        dst = deepest_open(threads.get((f["pid"], f["tid"]), []), ns(f["ts"]))
        out.append(Flow(key[0], key[1], src, dst, ns(s["ts"]), ns(f["ts"])))
    return out


def metadata_names(doc: dict[str, Any]) -> tuple[dict[int, str], dict[tuple[int, int], str]]:
    procs: dict[int, str] = {}
    threads: dict[tuple[int, int], str] = {}
    for e in doc["traceEvents"]:
        if e.get("ph") == "M" and e["name"] == "process_name":
            procs[e["pid"]] = e["args"]["name"]
        elif e.get("ph") == "M" and e["name"] == "thread_name":
            threads[(e["pid"], e["tid"])] = e["args"]["name"]
    return procs, threads


# ---------------------------------------------------------------- pftrace


@dataclass
class ProtoSlice:
    track: int
    ts: int
    dur: int
    name: str
    cat: str
    depth: int
    annotations: dict[str, Any]
    flow_out: list[int]
    flow_end: list[int]


@dataclass
class ProtoTrace:
    slices: list[ProtoSlice]
    instants: list[ProtoSlice]
    counters: list[tuple[int, int, float]]
    tracks: dict[int, pb.TrackDescriptor]
    errors: list[str]


def _annotations(event: Any, names: dict[int, str]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for a in event.debug_annotations:
        key = a.name if a.HasField("name") else names[a.name_iid]
        out[key] = a.string_value if a.HasField("string_value") else a.int_value
    return out


def read_pftrace(path: Path) -> ProtoTrace:
    """Parse with perfetto_trace_pb2 and rebuild slices from begin/end stacks per track."""
    trace = pb.Trace.FromString(path.read_bytes())
    event_names: dict[int, str] = {}
    cats: dict[int, str] = {}
    ann_names: dict[int, str] = {}
    tracks: dict[int, Any] = {}
    stacks: dict[int, list[ProtoSlice]] = defaultdict(list)
    slices: list[ProtoSlice] = []
    instants: list[ProtoSlice] = []
    counters: list[tuple[int, int, float]] = []
    errors: list[str] = []
    cleared = False
    last_ts = -1
    for i, p in enumerate(trace.packet):
        if p.trusted_packet_sequence_id != 1:
            errors.append(f"packet {i} has no trusted_packet_sequence_id 1")
        if p.sequence_flags & pb.TracePacket.SEQ_INCREMENTAL_STATE_CLEARED:
            cleared = True
        if p.HasField("interned_data"):
            for n in p.interned_data.event_names:
                event_names[n.iid] = n.name
            for n in p.interned_data.event_categories:
                cats[n.iid] = n.name
            for n in p.interned_data.debug_annotation_names:
                ann_names[n.iid] = n.name
        if p.HasField("track_descriptor"):
            tracks[p.track_descriptor.uuid] = p.track_descriptor
        if not p.HasField("track_event"):
            continue
        te = p.track_event
        interned = te.HasField("name_iid") or len(te.category_iids) > 0
        needs = p.sequence_flags & pb.TracePacket.SEQ_NEEDS_INCREMENTAL_STATE
        if interned and not (cleared and needs):
            errors.append(f"packet {i} uses interned data without incremental state")
        if te.track_uuid not in tracks:
            errors.append(f"packet {i} is on undeclared track {te.track_uuid}")
        if p.timestamp < last_ts:
            errors.append(f"packet {i} goes back in time")
        last_ts = p.timestamp
        name = te.name if te.HasField("name") else event_names.get(te.name_iid, "?")
        cat = ",".join(cats[c] for c in te.category_iids)
        stack = stacks[te.track_uuid]
        if te.type in (pb.TrackEvent.TYPE_SLICE_BEGIN, pb.TrackEvent.TYPE_INSTANT):
            s = ProtoSlice(
                te.track_uuid,
                p.timestamp,
                -1 if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN else 0,
                name,
                cat,
                len(stack),
                _annotations(te, ann_names),
                list(te.flow_ids),
                list(te.terminating_flow_ids),
            )
            if te.type == pb.TrackEvent.TYPE_SLICE_BEGIN:
                stack.append(s)
            else:
                instants.append(s)
        elif te.type == pb.TrackEvent.TYPE_SLICE_END:
            if not stack:
                errors.append(f"packet {i}: end without begin on track {te.track_uuid}")
                continue
            s = stack.pop()
            s.dur = p.timestamp - s.ts
            slices.append(s)
        elif te.type == pb.TrackEvent.TYPE_COUNTER:
            counters.append((te.track_uuid, p.timestamp, te.double_counter_value))
    for uuid, stack in stacks.items():
        if stack:
            errors.append(f"{len(stack)} slices never end on track {uuid}")
    return ProtoTrace(slices, instants, counters, tracks, errors)


def proto_flow_pairs(
    slices: list[ProtoSlice],
) -> tuple[dict[int, ProtoSlice], dict[int, ProtoSlice]]:
    """flow id -> source slice, flow id -> end slice (each id must appear once on each side)."""
    out: dict[int, ProtoSlice] = {}
    end: dict[int, ProtoSlice] = {}
    for s in slices:
        for f in s.flow_out:
            assert f not in out, f"flow {f} starts twice"
            out[f] = s
        for f in s.flow_end:
            assert f not in end, f"flow {f} ends twice"
            end[f] = s
    return out, end
